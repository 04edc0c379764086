"""The hook of a pytest session that runs in a detached runner's container: each report (an
example finished, an item ended) wakes the runner, which commits the Volume at once."""

from __future__ import annotations

import pytest

from pytest_modal_eval.detach.commit_signal import CommitSignal

#: The name :class:`ContainerSession` is registered under.
CONTAINER_PLUGIN = "modal_eval_container"


class ContainerSession:
    """Registered by ``plugin.pytest_configure`` on the controller (or the only process) when
    the runner handed it a commit signal (:mod:`pytest_modal_eval.detach.commit_signal`)."""

    def __init__(self, signal: CommitSignal) -> None:
        self.signal = signal

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Runs on the controller after the report is kept (the example's record is in its
        checkpoint by then): the Volume is committed with it."""
        self.signal.notify()

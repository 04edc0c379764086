"""Collection's part in paying for servers only while they are needed.

Runs in every process that collects (in-process, or each xdist worker): items that share a
server profile are put next to each other, and the plan (which item needs which profile) goes
to the process that owns the servers (see :mod:`pytest_modal_eval.serving.deployments`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_modal_eval.collect.context import endpoint_source
from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.serving.deployments import (
    ANY_PROFILE,
    Deployments,
    group_by_profile,
    profile_key,
)

#: The fixture through which a user's test may ask for any profile's endpoint.
ENDPOINT_FIXTURE = "eval_endpoint"


class ServerPlan:
    """In every process (driven by its session's hooks): orders items by profile, sends the
    plan, and knows which item is running (the holder of the servers it asks for)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.current: str | None = None  # node id of the item running in this process

    def _profile(self, item: pytest.Item) -> str | None:
        if isinstance(item, BenchmarkItem):
            return profile_key(item.server_request)
        if ENDPOINT_FIXTURE in getattr(item, "fixturenames", ()):
            return ANY_PROFILE
        return None

    def order(self, items: list[pytest.Item]) -> None:
        """After collection (after other plugins' reordering) in every collecting process:
        benchmark items of one server profile become neighbours."""
        keys = {
            id(item): key
            for item in items
            if isinstance(item, BenchmarkItem) and (key := self._profile(item)) is not None
        }
        items[:] = group_by_profile(items, keys)

    def send(self, items: list[pytest.Item]) -> None:
        """Once the selection is final: tells the server owner which item needs what."""
        needs = {item.nodeid: key for item in items if (key := self._profile(item)) is not None}
        if needs:
            endpoint_source(self.config).plan(needs)

    @contextmanager
    def running(self, item: pytest.Item) -> Iterator[None]:
        """Around each item, in the process running it."""
        self.current = item.nodeid
        try:
            yield
        finally:
            self.current = None


class FinishedItems:
    """Where the servers are owned (the controller, or in-process without xdist): tells
    :class:`Deployments` when an item is over, so that a server no unfinished item needs is
    stopped."""

    def __init__(self, deployments: Deployments) -> None:
        self.deployments = deployments

    def add(self, report: pytest.TestReport) -> None:
        """A report, on the controller (and in-process): an item's teardown, or xdist's report
        of a crashed worker's item ("???"), means the item is over."""
        if report.when in ("teardown", "???") and not hasattr(report, "context"):
            self.deployments.finished(report.nodeid)


PLAN_KEY = pytest.StashKey[ServerPlan]()

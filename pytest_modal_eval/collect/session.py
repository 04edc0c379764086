"""The per-process plugin object: settings and shared state; the work is in item_run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.serving.endpoint_check import EndpointChecker

if TYPE_CHECKING:
    from pytest_modal_eval.collect.items import BenchmarkItem


@dataclass
class EvalSession:
    config: pytest.Config
    settings: Settings
    checker: EndpointChecker = field(default_factory=EndpointChecker)

    def prepare(self, item: BenchmarkItem) -> None:
        """Runs in the item's setup, on the process running it: checks, then the endpoint."""
        from pytest_modal_eval.collect import item_run

        item_run.prepare(self, item)

    def evaluate(self, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
        """The call phase: every example as a subtest, then the gate."""
        from pytest_modal_eval.collect import item_run

        item_run.evaluate(self, item, subtests, snapshot)

    def release(self, item: BenchmarkItem) -> None:
        """The item's teardown: drops what setup prepared, if the call did not take it."""
        from pytest_modal_eval.collect import item_run

        item_run.release(item)

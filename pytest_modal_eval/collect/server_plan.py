"""Collection's part in paying for servers only while they are needed.

Runs in every process that collects (in-process, or each xdist worker): items that share a
server profile are put next to each other, and the plan (which item needs which profile) goes
to the process that owns the servers (see :mod:`pytest_modal_eval.serving.deployments`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.serving.deployments import (
    ANY_PROFILE,
    endpoint_source,
    group_by_profile,
    profile_key,
)
from pytest_modal_eval.serving.endpoint import ServerRequest

#: The fixture through which a user's test may ask for any profile's endpoint.
ENDPOINT_FIXTURE = "eval_endpoint"


class ServerPlan:
    """Registered in every process: orders items by profile, sends the plan, and knows which
    item is running (the holder of the servers it asks for)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.current: str | None = None  # node id of the item running in this process

    def _profile(self, item: pytest.Item) -> str | None:
        if isinstance(item, BenchmarkItem):
            request = ServerRequest.for_benchmark(self.settings, item.benchmark, item.model)
            return profile_key(request)
        if ENDPOINT_FIXTURE in getattr(item, "fixturenames", ()):
            return ANY_PROFILE
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Runs after collection (last, so after other plugins' reordering) in every collecting
        process: benchmark items of one server profile become neighbours."""
        keys = {
            id(item): key
            for item in items
            if isinstance(item, BenchmarkItem) and (key := self._profile(item)) is not None
        }
        items[:] = group_by_profile(items, keys)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Runs once the selection is final: tells the server owner which item needs what."""
        needs = {
            item.nodeid: key for item in session.items if (key := self._profile(item)) is not None
        }
        if needs:
            endpoint_source(self.config).plan(needs)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, Any]:
        """Runs around each item in the process running it."""
        self.current = item.nodeid
        try:
            return (yield)
        finally:
            self.current = None


PLAN_KEY = pytest.StashKey[ServerPlan]()

"""The selected benchmarks' plans under ``pytest --collect-only -v`` (``report/plan.py`` words
each), printed on the controller after the collected items."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_modal_eval.collect.items import LOADED_KEY, BenchmarkItem

if TYPE_CHECKING:
    import pytest

    from pytest_modal_eval.collect.context import EvalContext


class BenchmarkPlans:
    """The benchmarks of the final selection, one plan each (however many models)."""

    def __init__(self, session: EvalContext) -> None:
        self.session = session
        self.items: list[BenchmarkItem] = []

    def add(self, items: list[pytest.Item]) -> None:
        """The selection, once final (after ``-k``, ``-m`` and other plugins' deselection):
        the benchmarks whose environment was loaded (not under ``--eval-collect-quick``)."""
        self.items += [
            item for item in items if isinstance(item, BenchmarkItem) and LOADED_KEY in item.stash
        ]

    def write(self, terminalreporter: Any) -> None:
        if not self.items:
            return
        from pytest_modal_eval.report.plan import plan_lines
        from pytest_modal_eval.terminal_text import escape

        by_file: dict[str, list[BenchmarkItem]] = {}
        for item in self.items:
            by_file.setdefault(str(item.path), []).append(item)
        terminalreporter.section("benchmark plans")
        for items in by_file.values():
            first = items[0]
            models = [item.model for item in items if item.model is not None]
            terminalreporter.write_line(escape(first.nodeid.split("::")[0]))
            lines = plan_lines(
                first.benchmark,
                models,
                self.session.settings,
                first.stash[LOADED_KEY].example_ids,
                self.session.redactor,
                self.session.config.rootpath,
            )
            for line in lines:
                terminalreporter.write_line(escape(f"  {line}"))

"""One subtest report per example, at a cost that stays small next to the example itself.

``subtests.test()`` starts and stops output and log capture for every subtest (two temporary
files, a logging handler) and builds each report from scratch: ~0.2 ms per subtest, which is
2 s to re-report 10,000 finished examples on a resumed run. An example's subtest body is the
plugin's own code and prints nothing, so a *passed* example's report is made here without the
capture: from one template report of the item, through pytest's public report
(de)serialization hooks, and logged with ``pytest_runtest_logreport`` as ``subtests.test()``
logs it. The report is the same object type with the same fields (``SubtestReport``, message,
keyword values), so terminal lines, ``-v`` output, JUnit XML and xdist see no difference.
Errored examples still go through ``subtests.test()`` (they fail or skip with a reason).

Each report carries its status (``runs.example_status``) as the ``status`` keyword;
:class:`ExampleStatusWords` turns it into the word ``-v`` prints: SOLVED, PARTIAL, MISSED or
ERRORED. A missed example's report still has the outcome ``passed`` -- a miss is a measurement,
and only the gate fails the item -- but it is counted apart, as ``subtests missed``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from pytest_modal_eval.report.progress import ELAPSED_KEY
from pytest_modal_eval.runs.example_status import ERRORED, MISSED, PARTIAL, SOLVED

STATUS_KEY = "status"  # the subtest keyword that carries it

#: The terminal category (counted in the last line) of each status whose report passed.
_CATEGORIES = {SOLVED: "subtests passed", PARTIAL: "subtests passed", MISSED: "subtests missed"}
_MARKUP = {SOLVED: "green", PARTIAL: "cyan", MISSED: "yellow", ERRORED: "red"}


class ExampleStatusWords:
    """Shows each example subtest by its status: ``SOLVED``/``PARTIAL``/``MISSED``/``ERRORED``.

    Asked in every process, wherever a report is shown (the controller under xdist), before
    pytest's subtests plugin answers. Only the plugin's example subtests (an ``eval`` item's,
    with a ``status`` keyword) are touched; None leaves everything else to pytest.
    """

    def status(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str | tuple[str, dict[str, bool]]] | None:
        """The report's category, letter and word, or None when it is not an example's."""
        context = getattr(report, "context", None)
        kwargs = getattr(context, "kwargs", None)
        if report.when != "call" or not isinstance(kwargs, dict) or "eval" not in report.keywords:
            return None
        # Keyword values arrive as their repr (subtests.test() stores them so for xdist).
        status = str(kwargs.get(STATUS_KEY, "")).strip("'\"")
        if status not in _MARKUP:
            return None
        if report.failed or report.skipped:
            status = ERRORED
        # Failed and skipped (errored) examples keep the categories pytest gives them.
        category = _CATEGORIES[status] if report.passed else report.outcome
        letter = "-" if report.skipped else "m" if status == MISSED else "u"
        if config.get_verbosity(pytest.Config.VERBOSITY_SUBTESTS) == 0 and not report.failed:
            # Quiet: nothing per example, as pytest does for passed subtests; misses are still
            # counted in the last line.
            return (category, "", "") if status == MISSED else ("", "", "")
        msg = getattr(context, "msg", None)
        parts = [f"[{msg}]"] if msg is not None else []
        shown = {k: v for k, v in kwargs.items() if k not in (STATUS_KEY, ELAPSED_KEY)}
        if shown:
            parts.append("(" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")")
        word = f"{status.upper()} {' '.join(parts)}".rstrip()
        return category, letter, (word, {_MARKUP[status]: True})


class PassedExampleLog:
    """Logs passed example subtests of one item (see the module docstring)."""

    def __init__(self, item: pytest.Item) -> None:
        self._item = item
        config = item.config
        self._hook = config.hook
        self._config = config
        self._ihook = item.ihook  # a lookup per access; the item's hooks do not change
        call = pytest.CallInfo.from_call(lambda: None, when="call")
        report = self._ihook.pytest_runtest_makereport(item=item, call=call)
        self._template: dict[str, Any] = config.hook.pytest_report_to_serializable(
            config=config, report=report
        )
        # The marker of a plain TestReport; "_report_type" below makes it a subtest's.
        self._template.pop("$report_type", None)
        capman = config.pluginmanager.get_plugin("capturemanager")
        # The terminal reporter writes to the real terminal, as subtests.test() arranges.
        self._suspend_capture: Callable[[], contextlib.AbstractContextManager[None]] = (
            capman.global_and_fixture_disabled if capman is not None else contextlib.nullcontext
        )

    def log(self, msg: str, **kwargs: str) -> None:
        now = time.time()
        data = {
            **self._template,
            "start": now,
            "stop": now,
            "duration": 0.0,
            "sections": [],
            "user_properties": list(self._item.user_properties),
            "_report_type": "SubTestReport",
            # Deserializing stores each keyword value as its repr, as subtests.test() does.
            "_subtest.context": {"msg": msg, "kwargs": kwargs},
        }
        report = self._hook.pytest_report_from_serializable(config=self._config, data=data)
        with self._suspend_capture():
            self._ihook.pytest_runtest_logreport(report=report)


class _PassedExample:
    """What pytest still reads of a passed example's subtest report once it is logged: that
    it passed (for the counts of the last summary line). Shared by every such report.

    It keeps an (empty) ``__dict__``: other plugins read ``report.__dict__`` of every report
    in their terminal summary (hypothesis's does, and fails on a report without one)."""

    when = "call"
    outcome = "passed"
    passed = True
    failed = False
    skipped = False
    count_towards_summary = True


_PASSED_EXAMPLE = _PassedExample()


class PassedExampleReports:
    """Stops pytest from keeping one full report per passed example for the whole session.

    pytest's terminal reporter keeps every report it is given in ``stats`` until the end, for
    the summary; one subtest report per example is ~1.1 kB, so 100,000 examples held ~110 MB.
    Once a passed example's report has been through every ``pytest_runtest_logreport``
    implementation (JUnit XML, xdist, the terminal line), its entry in ``stats`` is replaced by
    one shared stand-in that still counts as a passed subtest. Failed and skipped examples keep
    their full reports: the summary shows them.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def forget(self, report: pytest.TestReport) -> None:
        """After every ``pytest_runtest_logreport`` implementation has seen ``report``, on every
        process that logs reports."""
        if isinstance(report, pytest.SubtestReport) and report.passed and "eval" in report.keywords:
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            for reports in getattr(reporter, "stats", {}).values():
                if reports and reports[-1] is report:
                    reports[-1] = _PASSED_EXAMPLE
                    break

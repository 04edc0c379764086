"""The session's HTML report: written on the controller when the session ends.

Each benchmark's call report carries its run directory and figures as ``user_properties``
(plain values, so they cross xdist); the page itself is built by :mod:`.html` from the run
directories, as ``pytest-modal-eval report`` builds it from stored runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_modal_eval.report.html import SessionFigures

# report.html (jinja2, the run readers) is imported once a benchmark has reported: the plugin
# registers this class in every session, most of which have no benchmark.


class SessionReport:
    """Registered on the controller (or the only process) as ``modal_eval_report``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.runs: list[tuple[Path, SessionFigures]] = []
        self.outcome: str | None = None

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Runs on the controller: keeps each benchmark's run directory and figures."""
        if report.when != "call" or isinstance(report, pytest.SubtestReport):
            return
        props = dict(report.user_properties)
        if "run_dir" not in props:
            return
        self.runs.append((Path(str(props["run_dir"])), figures(props)))

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Runs on the controller once every benchmark has reported: writes the page."""
        if not self.runs:
            return
        from pytest_modal_eval.report.html import ReportError, write_report

        started = time.monotonic()
        try:
            write_report(self.path, sorted(self.runs, key=lambda run: str(run[0])))
        except (ReportError, OSError) as exc:
            self.outcome = f"evaluation report not written: {exc}"
            return
        self.outcome = f"evaluation report: {self.path} ({time.monotonic() - started:.1f}s)"

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Runs on the controller: says where the page is."""
        if self.outcome is not None and terminalreporter.config.get_verbosity() >= -1:
            terminalreporter.write_line(self.outcome)


def figures(props: dict[str, Any]) -> SessionFigures:
    """What ``report/terminal.py``'s ``record_properties`` put on a benchmark's report."""
    from pytest_modal_eval.report.html import SessionFigures

    threshold = props.get("threshold")
    comparison = None
    if "baseline_mean" in props:
        comparison = {
            "label": "stored baseline",
            "test": props.get("baseline_test"),
            "n_shared": props.get("baseline_shared_examples"),
            "baseline_mean": props.get("baseline_mean"),
            "diff": props.get("baseline_diff"),
            "diff_ci_low": props.get("baseline_diff_ci_low"),
            "diff_ci_high": props.get("baseline_diff_ci_high"),
            "p_value": props.get("baseline_p_value"),
            "solved_to_missed": _ids(props.get("solved_to_missed")),
            "missed_to_solved": _ids(props.get("missed_to_solved")),
        }
    return SessionFigures(
        threshold=float(threshold) if isinstance(threshold, (int, float)) else None,
        verdict=str(props["verdict"]) if "verdict" in props else None,
        elapsed_s=float(props["elapsed_s"]) if "elapsed_s" in props else None,
        comparison=comparison,
    )


def _ids(value: Any) -> list[str]:
    return [part for part in str(value or "").split(",") if part]

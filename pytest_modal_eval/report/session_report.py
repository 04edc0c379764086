"""The session's HTML report: written on the controller when the session ends.

Each benchmark's call report carries its run directory and figures as ``user_properties``
(plain values, so they cross xdist); the page itself is built by :mod:`.html` from the run
directories, as ``pytest-modal-eval report`` builds it from stored runs.

A run Ctrl-C cut short has no call report and no final files: the item that ran it names its
directory in ``interrupted`` (the session's list, filled in the process that ran the item), and
the page shows what its checkpoint keeps, marked unfinished.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.report.page import SessionFigures

# report.html (jinja2, the run readers) is imported once a benchmark has reported: the plugin
# registers this class in every session, most of which have no benchmark.


class SessionReport:
    """Driven on the controller (or the only process) by its session: keeps each benchmark's
    run, writes the page when the session ends, and says where it is."""

    def __init__(
        self, path: Path, redactor: Redactor, interrupted: list[str] | None = None
    ) -> None:
        self.path = path
        self.redactor = redactor
        self.runs: list[tuple[Path, SessionFigures]] = []
        self.interrupted = interrupted if interrupted is not None else []
        self.outcome: str | None = None

    def add(self, report: pytest.TestReport) -> None:
        """A report, on the controller: keeps each benchmark's run directory and figures (a
        subtest report, which has a ``context``, is an example's)."""
        if report.when != "call" or hasattr(report, "context"):
            return
        props = dict(report.user_properties)
        if "run_dir" not in props:
            return
        from pytest_modal_eval.runs.paths import reported_run_dir

        self.runs.append((reported_run_dir(str(props["run_dir"])), figures(props)))

    def write(self) -> None:
        """On the controller once every benchmark has reported, or Ctrl-C ended the session:
        writes the page, with the runs Ctrl-C cut short marked unfinished."""
        runs = list(self.runs)
        cut_short = list(dict.fromkeys(self.interrupted))
        if cut_short:
            from pytest_modal_eval.report.page import SessionFigures

            reported = {run_dir for run_dir, _ in runs}
            runs += [
                (Path(run_dir), SessionFigures(interrupted=True))
                for run_dir in cut_short
                if Path(run_dir) not in reported
            ]
        if not runs:
            return
        from pytest_modal_eval.exceptions import EvalProblem
        from pytest_modal_eval.report.html import write_report
        from pytest_modal_eval.report.page import ReportError

        started = time.monotonic()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_report(
                self.path, sorted(runs, key=lambda run: str(run[0])), redactor=self.redactor
            )
        except (ReportError, EvalProblem, OSError) as exc:
            self.outcome = f"evaluation report not written: {exc}"
            return
        partial = ""
        if cut_short:
            cut = len(cut_short)
            partial = f" (partial: {cut} run{'' if cut == 1 else 's'} interrupted, unfinished)"
        took = time.monotonic() - started
        self.outcome = f"evaluation report{partial}: {self.path} ({took:.1f}s)"

    def say_where(self, terminalreporter: Any) -> None:
        """On the controller, in the terminal summary: says where the page is."""
        if self.outcome is not None and terminalreporter.config.get_verbosity() >= -1:
            terminalreporter.write_line(self.outcome)


def figures(props: dict[str, Any]) -> SessionFigures:
    """What ``report/terminal.py``'s ``record_properties`` put on a benchmark's report."""
    from pytest_modal_eval.report.page import SessionFigures

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
            "confidence": props.get("baseline_diff_ci_level"),
            "max_drop": props.get("baseline_max_drop"),
            "p_value": props.get("baseline_p_value"),
            "solved_to_missed": _ids(props.get("solved_to_missed")),
            "missed_to_solved": _ids(props.get("missed_to_solved")),
        }
    return SessionFigures(
        threshold=float(threshold) if isinstance(threshold, (int, float)) else None,
        verdict=str(props["verdict"]) if "verdict" in props else None,
        failed_by=tuple(_ids(props.get("gate_failed"))),
        comparison=comparison,
    )


def _ids(value: Any) -> list[str]:
    return [part for part in str(value or "").split(",") if part]

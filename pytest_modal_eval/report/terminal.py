"""Per-benchmark figures: JUnit properties on the item, a summary table on the controller."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_modal_eval.judge.gate import Verdict
    from pytest_modal_eval.runs.evaluation import RunOutcome
    from pytest_modal_eval.stats.summary import PairedComparison

#: Properties are named plainly in JUnit XML; this prefix marks the few internal ones.
PROPERTY_PREFIX = "modal_eval_"


def record_properties(
    item: pytest.Item,
    outcome: RunOutcome,
    verdict: Verdict,
    model: str,
    elapsed: float,
    comparison: PairedComparison | None = None,
) -> None:
    """Attach the figures as ``user_properties`` (str/int/float only: they cross xdist)."""
    s = outcome.summary
    threshold = item.benchmark.config.gate.min_avg_reward  # type: ignore[attr-defined]
    props: list[tuple[str, Any]] = [
        ("benchmark", item.benchmark.name),  # type: ignore[attr-defined]
        ("model", model),
        ("avg_reward", _num(s.mean) if s else "nan"),
        ("stderr", _num(s.stderr) if s else "nan"),
        ("ci_low", _num(s.ci_low) if s else "nan"),
        ("ci_high", _num(s.ci_high) if s else "nan"),
        ("n_examples", outcome.n_selected),
        ("rollouts", outcome.rollouts),
        ("errors", len(outcome.errored)),
        ("truncated_rollouts", outcome.truncated_rollouts),
        ("threshold", threshold if threshold is not None else "none"),
        ("verdict", "pass" if verdict.passed else "fail"),
        ("elapsed_s", round(elapsed, 1)),
        ("run_dir", str(outcome.run_dir)),
        ("run_id", outcome.run_id),
        ("resumed_examples", outcome.resumed_examples),
        ("reused_answers", outcome.reused_answers),
    ]
    if comparison is not None:
        props += [
            ("baseline_mean", _num(comparison.baseline_mean)),
            ("baseline_diff", _num(comparison.diff)),
            ("baseline_diff_ci_low", _num(comparison.diff_ci_low)),
            ("baseline_diff_ci_high", _num(comparison.diff_ci_high)),
            ("baseline_p_value", _num(comparison.p_value)),
            ("baseline_test", comparison.test),
            ("baseline_shared_examples", comparison.n_shared),
            ("solved_to_missed", ",".join(comparison.solved_to_missed)),
            ("missed_to_solved", ",".join(comparison.missed_to_solved)),
        ]
    for warning in verdict.warnings:
        props.append((f"{PROPERTY_PREFIX}warning", warning))
    item.user_properties.extend(props)


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _num(value: float) -> float | str:
    return round(value, 6) if math.isfinite(value) else "nan"


class SummaryCollector:
    """Controller-side: gathers rows from reports (which carry user_properties across xdist)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Runs on the controller (and in-process); subtest reports are skipped."""
        if report.when != "call" or hasattr(report, "context"):
            return
        props = dict(report.user_properties)
        if "avg_reward" not in props:
            return
        row = dict(props)
        row["warnings"] = [v for k, v in report.user_properties if k == f"{PROPERTY_PREFIX}warning"]
        row["notes"] = [v for k, v in report.user_properties if k == f"{PROPERTY_PREFIX}note"]
        self.rows.append(row)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Runs on the controller only (workers have no terminal reporter output)."""
        if not self.rows:
            return
        tr = terminalreporter
        tr.section("evaluation summary")
        header = (
            "benchmark",
            "model",
            "reward ± stderr",
            "95% CI",
            "gate",
            "verdict",
            "time",
            "run",
        )
        table = [header]
        for row in sorted(self.rows, key=lambda r: str(r["benchmark"])):
            table.append(
                (
                    str(row["benchmark"]),
                    str(row["model"]),
                    f"{_f(row['avg_reward'])} ± {_f(row['stderr'])}",
                    f"[{_f(row['ci_low'])}, {_f(row['ci_high'])}]",
                    f">= {row['threshold']}" if row["threshold"] != "none" else "-",
                    str(row["verdict"]).upper(),
                    f"{float(row['elapsed_s']):.1f}s",
                    str(row["run_dir"]),
                )
            )
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        for line in table:
            tr.write_line(
                "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            )
        for row in self.rows:
            extra = []
            resumed, reused = int(row.get("resumed_examples", 0)), int(row.get("reused_answers", 0))
            if resumed or reused:
                text = f"resumed: {resumed}/{row['n_examples']} examples from run {row['run_id']}"
                if reused:
                    text += f"; {reused} answers received before the interruption reused"
                extra.append(text)
            if int(row.get("errors", 0)):
                extra.append(f"errored examples: {row['errors']}")
            extra += [f"note: {n}" for n in row["notes"]]
            extra += [f"WARNING: {w}" for w in row["warnings"]]
            for text in extra:
                tr.write_line(f"{row['benchmark']}: {text}")


def _f(value: Any) -> str:
    try:
        return fmt(float(value))
    except (TypeError, ValueError):
        return "n/a"

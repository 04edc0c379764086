"""The evaluation summary at the end of the session, on the controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.report.format import ci_label, fmt_any, fmt_interval
from pytest_modal_eval.report.junit import BENCHMARK_PROPERTY, MODEL_PROPERTY, PROPERTY_PREFIX


def error_line(report: pytest.TestReport) -> str:
    """One line saying why an item errored: a user-facing problem's message, else the
    exception a traceback ends with (not the traceback's first line)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", "") or report.longreprtext
    return next((x for x in message.splitlines() if x.strip()), "error")


class SummaryCollector:
    """Controller-side: gathers rows from reports (which carry user_properties across xdist)."""

    def __init__(self, rootpath: Path | None = None) -> None:
        self.rows: list[dict[str, Any]] = []
        self.errors: dict[str, tuple[str, str, str]] = {}  # node id -> (benchmark, model, line)
        self.rootpath = rootpath

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Runs on the controller (and in-process); subtest reports are skipped."""
        if hasattr(report, "context"):
            return
        props = dict(report.user_properties)
        if report.failed and "avg_reward" not in props and BENCHMARK_PROPERTY in props:
            # Errored before it had figures (setup: no server, no environment; or an aborted
            # run): a row of its own, so it is not missing from the table.
            self.errors.setdefault(
                report.nodeid,
                (
                    str(props[BENCHMARK_PROPERTY]),
                    str(props.get(MODEL_PROPERTY, "-")),
                    error_line(report),
                ),
            )
        if report.when != "call" or "avg_reward" not in props:
            return
        row = dict(props)
        row["warnings"] = [v for k, v in report.user_properties if k == f"{PROPERTY_PREFIX}warning"]
        row["notes"] = [v for k, v in report.user_properties if k == f"{PROPERTY_PREFIX}note"]
        row["comparison"] = [
            v for k, v in report.user_properties if k == f"{PROPERTY_PREFIX}comparison"
        ]
        self.rows.append(row)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Runs on the controller only (workers have no terminal reporter output)."""
        if not self.rows and not self.errors:
            return
        tr = terminalreporter
        tr.section("evaluation summary")
        # A row without figures has ci_level "n/a"; the header takes the first level given.
        levels = [
            level for row in self.rows if isinstance(level := row.get("ci_level"), (int, float))
        ]
        header = (
            "benchmark",
            "model",
            "reward ± stderr",
            ci_label(levels[0]) if levels else "CI",
            "gate",
            "verdict",
            "time",
            "run",
        )
        table = [header]
        # Per benchmark, the reference model first (other models carry reference_model).
        self.rows.sort(key=lambda r: (str(r["benchmark"]), "reference_model" in r))
        for row in self.rows:
            table.append(
                (
                    str(row["benchmark"]),
                    str(row["model"]),
                    f"{fmt_any(row['avg_reward'])} ± {fmt_any(row['stderr'])}",
                    fmt_interval(row["ci_low"], row["ci_high"]),
                    f">= {row['threshold']}" if row["threshold"] != "none" else "-",
                    str(row["verdict"]).upper(),
                    f"{float(row['elapsed_s']):.1f}s",
                    self._shown(str(row["run_dir"])),
                )
            )
        for name, model, _ in sorted(self.errors.values()):
            table.append((name, model, "-", "-", "-", "ERROR", "-", "-"))
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
            ks = [k for k in row if k.startswith("pass@") and not k.endswith("_stderr")]
            if ks and ks != ["pass@1"]:  # one rollout per example: pass@1 only, as in JUnit
                extra.append(
                    "pass@k: "
                    + ", ".join(
                        f"{k} {fmt_any(row[k])} ± {fmt_any(row.get(f'{k}_stderr'))}" for k in ks
                    )
                )
            if "reference_model" in row:
                vs = f"{row['model']} vs {row['reference_model']} (reference)"
                extra += [f"{vs}: {line}" for line in row["comparison"]]
            if row.get("server_s") is not None:
                extra.append(_serving_line(row))
            extra += [f"note: {n}" for n in row["notes"]]
            extra += [f"WARNING: {w}" for w in row["warnings"]]
            for text in extra:
                tr.write_line(f"{row['benchmark']}: {text}")
        models = {str(r["model"]) for r in self.rows} | {m for _, m, _ in self.errors.values()}
        for name, model, first in sorted(self.errors.values()):
            # The model is named when the session evaluated several.
            tr.write_line(f"{name}{f' ({model})' if len(models) > 1 else ''}: ERROR: {first}")
        costs = [float(r["est_cost_usd"]) for r in self.rows if r.get("est_cost_usd") is not None]
        hours = [float(r["gpu_hours"]) for r in self.rows if r.get("gpu_hours") is not None]
        if hours:
            tr.write_line(
                f"serving: {sum(hours):.3f} GPU-hours in total"
                + (f", est. ${sum(costs):.2f} at GPU list prices" if costs else "")
                + " (docs: serving costs)"
            )

    def _shown(self, path: str) -> str:
        """A run path relative to the rootdir when it is inside it."""
        if self.rootpath is not None:
            try:
                return str(Path(path).relative_to(self.rootpath))
            except ValueError:
                pass
        return path


def _serving_line(row: dict[str, Any]) -> str:
    text = (
        f"server: start-up {float(row.get('server_startup_s', 0)):.1f}s, "
        f"{float(row['server_s']):.1f}s in use"
    )
    if row.get("gpu_hours") is not None:
        text += f"; {float(row['gpu_hours']):.4f} GPU-hours ({row.get('gpu')})"
        if row.get("est_cost_usd") is not None:
            text += f", est. ${float(row['est_cost_usd']):.4f}"
    return text

"""The evaluation summary at the end of the session, on the controller."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.report.junit import (
    BENCHMARK_PROPERTY,
    MODEL_PROPERTY,
    PROPERTY_PREFIX,
    SEAT_FIGURES,
    SERVER_RECORDED_PROPERTY,
)
from pytest_modal_eval.stats.format import ci_label, fmt_any, fmt_interval
from pytest_modal_eval.terminal_text import escape

if TYPE_CHECKING:
    import pytest


def error_line(report: pytest.TestReport) -> str:
    """One line saying why an item errored: a user-facing problem's message, else the
    exception a traceback ends with (not the traceback's first line)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", "") or report.longreprtext
    return next((x for x in message.splitlines() if x.strip()), "error")


def _seat_rows(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A row's lines in the table: the benchmark's, or with several seats one per seat
    (``name[seat]``), each with its own figures and the gate that applies to it."""
    seats = str(row.get("seats") or "")
    if not seats:
        return [(str(row["benchmark"]), row)]
    return [
        (
            f"{row['benchmark']}[{seat}]",
            {
                n: row.get(f"{n}[{seat}]", "none" if n == "threshold" else "n/a")
                for n in SEAT_FIGURES
            },
        )
        for seat in seats.split(",")
    ]


class SummaryCollector:
    """Controller-side: gathers rows from reports (which carry user_properties across xdist)
    and writes the table at the end (driven by the controller's session)."""

    def __init__(self, rootpath: Path | None = None) -> None:
        self.rows: list[dict[str, Any]] = []
        self.errors: dict[str, tuple[str, str, str]] = {}  # node id -> (benchmark, model, line)
        self.rootpath = rootpath

    def add(self, report: pytest.TestReport) -> None:
        """A report, on the controller (and in-process); subtest reports are skipped."""
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

    def write(self, terminalreporter: Any) -> None:
        """The summary, on the controller only (workers have no terminal reporter output)."""
        if not self.rows and not self.errors:
            return
        # Here: the plugin loads this module in every session, most print no summary.
        from pytest_modal_eval.gate.verdict import verdict_label

        tr = _Escaping(terminalreporter)
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
            "eval time",
            "run",
        )
        table = [header]
        # Per benchmark, the reference model first (other models carry reference_model).
        self.rows.sort(key=lambda r: (str(r["benchmark"]), "reference_model" in r))
        for row in self.rows:
            for label, figures in _seat_rows(row):
                table.append(
                    (
                        label,
                        str(row["model"]),
                        f"{fmt_any(figures['avg_reward'])} ± {fmt_any(figures['stderr'])}",
                        fmt_interval(figures["ci_low"], figures["ci_high"]),
                        f">= {figures['threshold']}" if figures["threshold"] != "none" else "-",
                        verdict_label(row["verdict"] == "pass", _parts(row.get("gate_failed"))),
                        f"{float(row['eval_s']):.1f}s",
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
        # A note or warning said of several benchmarks or models is written once, naming all
        # of them, where it first appears.
        grouped: dict[str, list[tuple[str, str, str]]] = {}
        for row in self.rows:
            for key, note in _notes(row):
                grouped.setdefault(key, []).append((str(row["benchmark"]), str(row["model"]), note))
        for row in self.rows:
            subject = _subjects([(str(row["benchmark"]), str(row["model"]))])
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
            if row.get("server_s") is not None:
                extra.append(_serving_line(row))
            for text in extra:
                tr.write_line(f"{subject}: {text}")
            if "reference_model" in row:  # these lines name both models themselves
                vs = f"{row['model']} vs {row['reference_model']} (reference)"
                for compared in row["comparison"]:
                    tr.write_line(f"{row['benchmark']}: {vs}: {compared}")
            for key, _ in _notes(row):
                said_of = grouped.pop(key, None)
                if said_of is None:  # written with an earlier row
                    continue
                pairs = list(dict.fromkeys((b, m) for b, m, _ in said_of))
                # Said alike of each: as said; else with the placeholders.
                same = len({text for _, _, text in said_of}) == 1
                tr.write_line(f"{_subjects(pairs)}: {said_of[0][2] if same else key}")
        for name, model, first in sorted(self.errors.values()):
            tr.write_line(f"{_subjects([(name, model)])}: ERROR: {first}")
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


class _Escaping:
    """The terminal reporter's ``section`` and ``write_line``, with control characters in the
    text (a server's error message, a model's name) shown escaped, never sent to the terminal."""

    def __init__(self, tr: Any) -> None:
        self._tr = tr

    def section(self, title: str) -> None:
        self._tr.section(title)

    def write_line(self, line: str, **markup: bool) -> None:
        self._tr.write_line(escape(line), **markup)


def _parts(value: Any) -> list[str]:
    """The ``gate_failed`` property (comma-separated) as a list."""
    return [part for part in str(value or "").split(",") if part]


def _serving_line(row: dict[str, Any]) -> str:
    times = (
        f"start-up {float(row.get('server_startup_s', 0)):.1f}s, "
        f"{float(row['server_s']):.1f}s in use"
    )
    # A session that only reported a finished run used no server: the figures are the run's.
    recorded = row.get(SERVER_RECORDED_PROPERTY)
    text = (
        f"server: none this session; the run recorded {times}" if recorded else f"server: {times}"
    )
    if row.get("gpu_hours") is not None:
        text += f"; {float(row['gpu_hours']):.4f} GPU-hours ({row.get('gpu')})"
        if row.get("est_cost_usd") is not None:
            text += f", est. ${float(row['est_cost_usd']):.4f}"
    return text


def _notes(row: dict[str, Any]) -> list[tuple[str, str]]:
    """A summary row's notes and warnings: (what groups it with the same note of another
    benchmark or model, the line)."""
    benchmark = str(row["benchmark"])
    return [
        (f"{kind}: {_generic(str(text), benchmark)}", f"{kind}: {text}")
        for kind, texts in (("note", row["notes"]), ("WARNING", row["warnings"]))
        for text in texts
    ]


def _subjects(pairs: list[tuple[str, str]]) -> str:
    """What a summary line is about, benchmark and model: ``gsm8k (model-a)``,
    ``gsm8k, math (a, b)`` or ``gsm8k (a, b); math (a)``."""
    models: dict[str, list[str]] = {}
    for benchmark, model in pairs:
        models.setdefault(benchmark, []).append(model)
    sets = {tuple(found) for found in models.values()}
    if len(sets) == 1:
        return f"{', '.join(models)} ({', '.join(next(iter(sets)))})"
    return "; ".join(f"{benchmark} ({', '.join(found)})" for benchmark, found in models.items())


def _generic(text: str, benchmark: str) -> str:
    """A note with its benchmark's name as ``<benchmark>``: the same note of several benchmarks
    or models (``no baseline yet (evals/__baselines__/<benchmark>.json)``) is written once. A
    note naming its run (``every selected example was finished in run ...``) is written for
    each run, with its id."""
    return re.sub(rf"(?<![\w.-]){re.escape(benchmark)}(?![\w-])", "<benchmark>", text)

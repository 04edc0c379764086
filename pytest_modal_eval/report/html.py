"""The HTML report: run directories -> one self-contained HTML file (model and rendering).

Stays out of pytest: the session's report (:mod:`.session_report`) and ``pytest-modal-eval
report`` both hand it run directories, with what the session knows beyond ``metadata.json``
(the gate, the verdict, the baseline comparison) as :class:`SessionFigures`.

The page shows every example of every run, so it is built for size: the rows are embedded as
JSON (one array per example) and the browser renders one page of them at a time; prompts and
completions longer than :data:`MAX_TEXT` characters are cut, with the line of
``results.jsonl`` that holds the whole text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_modal_eval.report.format import fmt_any
from pytest_modal_eval.runs.paths import RunPaths, iter_runs, runs_in
from pytest_modal_eval.runs.store import describe_error

#: Characters of a prompt or completion kept in the page; the rest is in results.jsonl.
MAX_TEXT = 2000
#: An example counts as solved at this mean reward (as in the statistics' flip lists).
SOLVED_THRESHOLD = 0.5
#: Keys of metadata.json this page shows in its own places; any other key is listed as is.
SHOWN_KEYS = frozenset(
    {
        "env_id", "benchmark", "model", "run_id", "num_examples", "rollouts_per_example",
        "time_ms", "avg_reward", "stderr", "ci", "ci_level", "ci_method", "n_evaluated",
        "errors", "errored_example_ids", "truncated_rollouts", "answer_hash", "verdict",
        "threshold", "gate",
    }
)  # fmt: skip
_PASS_AT = re.compile(r"^pass(@|_at_)(\d+)$")


class ReportError(Exception):
    """A run directory that cannot be reported (missing or unreadable files)."""


@dataclass(frozen=True)
class SessionFigures:
    """What the session knows about a run beyond its files."""

    threshold: float | None = None
    verdict: str | None = None  # "pass" / "fail"
    elapsed_s: float | None = None
    comparison: dict[str, Any] | None = None  # a PairedComparison as a dict


@dataclass
class Benchmark:
    """One run on the page: its overview figures and its example rows."""

    key: str
    name: str
    model: str
    run_id: str
    run_dir: str
    env_id: str
    mean: float | None
    stderr: float | None
    ci: tuple[float | None, float | None]
    ci_level: float
    ci_method: str | None
    n_examples: int
    n_evaluated: int
    rollouts: int
    errors: int
    truncated: int
    threshold: float | None
    verdict: str | None
    time_s: float | None
    cost: Any
    comparisons: list[dict[str, Any]]
    pass_at_k: dict[int, float]
    metrics: dict[str, float]
    extra: dict[str, Any]
    rows: list[list[Any]] = field(repr=False)
    cut_texts: int = 0
    missed: int = 0
    errored_rows: int = 0
    flipped: int = 0


def read_run(run_dir: Path, key: str, session: SessionFigures | None = None) -> Benchmark:
    """A run directory (with metadata.json and results.jsonl) as one benchmark of the page."""
    paths = RunPaths(run_dir)
    meta_path = paths.metadata
    try:
        meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(
            f"{run_dir}: no metadata.json; the run has not finished (it is written at its end). "
            "Re-run the benchmark to finish it, or pass a finished run."
        ) from None
    except (OSError, ValueError) as exc:
        raise ReportError(f"{meta_path}: unreadable ({exc})") from None
    run_config = paths.read_run_config() or {}
    session = session or SessionFigures()
    threshold = session.threshold
    if threshold is None:
        gate = (run_config.get("config") or {}).get("gate") or {}
        threshold = _float(gate.get("min_avg_reward"))
    comparisons = _comparisons(meta)
    if session.comparison is not None:
        comparisons.insert(0, {"label": "stored baseline", **session.comparison})
    lost = {str(i) for c in comparisons[:1] for i in c.get("solved_to_missed") or ()}
    gained = {str(i) for c in comparisons[:1] for i in c.get("missed_to_solved") or ()}
    rows, cut = _rows(paths.results, meta, lost, gained)
    ci = meta.get("ci") or [None, None]
    time_ms = _float(meta.get("time_ms"))
    bench = Benchmark(
        key=key,
        name=str(meta.get("benchmark") or run_config.get("benchmark") or run_dir.parent.name),
        model=str(meta.get("model") or ""),
        run_id=str(meta.get("run_id") or run_dir.name),
        run_dir=str(run_dir),
        env_id=str(meta.get("env_id") or ""),
        mean=_float(meta.get("avg_reward")),
        stderr=_float(meta.get("stderr")),
        ci=(_float(ci[0]), _float(ci[1])),
        ci_level=_float(meta.get("ci_level")) or 0.95,
        ci_method=meta.get("ci_method"),
        n_examples=int(meta.get("num_examples") or len(rows)),
        n_evaluated=int(meta.get("n_evaluated") or 0),
        rollouts=int(meta.get("rollouts_per_example") or 1),
        errors=int(meta.get("errors") or 0),
        truncated=int(meta.get("truncated_rollouts") or 0),
        threshold=threshold,
        verdict=session.verdict or _str(meta.get("verdict")),
        time_s=session.elapsed_s
        if session.elapsed_s is not None
        else (time_ms / 1000 if time_ms is not None else None),
        cost=_cost(meta),
        comparisons=comparisons,
        pass_at_k=_pass_at_k(meta),
        metrics={k: v for k, v in (meta.get("avg_metrics") or {}).items() if _float(v) is not None},
        extra={k: v for k, v in meta.items() if k not in SHOWN_KEYS and not _is_known_extra(k, v)},
        rows=rows,
        cut_texts=cut,
    )
    bench.missed = sum(1 for r in rows if r[1] is not None and r[1] < SOLVED_THRESHOLD)
    bench.flipped = sum(1 for r in rows if r[6])
    bench.errored_rows = sum(1 for r in rows if r[5] is not None)
    return bench


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _walk(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, value
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for number, item in enumerate(value):
            yield from _walk(item, f"{path}[{number}]")


def _comparisons(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every comparison another part of the plugin stored in metadata.json: any object with
    lists of flipped examples (``solved_to_missed`` / ``missed_to_solved``)."""
    found = []
    for path, value in _walk(meta):
        if isinstance(value, Mapping) and (
            "solved_to_missed" in value or "missed_to_solved" in value
        ):
            label = value.get("label") or value.get("reference") or value.get("model") or path
            found.append({**value, "label": str(label)})
    return found


def _is_known_extra(key: str, value: Any) -> bool:
    """Keys shown in a place of their own: comparisons, pass@k, cost, metrics."""
    if key in ("avg_metrics",) or _PASS_AT.match(key) or "cost" in key:
        return True
    return any(True for _ in _comparisons({key: value}))


def _pass_at_k(meta: Mapping[str, Any]) -> dict[int, float]:
    """pass@k figures, from keys ``pass@k`` / ``pass_at_k`` anywhere in metadata.json, or a
    ``pass_at_k`` object keyed by k."""
    found: dict[int, float] = {}
    for path, value in _walk(meta):
        name = path.rsplit(".", 1)[-1]
        match = _PASS_AT.match(name)
        number = _float(value)
        if match and number is not None:
            found.setdefault(int(match[2]), number)
        elif re.search(r"pass_?at_?k$|pass@k$", name) and isinstance(value, Mapping):
            for k, item in value.items():
                figure = _float(item if not isinstance(item, Mapping) else item.get("mean"))
                digits = re.sub(r"\D", "", str(k))
                if digits and figure is not None:
                    found.setdefault(int(digits), figure)
    return dict(sorted(found.items()))


def _cost(meta: Mapping[str, Any]) -> Any:
    """The run's cost as stored in metadata.json (a number or an object), if any."""
    for key, value in meta.items():
        if "cost" in key.lower() and value is not None:
            return value
    return None


def _text(messages: Any) -> str:
    """Chat messages (or a plain string) as readable text."""
    if messages is None:
        return ""
    if isinstance(messages, str):
        return messages
    if isinstance(messages, list):
        parts = []
        for message in messages:
            if isinstance(message, Mapping):
                content = message.get("content")
                if isinstance(content, list):
                    content = "".join(
                        str(p.get("text", "")) if isinstance(p, Mapping) else str(p)
                        for p in content
                    )
                role = message.get("role", "")
                parts.append(f"{role}: {content if content is not None else ''}")
            else:
                parts.append(str(message))
        return "\n\n".join(parts)
    return json.dumps(messages, ensure_ascii=False)


def _cut(text: str, line: int) -> tuple[str, bool]:
    if len(text) <= MAX_TEXT:
        return text, False
    return (
        f"{text[:MAX_TEXT]}\n… [{len(text) - MAX_TEXT} more characters: results.jsonl line {line}]",
        True,
    )


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.exists():
        return
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict) and "example_id" in record:
                yield number, record


def _rows(
    results: Path, meta: Mapping[str, Any], lost: set[str], gained: set[str]
) -> tuple[list[list[Any]], int]:
    """One row per example: [id, mean reward or None, prompt, completion, answer, error,
    flip (0, 1 solved->missed, 2 missed->solved), first line in results.jsonl, rewards of its
    rollouts]."""
    rows: list[list[Any]] = []
    cut = 0
    current: list[Any] | None = None
    rewards: list[float] = []
    completions: list[str] = []

    def close() -> None:
        if current is None:
            return
        if current[5] is None:  # every rollout finished
            current[1] = sum(rewards) / len(rewards) if rewards else None
        if len(completions) > 1:
            current[3] = "\n\n".join(
                f"── rollout {n} ──\n{text}" for n, text in enumerate(completions)
            )
        else:
            current[3] = completions[0] if completions else ""
        current[8] = rewards[:] if len(rewards) > 1 else None
        rows.append(current)

    for line, record in _records(results):
        example_id = str(record["example_id"])
        if current is None or current[0] != example_id:
            close()
            prompt, was_cut = _cut(_text(record.get("prompt")), line)
            cut += was_cut
            flip = 1 if example_id in lost else 2 if example_id in gained else 0
            answer = record.get("answer")
            current = [example_id, None, prompt, "", "" if answer is None else str(answer),
                       None, flip, line, None]  # fmt: skip
            rewards, completions = [], []
        completion, was_cut = _cut(_text(record.get("completion")), line)
        cut += was_cut
        completions.append(completion)
        if record.get("error"):
            current[5] = describe_error(record["error"])
        else:
            rewards.append(float(record.get("reward") or 0.0))
    close()
    seen = {row[0] for row in rows}
    for example_id in meta.get("errored_example_ids") or ():
        if str(example_id) not in seen:
            rows.append([str(example_id), None, "", "", "", "not evaluated", 0, None, None])
    return rows, cut


# -- rendering -------------------------------------------------------------------------------


def _json_for_script(value: Any) -> str:
    """JSON safe inside <script>: no "<" can close the element or open a comment."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def _scale(benchmarks: Sequence[Benchmark]) -> tuple[float, float]:
    """The axis of the interval drawings: [0, 1] unless some figure lies outside it."""
    values = [0.0, 1.0]
    for b in benchmarks:
        values += [v for v in (b.mean, *b.ci, b.threshold) if v is not None]
    return min(values), max(values)


def render(benchmarks: Sequence[Benchmark], title: str = "Evaluation report") -> str:
    import jinja2  # here: the plugin loads this module in every session, most write no page

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_modal_eval.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt_any
    env.filters["duration"] = _duration
    env.filters["json_value"] = lambda v: json.dumps(v, ensure_ascii=False, default=str)
    assets = resources.files("pytest_modal_eval.report") / "templates"
    low, high = _scale(benchmarks)
    return env.get_template("report.html.jinja").render(
        title=title,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        benchmarks=benchmarks,
        low=low,
        high=high,
        css=(assets / "report.css").read_text(encoding="utf-8"),
        js=(assets / "report.js").read_text(encoding="utf-8"),
        rows_json={b.key: _json_for_script(b.rows) for b in benchmarks},
        solved_threshold=SOLVED_THRESHOLD,
        max_text=MAX_TEXT,
    )


def write_report(
    path: Path,
    run_dirs: Iterable[tuple[Path, SessionFigures | None]],
    title: str = "Evaluation report",
) -> list[Benchmark]:
    """Read each run, render the page and write it to ``path`` (replaced atomically)."""
    benchmarks = [
        read_run(run_dir, f"b{n}", figures) for n, (run_dir, figures) in enumerate(run_dirs)
    ]
    text = render(benchmarks, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return benchmarks


def find_runs(path: Path) -> list[Path]:
    """The run directories ``path`` names: itself when it is a finished run, else the newest
    finished run (by run id, which starts with its UTC start time) of each benchmark and model
    in it (a benchmark's directory, or the output directory)."""
    if RunPaths(path).finished():
        return [path]
    newest: dict[Path, Path] = {}
    for run in [*runs_in(path), *iter_runs(path)]:
        parent = run.dir.parent
        if run.finished() and (parent not in newest or run.run_id > newest[parent].name):
            newest[parent] = run.dir
    if not newest:
        raise ReportError(
            f"{path}: no finished run here (a run directory holds metadata.json, written when "
            "the run ends). Pass a run directory, a benchmark's directory or the output "
            "directory."
        )
    return [newest[parent] for parent in sorted(newest)]

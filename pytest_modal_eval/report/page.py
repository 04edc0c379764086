"""The HTML report's data: run directories read into typed sections, paired with their
reference runs. Rendering is :mod:`.html`'s; this module only reads.

Files are read through ``runs/reader.py`` (``RunPaths.read_metadata``, ``iter_records``), as every
command reads them. What the session knows beyond ``metadata.json`` (the gate, the verdict, the
baseline comparison) comes in as :class:`SessionFigures`.

The page shows every example of every run, so the rows are built for size: one array per
example, embedded as JSON, which the browser renders one page at a time; prompts and
completions longer than :data:`MAX_TEXT` characters keep their beginning and their end (where
a completion's answer is), with the line of ``results.jsonl`` that holds the whole text. Each
row has the answer the environment's parser read from each rollout (``parsed_answer``) beside
the expected one.

Runs whose ``metadata.json`` records a comparison with a reference model (``vs_reference``)
are paired with the reference's run (:func:`compare_runs`): the page shows them side by side
and lists the examples where their rewards differ, as indices into both runs' rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_modal_eval.gate.verdict import verdict_label
from pytest_modal_eval.runs.messages import messages_text, question
from pytest_modal_eval.runs.paths import CHECKPOINT, RESULTS, RunPaths
from pytest_modal_eval.runs.reader import iter_records
from pytest_modal_eval.runs.store import describe_error
from pytest_modal_eval.runs.unfinished import read_unfinished
from pytest_modal_eval.stats.format import describe_attempts

#: Characters of a prompt or completion kept in the page, half from its beginning and half
#: from its end; the rest is in results.jsonl.
MAX_TEXT = 2000
#: An example counts as solved at this mean reward (as in the statistics' flip lists).
SOLVED_THRESHOLD = 0.5
#: Keys of metadata.json this page shows in its own places; any other key is listed as is.
SHOWN_KEYS = frozenset(
    {
        "env_id", "benchmark", "model", "run_id", "num_examples", "rollouts_per_example",
        "time_ms", "avg_reward", "stderr", "ci", "ci_level", "ci_method", "n_evaluated",
        "errors", "errored_example_ids", "truncated_rollouts", "answer_hash", "verdict",
        "threshold", "gate", "vs_reference", "early_stop", "unfinished", "seat", "seats",
        "attempts", "gate_failed",
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
    failed_by: tuple[str, ...] = ()  # what failed the gate (gate.verdict's parts)
    comparison: dict[str, Any] | None = None  # a PairedComparison as a dict
    interrupted: bool = False  # Ctrl-C ended the session while it evaluated this run


@dataclass
class RunSection:
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
    verdict_text: str | None  # PASS, or FAIL with what failed it (gate.verdict.verdict_label)
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
    # The comparison with the reference model metadata.json records (``vs_reference``).
    vs_reference: dict[str, Any] | None = None
    is_reference: bool = False  # a run other runs on the page were compared with
    early_stop: str | None = None  # how gate.early_stop decided the run, when it did
    # The examples evaluated when gate.early_stop decided before the rest were sent.
    stopped_after: int | None = None
    # An unfinished run (no metadata.json): its kept and selected examples, and whether this
    # session's Ctrl-C left it so; its figures are over the kept examples only.
    unfinished: dict[str, Any] | None = None
    records_file: str = RESULTS  # the file the rows' line numbers point into
    # Several seats: each seat's figures as metadata.json records them (``seats``), the
    # headline seat first marked; and how often the run's seat was played per rollout.
    seats: list[dict[str, Any]] = field(default_factory=list)
    attempts: str | None = None


@dataclass
class Challenger:
    """One model against the reference on one benchmark: the figures of its ``metadata.json``
    and the examples where the two disagree."""

    run: RunSection
    figures: dict[str, Any]
    # [example id, its row in the reference's rows, its row in the challenger's, flip (0, 1
    # solved->missed, 2 missed->solved)] for each example both scored with different rewards.
    disagreements: list[list[Any]]
    lost: int
    gained: int


@dataclass
class ComparisonGroup:
    """A benchmark evaluated by several models: the reference and each model compared with it."""

    name: str
    reference: RunSection
    challengers: list[Challenger]


def read_run(
    run_dir: Path, key: str, session: SessionFigures | None = None, unfinished: bool = False
) -> RunSection:
    """A run directory (with metadata.json and results.jsonl) as one benchmark of the page.

    A run without metadata.json is read from its checkpoint (:mod:`~..runs.unfinished`) when
    ``unfinished`` or the session says Ctrl-C ended it, and marked unfinished; otherwise it is
    refused."""
    paths = RunPaths(run_dir)
    session = session or SessionFigures()
    meta = paths.read_metadata()  # a damaged file is a RunFileError naming file and field
    partial = None
    if meta is None:
        if not (unfinished or session.interrupted):
            raise ReportError(
                f"{run_dir}: no metadata.json; the run has not finished (it is written at its "
                "end). Re-run the benchmark to finish it, or pass a finished run."
            )
        partial = read_unfinished(paths)
        meta = partial.metadata
    run_config = paths.read_run_config() or {}
    # The gate's threshold as the verdict applied it: this session's, else the one recorded
    # with the run's verdict (gate/record.py), else (a run recorded without it) the gate the
    # run was started with.
    threshold: float | None
    if session.threshold is not None:
        threshold = session.threshold
    elif "threshold" in meta:
        threshold = _float(meta.get("threshold"))
    else:
        config = run_config.get("config")
        gate = config.get("gate") if isinstance(config, dict) else None
        threshold = _float(gate.get("min_avg_reward")) if isinstance(gate, dict) else None
    # The verdict as this session decided it, else as the run recorded it (gate/record.py).
    verdict = session.verdict or _str(meta.get("verdict"))
    recorded_parts = meta.get("gate_failed") if not session.verdict else None
    failed_by = session.failed_by or tuple(str(part) for part in recorded_parts or ())
    comparisons = _comparisons(meta)
    if session.comparison is not None:
        comparisons.insert(0, {"label": "stored baseline", **session.comparison})
    lost = {str(i) for c in comparisons[:1] for i in c.get("solved_to_missed") or ()}
    gained = {str(i) for c in comparisons[:1] for i in c.get("missed_to_solved") or ()}
    if partial is None:
        rows, cut = _rows(iter_records(paths.results), meta, lost, gained)
    else:
        rows, cut = _rows(partial.records, meta, lost, gained, CHECKPOINT)
    ci = meta.get("ci") or [None, None]
    time_ms = _float(meta.get("time_ms"))
    bench = RunSection(
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
        verdict=verdict,
        verdict_text=verdict_label(verdict == "pass", failed_by) if verdict else None,
        time_s=time_ms / 1000 if time_ms is not None else None,  # evaluation time
        cost=_cost(meta),
        comparisons=comparisons,
        pass_at_k=_pass_at_k(meta),
        metrics={k: v for k, v in (meta.get("avg_metrics") or {}).items() if _float(v) is not None},
        extra={k: v for k, v in meta.items() if k not in SHOWN_KEYS and not _is_known_extra(k, v)},
        rows=rows,
        cut_texts=cut,
    )
    early = meta.get("early_stop")
    if isinstance(early, Mapping) and early.get("decided"):
        bench.early_stop = _str(early.get("summary")) or _str(early.get("text"))
        evaluated = early.get("evaluated")
        if isinstance(evaluated, int) and not isinstance(evaluated, bool):
            bench.stopped_after = evaluated
    bench.missed = sum(1 for r in rows if r[1] is not None and r[1] < SOLVED_THRESHOLD)
    bench.flipped = sum(1 for r in rows if r[6])
    bench.errored_rows = sum(1 for r in rows if r[5] is not None)
    vs_reference = meta.get("vs_reference")
    bench.vs_reference = dict(vs_reference) if isinstance(vs_reference, Mapping) else None
    bench.attempts = describe_attempts(meta.get("attempts"))
    bench.seats = _seats(meta)
    if partial is not None:
        bench.unfinished = {
            "kept": partial.kept,
            "total": partial.total,
            "interrupted": session.interrupted,
        }
        bench.records_file = CHECKPOINT
        bench.verdict = bench.verdict_text = None  # no gate decides an unfinished run
    return bench


def _seats(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each seat's figures from ``metadata.json`` ``seats``, in the environment's order."""
    seats = meta.get("seats")
    if not isinstance(seats, Mapping):
        return []
    shown = []
    for name, figures in seats.items():
        figures = figures if isinstance(figures, Mapping) else {}
        ci = figures.get("ci")
        if not (isinstance(ci, list) and len(ci) == 2):
            ci = [None, None]
        shown.append(
            {
                "name": str(name),
                "headline": name == meta.get("seat"),
                "mean": _float(figures.get("avg_reward")),
                "stderr": _float(figures.get("stderr")),
                "ci": (_float(ci[0]), _float(ci[1])),
                "n_evaluated": figures.get("n_evaluated"),
                "attempts": figures.get("attempts"),
                "attempts_text": describe_attempts(figures.get("attempts")),
            }
        )
    return shown


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
            if "reference_model" in value:
                label = f"reference model {value['reference_model']}"
            found.append({"baseline_mean": value.get("reference_mean"), **value, "label": label})
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


_SURROGATE = re.compile("[\ud800-\udfff]")


def _cut(text: str, line: int, source: str = RESULTS) -> tuple[str, bool]:
    """``text`` cut to :data:`MAX_TEXT` characters, its beginning and its end (a completion's
    answer is at its end), the middle left out with where to find it; a lone surrogate (a
    server's JSON can carry one; a UTF-8 page cannot) is shown as U+FFFD."""
    text = _SURROGATE.sub("\ufffd", text)
    if len(text) <= MAX_TEXT:
        return text, False
    kept = MAX_TEXT // 2
    left_out = len(text) - 2 * kept
    return (
        f"{text[:kept]}\n… [{left_out} characters left out here: {source} line {line}] …\n"
        f"{text[-kept:]}",
        True,
    )


def _rows(
    records: Iterable[tuple[int, dict[str, Any]]],
    meta: Mapping[str, Any],
    lost: set[str],
    gained: set[str],
    source: str = RESULTS,
) -> tuple[list[list[Any]], int]:
    """One row per example (the headline seat's, with several seats): [id, mean reward or
    None, prompt, completion, answer, error, flip (0, 1 solved->missed, 2 missed->solved),
    first line in ``source`` (results.jsonl, or an unfinished run's checkpoint), rewards of its
    rollouts, the prompt's last user message, each rollout's plays (the rewards of a seat
    played several times, null for an errored play; null when every rollout played once),
    each rollout's parsed answer (null for a rollout without one; null when no rollout has
    one)]. ``records`` are (line, record) in example order."""
    rows: list[list[Any]] = []
    cut = 0
    current: list[Any] | None = None
    rewards: list[float] = []
    completions: list[str] = []
    plays: list[list[float | None]] = []
    parsed: list[str | None] = []

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
        current[10] = plays[:] if any(len(p) > 1 for p in plays) else None
        current[11] = parsed[:] if any(p is not None for p in parsed) else None
        rows.append(current)

    # Several seats: the rows are the headline seat's, whose figures the report shows.
    seat = meta.get("seat") if meta.get("seats") else None
    for line, record in records:
        if seat is not None and record.get("agent") != seat:
            continue
        example_id = str(record["example_id"])
        if current is None or current[0] != example_id:
            close()
            prompt, was_cut = _cut(messages_text(record.get("prompt")), line, source)
            cut += was_cut
            asked, _ = _cut(question(record.get("prompt")), line, source)
            flip = 1 if example_id in lost else 2 if example_id in gained else 0
            answer = record.get("answer")
            current = [example_id, None, prompt, "", "" if answer is None else str(answer),
                       None, flip, line, None, asked, None, None]  # fmt: skip
            rewards, completions, plays, parsed = [], [], [], []
        completion, was_cut = _cut(messages_text(record.get("completion")), line, source)
        cut += was_cut
        completions.append(completion)
        plays.append([_play_reward(play) for play in record.get("attempts") or ()])
        given = record.get("parsed_answer")
        parsed.append(None if given is None else _cut(str(given), line, source)[0])
        if record.get("error"):
            current[5] = describe_error(record["error"])
        else:
            rewards.append(float(record["reward"]))
    close()
    seen = {row[0] for row in rows}
    for example_id in meta.get("errored_example_ids") or ():
        if str(example_id) not in seen:
            rows.append(
                [str(example_id), None, "", "", "", "not evaluated", 0, None, None, "", None, None]
            )
    return rows, cut


def _play_reward(play: Any) -> float | None:
    """One play of a seat played several times (a record's ``attempts``): its reward, or None
    when it errored."""
    if not isinstance(play, Mapping) or play.get("error"):
        return None
    return _float(play.get("reward"))


# -- the comparison view ---------------------------------------------------------------------


def compare_runs(benchmarks: list[RunSection]) -> list[ComparisonGroup]:
    """Pair every run that records a comparison with a reference model (``vs_reference``)
    with that reference's run; reorder ``benchmarks`` so that each benchmark's reference comes
    first, then the models compared with it. A reference run missing from the page is read
    from the directory the comparison names (and added), when it is still there."""
    groups: dict[tuple[str, str], ComparisonGroup] = {}
    for bench in list(benchmarks):
        figures = bench.vs_reference
        if figures is None:
            continue
        reference = _reference_run(benchmarks, bench, figures)
        if reference is None:
            continue
        reference.is_reference = True
        group = groups.setdefault(
            (reference.name, reference.key), ComparisonGroup(reference.name, reference, [])
        )
        group.challengers.append(_challenger(reference, bench, figures))

    def order(b: RunSection) -> tuple[str, int, str]:
        return (b.name, 0 if b.is_reference else 1 if b.vs_reference else 2, b.model)

    benchmarks.sort(key=order)
    for group in groups.values():
        group.challengers.sort(key=lambda c: c.run.model)
    return sorted(groups.values(), key=lambda g: (g.name, g.reference.model))


def _reference_run(
    benchmarks: list[RunSection], bench: RunSection, figures: Mapping[str, Any]
) -> RunSection | None:
    model, run_id = figures.get("reference_model"), figures.get("reference_run_id")
    candidates = [b for b in benchmarks if b.name == bench.name and b.model == model]
    for candidate in candidates:
        if run_id is None or candidate.run_id == run_id:
            return candidate
    recorded = figures.get("reference_run_dir")
    run_dir = Path(bench.run_dir, recorded) if recorded else None  # relative to the run
    if run_dir is not None and RunPaths(run_dir).finished():
        try:
            reference = read_run(run_dir.resolve(), f"b{len(benchmarks)}")
        except ReportError:
            return None
        benchmarks.append(reference)
        return reference
    return None  # not the run the figures were measured against: no rows to pair


def _challenger(reference: RunSection, run: RunSection, figures: Mapping[str, Any]) -> Challenger:
    lost = {str(i) for i in figures.get("solved_to_missed") or ()}
    gained = {str(i) for i in figures.get("missed_to_solved") or ()}
    theirs = {row[0]: n for n, row in enumerate(reference.rows) if row[1] is not None}
    disagreements = []
    for n, row in enumerate(run.rows):
        other = theirs.get(row[0])
        if other is None or row[1] is None or reference.rows[other][1] == row[1]:
            continue
        flip = 1 if row[0] in lost else 2 if row[0] in gained else 0
        disagreements.append([row[0], other, n, flip])
    return Challenger(
        run=run,
        figures=dict(figures),
        disagreements=disagreements,
        lost=sum(1 for d in disagreements if d[3] == 1),
        gained=sum(1 for d in disagreements if d[3] == 2),
    )

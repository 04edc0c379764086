"""The HTML report's rendering: the page's data (:mod:`.page`) as one self-contained HTML
file, through jinja2 templates with the CSS and JS inlined.

Stays out of pytest: the session's report (:mod:`.session_report`) and ``pytest-modal-eval
report`` both hand it run directories.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.report.page import (
    MAX_TEXT,
    SOLVED_THRESHOLD,
    ComparisonGroup,
    RunSection,
    SessionFigures,
    compare_runs,
    read_run,
)
from pytest_modal_eval.runs.store import replaced_atomically
from pytest_modal_eval.stats.format import fmt_any, fmt_interval

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


def _scale(benchmarks: Sequence[RunSection]) -> tuple[float, float]:
    """The axis of the interval drawings: [0, 1] unless some figure lies outside it."""
    values = [0.0, 1.0]
    for b in benchmarks:
        values += [v for v in (b.mean, *b.ci, b.threshold) if v is not None]
    return min(values), max(values)


def render(
    benchmarks: Sequence[RunSection],
    title: str = "Evaluation report",
    groups: Sequence[ComparisonGroup] = (),
    clean: Callable[[str], str] | None = None,
) -> str:
    """The page; ``clean`` (a redactor's ``text``) is applied to all of it but the inlined
    script and style, the plugin's own code, which hold no data and which a secret that is a
    word they use (``function``, ``document``) must not break."""
    import jinja2  # here: the plugin loads this module in every session, most write no page

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_modal_eval.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        # The compiled template, kept between sessions (jinja2's own per-user cache directory,
        # keyed by the template's source): compiling it took ~0.3 s of every session's end.
        bytecode_cache=jinja2.FileSystemBytecodeCache(),
    )
    env.filters["fmt"] = fmt_any
    env.filters["interval"] = fmt_interval
    env.filters["diff_interval"] = _diff_interval
    env.filters["duration"] = _duration
    env.filters["json_value"] = lambda v: json.dumps(v, ensure_ascii=False, default=str)
    assets = resources.files("pytest_modal_eval.report") / "templates"
    low, high = _scale(benchmarks)
    unfinished = [b for b in benchmarks if b.unfinished is not None]
    # The assets go in after ``clean``, each in place of a random mark.
    marks = {name: f"asset-{secrets.token_hex(16)}" for name in ("css", "js")}
    page: str = env.get_template("report.html.jinja").render(
        # A page with an unfinished run says so first: its figures are not a benchmark's.
        title=f"{title} (partial)" if unfinished else title,
        unfinished=unfinished,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        benchmarks=benchmarks,
        groups=groups,
        diffs_json={
            c.run.key: _json_for_script(c.disagreements) for g in groups for c in g.challengers
        },
        low=low,
        high=high,
        css=marks["css"],
        js=marks["js"],
        rows_json={b.key: _json_for_script(b.rows) for b in benchmarks},
        solved_threshold=SOLVED_THRESHOLD,
        max_text=MAX_TEXT,
    )
    if clean is not None:
        page = clean(page)
    for name, mark in marks.items():
        page = page.replace(mark, (assets / f"report.{name}").read_text(encoding="utf-8"))
    return page


def write_report(
    path: Path,
    run_dirs: Iterable[tuple[Path, SessionFigures | None]],
    title: str = "Evaluation report",
    redactor: Redactor | None = None,
    unfinished: bool = False,
) -> list[RunSection]:
    """Read each run, render the page and write it to ``path`` (replaced atomically), with
    the secrets ``redactor`` knows (default: the environment's) replaced. An unfinished run is
    shown from its checkpoint, marked so, when ``unfinished`` or its figures say Ctrl-C cut it
    short; otherwise it is refused."""
    benchmarks = [
        read_run(run_dir, f"b{n}", figures, unfinished)
        for n, (run_dir, figures) in enumerate(run_dirs)
    ]
    groups = compare_runs(benchmarks)
    text = render(benchmarks, title, groups, clean=(redactor or Redactor.from_environ()).text)
    with replaced_atomically(path, "then write the report again") as out:
        out.write(text)
    return benchmarks


def _diff_interval(low: Any, high: Any, max_drop: Any) -> str:
    """A comparison's interval of the difference, rounded outward and kept on its side of
    ``-max_drop`` (the margin its verdict is about)."""
    try:
        threshold = -float(max_drop) if max_drop is not None else 0.0
    except (TypeError, ValueError):
        threshold = 0.0
    return fmt_interval(low, high, threshold=threshold)

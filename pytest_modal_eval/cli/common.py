"""What the commands share: the output-directory option, JSON output, tables, times."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from pytest_modal_eval.config.locations import output_dir_from

F = TypeVar("F", bound=Callable[..., Any])


def output_dir_option(function: F) -> F:
    return click.option(
        "--eval-output-dir",
        "output_dir",
        metavar="DIR",
        default=None,
        help="where runs are written. Default: $MODAL_EVAL_OUTPUT_DIR, else ini "
        "modal_eval_output_dir, else outputs/evals (as for pytest).",
    )(function)


def json_option(function: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")(
        function
    )


def resolve_output_dir(option: str | None) -> Path:
    """As the plugin resolves it; the ini file is looked for only when it decides."""
    if option or os.environ.get("MODAL_EVAL_OUTPUT_DIR"):
        return output_dir_from(option, None, Path.cwd(), os.environ)
    from pytest_modal_eval.cli.project import Project

    return Project.find().output_dir(option)


#: The fix every "no such run" message gives: where a user finds a run's directory.
FIND_RUNS = "`pytest-modal-eval runs --json` lists each run's id and dir"


def require_dir(
    path: Path, expected: str, error: type[click.ClickException] = click.ClickException
) -> Path:
    """``path`` when it is a directory; else ``error`` with one line naming it and the fix.

    Run paths are checked here rather than by ``click.Path(exists=True)``: click reports those
    as usage errors (exit status 2), while every command treats a run it cannot find as its
    own failure (exit status 1, or ``compare``'s 2 for runs that cannot be compared).
    """
    if path.is_dir():
        return path
    problem = "not a directory" if path.exists() else "no such directory"
    raise error(f"{path}: {problem}; give {expected} ({FIND_RUNS})")


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain left-aligned table: readable in a terminal and in a CI log."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def age(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return "-"
    return duration(((now or datetime.now(UTC)) - moment).total_seconds())

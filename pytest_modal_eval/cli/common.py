"""What the commands share: the output-directory option, terminal and JSON output, tables, times.

Every line a command prints that holds text from a run, a server or Modal goes through
:func:`shown` (or :func:`say`, :func:`echo_json`): the secrets a pytest session of the project
would know become ``[redacted]`` and control characters are shown escaped. The group does the
same to every error line (``cli.LazyGroup``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pytest_modal_eval.config.locations import output_dir_from
from pytest_modal_eval.terminal_text import escape, escape_json

if TYPE_CHECKING:
    from pytest_modal_eval.cli.project import Project
    from pytest_modal_eval.redact import Redactor

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


def api_key_env_option(function: F) -> F:
    """``--api-key-env VAR``: as for pytest, a variable whose value is a secret to keep out of
    what the command prints, writes or shares (never the value itself)."""
    return click.option(
        "--api-key-env",
        "api_key_env",
        metavar="VAR",
        default=None,
        help="the variable holding the endpoint's API key, as for pytest: its value is replaced "
        "by [redacted] in what the command prints, writes or pushes (a key itself is never "
        "accepted). Default: ini modal_eval_api_key_env, else OPENAI_API_KEY.",
    )(function)


#: ``click.Context.meta`` key (shared by a command and the group) of the command's redactor.
_REDACTOR = "pytest_modal_eval.redactor"


def parsed_overrides(overrides: Sequence[str]) -> list[tuple[str, Any]]:
    """``--override KEY=VALUE`` values parsed and checked as pytest's ``--override`` is; a bad
    one is a usage error that names it and the fix."""
    from pytest_modal_eval.config.overrides import parse_override
    from pytest_modal_eval.exceptions import OptionError

    parsed = []
    for text in overrides:
        try:
            parsed.append(parse_override(text))
        except OptionError as exc:
            raise click.BadParameter(str(exc), param_hint="--override") from None
    return parsed


def project_redactor(api_key_env: str | None) -> Redactor:
    """The secrets a pytest session in this directory would know from its environment; also
    what :func:`shown` uses from now on in this command."""
    from pytest_modal_eval.cli.project import Project

    redactor = Project.find().redactor(api_key_env)
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[_REDACTOR] = redactor
    return redactor


def command_redactor(context: click.Context | None = None) -> Redactor:
    """The running command's redactor: the one :func:`project_redactor` made (with the
    command's ``--api-key-env``), else the project's (an unreadable ini file: the
    environment's)."""
    from pytest_modal_eval.redact import Redactor

    context = context or click.get_current_context(silent=True)
    if context is not None and _REDACTOR in context.meta:
        found: Redactor = context.meta[_REDACTOR]
        return found
    try:
        return project_redactor(None)
    except Exception:  # an ini file pytest cannot read: the error being shown is the news
        redactor = Redactor.from_environ()
        if context is not None:
            context.meta[_REDACTOR] = redactor
        return redactor


def shown(text: str, *, newlines: bool = True, context: click.Context | None = None) -> str:
    """``text`` as a command prints it: the secrets :func:`command_redactor` knows replaced,
    control characters escaped (newlines kept unless ``newlines`` is false)."""
    return escape(command_redactor(context).text(text), newlines=newlines)


def say(text: str, *, err: bool = False) -> None:
    """Print a line of text that may come from a run, a server or Modal (see :func:`shown`)."""
    click.echo(shown(text), err=err)


def json_option(function: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")(
        function
    )


def resolve_output_dir(
    option: str | None,
    project: Project | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """The output directory every command uses, as the plugin resolves it
    (``config/locations.output_dir_from``): the project's ini file (``project``, else the one
    found from here) is looked for only when it decides."""

    def ini() -> str:
        from pytest_modal_eval.cli.project import Project

        return (project or Project.find()).ini_str("modal_eval_output_dir")

    where = project.invocation_dir if project is not None else Path.cwd()
    return output_dir_from(option, ini, where, os.environ if environ is None else environ)


def echo_json(value: Any) -> None:
    """``value`` as JSON, its secrets replaced and control characters escaped."""
    clean = command_redactor().json(value, by_name=False, default=str)
    click.echo(escape_json(json.dumps(clean, indent=2, ensure_ascii=False, default=str)))


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

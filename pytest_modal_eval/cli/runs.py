"""``pytest-modal-eval runs``: the runs in the output directory, newest first."""

from __future__ import annotations

from typing import Any

import click

from pytest_modal_eval.cli.common import (
    duration,
    echo_json,
    json_option,
    output_dir_option,
    resolve_output_dir,
    say,
    shown,
    table,
)
from pytest_modal_eval.cli.remote import RemoteRuns, volume_option
from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.runs.locate import list_runs
from pytest_modal_eval.runs.paths import RunListing
from pytest_modal_eval.stats.format import fmt_interval


def reward_text(run: RunListing) -> str:
    return _reward_text(run.avg_reward, run.stderr, run.ci)


def seat_text(figures: dict[str, Any]) -> str:
    """One seat's figures as ``metadata.json`` records them (``seats``), as :func:`reward_text`
    writes a run's."""
    return _reward_text(figures.get("avg_reward"), figures.get("stderr"), figures.get("ci"))


def _reward_text(mean: float | None, stderr: float | None, ci: Any) -> str:
    if mean is None:
        return "-"
    text = f"{mean:.3f}"
    if stderr is not None:
        text += f" ± {stderr:.3f}"
    if ci is not None and None not in ci:
        text += f" {fmt_interval(ci[0], ci[1])}"
    return text


def run_time(seconds: float | None) -> str:
    """A run's eval or server time as the session's summary prints it, to a tenth of a second
    (``0.4s``, not ``0s``); from a minute on, in minutes and seconds (``1m50s``)."""
    if seconds is not None and seconds < 60:
        return f"{max(0.0, seconds):.1f}s"
    return duration(seconds)


def time_text(run: RunListing) -> str:
    """``eval 5.0s, server 25.1s``: the run's two times, labelled as everywhere."""
    text = f"eval {run_time(run.eval_s)}"
    return text + (f", server {run_time(run.server_s)}" if run.server_s is not None else "")


def row(run: RunListing) -> list[str]:
    started = run.started_at.strftime("%Y-%m-%d %H:%M") if run.started_at else "-"
    cells = [
        run.benchmark,
        run.model,
        run.run_id,
        run.state_text,
        reward_text(run),
        run.verdict or "-",
        started,
        run_time(run.eval_s),
        run_time(run.server_s),
    ]
    return [shown(cell, newlines=False) for cell in cells]


@click.command()
@click.option("-b", "--benchmark", metavar="NAME", default=None, help="only this benchmark")
@click.option(
    "-m",
    "--model",
    metavar="MODEL",
    default=None,
    help="only this model, named as given to --model (ORG/NAME, a path), by its directory's "
    "name, or by its slug (ORG--NAME, local--DIRNAME)",
)
@click.option(
    "-l",
    "--limit",
    metavar="N",
    type=click.IntRange(min=1),
    default=None,
    help="show the newest N runs. Default: all.",
)
@output_dir_option
@click.option(
    "--remote",
    is_flag=True,
    help="list the runs of detached sessions (pytest --detach) on their Modal Volume instead",
)
@volume_option
@json_option
def runs(
    benchmark: str | None,
    model: str | None,
    limit: int | None,
    output_dir: str | None,
    remote: bool,
    volume: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first: state, reward ± stderr [95 % CI], verdict, start, evaluation
    time and server time (each summed over the sessions that evaluated the run).

    Reads only the small files of each run (never the results or the checkpoint). A run whose
    files are damaged is named on stderr, one line each, and the exit status is 1.
    """
    root = RemoteRuns(volume).listing() if remote else resolve_output_dir(output_dir)
    problems: list[RunFileError] = []
    found = list_runs(root, benchmark=benchmark, model=model, limit=limit, problems=problems)
    try:
        _print(found, root, filtered=benchmark is not None or model is not None, as_json=as_json)
    finally:
        for problem in problems:
            say(f"Error: {problem}", err=True)
    if problems:
        raise SystemExit(1)


def _print(found: list[RunListing], root: object, *, filtered: bool, as_json: bool) -> None:
    if as_json:
        echo_json([run.to_json() for run in found])
        return
    if not found:
        if filtered:
            say(f"no runs match in {root}; `pytest-modal-eval runs` lists every run")
        else:
            say(f"no runs in {root}")
        return
    headers = [
        "BENCHMARK",
        "MODEL",
        "RUN",
        "STATE",
        "REWARD ± SE [95% CI]",
        "VERDICT",
        "STARTED",
        "EVAL TIME",
        "SERVER TIME",
    ]
    click.echo(table(headers, [row(run) for run in found]))

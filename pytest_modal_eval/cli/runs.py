"""``pytest-modal-eval runs``: the runs in the output directory, newest first."""

from __future__ import annotations

import click

from pytest_modal_eval.cli.common import (
    duration,
    echo_json,
    json_option,
    output_dir_option,
    resolve_output_dir,
    table,
)
from pytest_modal_eval.runs.paths import RunListing, list_runs


def reward_text(run: RunListing) -> str:
    if run.avg_reward is None:
        return "-"
    text = f"{run.avg_reward:.3f}"
    if run.stderr is not None:
        text += f" ± {run.stderr:.3f}"
    if run.ci is not None and None not in run.ci:
        text += f" [{run.ci[0]:.3f}, {run.ci[1]:.3f}]"
    return text


def row(run: RunListing) -> list[str]:
    started = run.started_at.strftime("%Y-%m-%d %H:%M") if run.started_at else "-"
    return [
        run.benchmark,
        run.model,
        run.run_id,
        run.state_text,
        reward_text(run),
        run.verdict or "-",
        started,
        duration(run.duration_s),
    ]


@click.command()
@click.option("-b", "--benchmark", metavar="NAME", default=None, help="only this benchmark")
@click.option("-m", "--model", metavar="ORG/NAME", default=None, help="only this model")
@click.option(
    "-l",
    "--limit",
    metavar="N",
    type=click.IntRange(min=1),
    default=None,
    help="show the newest N runs. Default: all.",
)
@output_dir_option
@json_option
def runs(
    benchmark: str | None,
    model: str | None,
    limit: int | None,
    output_dir: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first: state, reward ± stderr [95 % CI], verdict, start, duration.

    Reads only the small files of each run (never the results or the checkpoint).
    """
    root = resolve_output_dir(output_dir)
    found = list_runs(root, benchmark=benchmark, model=model, limit=limit)
    if as_json:
        echo_json([run.to_json() for run in found])
        return
    if not found:
        click.echo(f"no runs in {root}")
        return
    headers = [
        "BENCHMARK",
        "MODEL",
        "RUN",
        "STATE",
        "REWARD ± SE [95% CI]",
        "VERDICT",
        "STARTED",
        "DURATION",
    ]
    click.echo(table(headers, [row(run) for run in found]))

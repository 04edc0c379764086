"""``pytest-modal-eval show RUN``: one run — summary, configuration, examples."""

from __future__ import annotations

import json
from typing import Any

import click

from pytest_modal_eval.cli.common import (
    FIND_RUNS,
    echo_json,
    json_option,
    output_dir_option,
    resolve_output_dir,
)
from pytest_modal_eval.cli.runs import reward_text
from pytest_modal_eval.runs.paths import find_run, read_listing


def _text(messages: Any, limit: int = 400) -> str:
    """A prompt or completion (a list of chat messages, or a string) as one short line."""
    if isinstance(messages, list):
        parts = [str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in messages]
        text = " | ".join(p for p in parts if p)
    else:
        text = "" if messages is None else str(messages)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@click.command()
@click.argument("run")
@click.option("--missed", is_flag=True, help="only examples with a reward below 1")
@click.option("--errored", is_flag=True, help="only examples whose rollouts errored")
@click.option(
    "-n",
    "limit",
    metavar="N",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="examples to show (0: none)",
)
@output_dir_option
@json_option
def show(
    run: str, missed: bool, errored: bool, limit: int, output_dir: str | None, as_json: bool
) -> None:
    """Show one run (RUN: a run id, or its directory)."""
    output = resolve_output_dir(output_dir)
    paths = find_run(run, output)
    if paths is None:
        raise click.ClickException(
            f"no run {run!r} in {output}; give a run id (or a unique prefix) or a run "
            f"directory ({FIND_RUNS})"
        )
    listing = read_listing(paths)
    config = paths.read_run_config() or {}
    examples = []
    for record in paths.records():
        failed = bool(record.get("error"))
        if errored and not failed:
            continue
        if missed and (failed or float(record.get("reward") or 0.0) >= 1.0):
            continue
        examples.append(record)
        if len(examples) >= limit:
            break
    if as_json:
        echo_json({"run": listing.to_json(), "config": config, "examples": examples})
        return
    click.echo(f"run {listing.run_id}  {paths.dir}")
    click.echo(f"  benchmark {listing.benchmark}   model {listing.model}")
    click.echo(f"  state     {listing.state_text}")
    click.echo(f"  reward    {reward_text(listing)}")
    if listing.verdict:
        click.echo(f"  verdict   {listing.verdict}")
    startup = config.get("server_startup")
    if startup:
        click.echo("  start-up  " + ", ".join(f"{k} {v}s" for k, v in startup.items()))
    click.echo("configuration:")
    for key in ("env_id", "endpoint", "sampling", "rollouts", "num_examples", "chat_template"):
        if key in config:
            click.echo(f"  {key}: {json.dumps(config[key], default=str)}")
    resolved = config.get("config") or {}
    for section in ("infra", "vllm", "eval", "gate", "env_args"):
        if section in resolved:
            click.echo(f"  {section}: {json.dumps(resolved[section], default=str)}")
    click.echo(f"examples ({len(examples)} shown):")
    for record in examples:
        mark = "ERROR" if record.get("error") else f"reward {float(record.get('reward') or 0):g}"
        click.echo(f"- #{record.get('example_id')} r{record.get('rollout', 0)}  {mark}")
        click.echo(f"    prompt:     {_text(record.get('prompt'))}")
        click.echo(f"    completion: {_text(record.get('completion'))}")
        click.echo(f"    answer:     {_text(record.get('answer'))}")
        if record.get("error"):
            click.echo(f"    error:      {_text(record.get('error'))}")

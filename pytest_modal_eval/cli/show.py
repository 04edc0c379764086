"""``pytest-modal-eval show RUN``: one run — summary, configuration, examples."""

from __future__ import annotations

import json
from typing import Any

import click

from pytest_modal_eval.cli.common import (
    api_key_env_option,
    echo_json,
    json_option,
    output_dir_option,
    project_redactor,
    resolve_output_dir,
    shown,
)
from pytest_modal_eval.cli.runs import reward_text, seat_text, time_text
from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.gate.verdict import ReferenceComparison
from pytest_modal_eval.runs.locate import find_run
from pytest_modal_eval.runs.paths import read_listing
from pytest_modal_eval.stats.format import describe_attempts, describe_comparison


def _text(messages: Any, limit: int = 400) -> str:
    """A prompt or completion (a list of chat messages, or a string) as one short line (its
    control characters are escaped as the line is printed)."""
    if isinstance(messages, list):
        parts = [str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in messages]
        text = " | ".join(p for p in parts if p)
    else:
        text = "" if messages is None else str(messages)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _play(play: Any) -> str:
    """One of a record's ``attempts``: its reward, or ERROR."""
    if not isinstance(play, dict):
        return "?"
    if play.get("error"):
        return "ERROR"
    reward = play.get("reward")
    return f"{float(reward):g}" if isinstance(reward, (int, float)) else "?"


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
@api_key_env_option
@json_option
def show(
    run: str,
    missed: bool,
    errored: bool,
    limit: int,
    output_dir: str | None,
    api_key_env: str | None,
    as_json: bool,
) -> None:
    """Show one run (RUN: a run id, or its directory).

    The secrets a pytest session of this project knows are shown as [redacted].
    """
    paths = find_run(run, resolve_output_dir(output_dir))
    listing = read_listing(paths)
    redactor = project_redactor(api_key_env)
    config = redactor.json(paths.read_run_config() or {}, by_name=False)
    examples: list[dict[str, Any]] = []
    # Every record is read, also past the last one shown: a damaged file is an error here as
    # in every other command, never a listing that silently stops early.
    for record in paths.records():
        failed = bool(record.get("error"))
        if errored and not failed:
            continue
        if missed and (failed or float(record.get("reward") or 0.0) >= 1.0):
            continue
        if len(examples) < limit:
            examples.append(redactor.json(record, by_name=False))
    if as_json:
        run_json = redactor.json(listing.to_json(), by_name=False)
        echo_json({"run": run_json, "config": config, "examples": examples})
        return

    def echo(line: str) -> None:
        # Secrets replaced, control characters escaped: a model's text never drives the
        # terminal, and each line stays one line.
        click.echo(shown(line, newlines=False))

    echo(f"run {listing.run_id}  {paths.dir}")
    echo(f"  benchmark {listing.benchmark}   model {listing.model}")
    echo(f"  state     {listing.state_text}")
    echo(f"  reward    {reward_text(listing)}")
    metadata = paths.read_metadata() or {}
    seats = metadata.get("seats") or {}
    if not seats and (attempts := describe_attempts(metadata.get("attempts"))):
        echo(f"  attempts  {attempts}")
    for name, figures in seats.items():
        played = describe_attempts(figures.get("attempts"))
        echo(f"    {name}: {seat_text(figures)}" + (f"; {played}" if played else ""))
    if listing.verdict:
        echo(f"  verdict   {listing.verdict}")
    echo(f"  time      {time_text(listing)}")
    if isinstance(vs_reference := metadata.get("vs_reference"), dict):
        # The comparison the session's summary printed, in the same words.
        try:
            reference = ReferenceComparison.from_dict(vs_reference)
        except (TypeError, ValueError) as exc:
            raise RunFileError(
                f"{paths.metadata}: field 'vs_reference' does not hold a comparison ({exc}); "
                "restore the file from the run's session, or re-run the benchmark"
            ) from None
        lines = describe_comparison(reference.comparison, "reference", "this model")
        echo(f"  vs        {reference.model} (reference, run {reference.run_id}):")
        for line in lines:
            echo(f"            {line}")
    startup = config.get("server_startup")
    if isinstance(startup, dict) and startup:
        echo("  start-up  " + ", ".join(f"{k} {v}s" for k, v in startup.items()))
    echo("configuration:")
    for key in ("env_id", "endpoint", "sampling", "rollouts", "num_examples", "chat_template"):
        if key in config:
            echo(f"  {key}: {json.dumps(config[key], default=str)}")  # ASCII JSON
    resolved = config.get("config") or {}
    for section in ("infra", "vllm", "eval", "gate", "env_args"):
        if section in resolved:
            echo(f"  {section}: {json.dumps(resolved[section], default=str)}")
    if paths.torn_checkpoint():
        echo(
            f"  note: the last line of {paths.checkpoint.name} is cut off (the run was killed "
            "while writing it); its example is evaluated again when the run resumes"
        )
    echo(f"examples ({len(examples)} shown):")
    for record in examples:
        mark = "ERROR" if record.get("error") else f"reward {float(record.get('reward') or 0):g}"
        # Several seats: one record per seat per rollout, each named.
        seat = f" [{record['agent']}]" if record.get("seats") and record.get("agent") else ""
        # A seat played several times: the reward is the mean of its plays, each shown.
        plays = record.get("attempts") or []
        if len(plays) > 1:
            mark += "  attempts " + ", ".join(_play(play) for play in plays)
        echo(f"- #{record['example_id']} r{record.get('rollout') or 0}{seat}  {mark}")
        echo(f"    prompt:     {_text(record.get('prompt'))}")
        echo(f"    completion: {_text(record.get('completion'))}")
        echo(f"    answer:     {_text(record.get('answer'))}")
        if record.get("error"):
            echo(f"    error:      {_text(record.get('error'))}")

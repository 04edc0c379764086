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
from pytest_modal_eval.cli.remote import (
    RemoteRuns,
    find_run_here_or_remote,
    remote_option,
    volume_option,
)
from pytest_modal_eval.cli.runs import reward_text, seat_text, time_text
from pytest_modal_eval.config.backends import BACKENDS, SERVER_SECTIONS
from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.gate.verdict import ReferenceComparison
from pytest_modal_eval.runs.messages import content_text, question_or_prompt
from pytest_modal_eval.runs.paths import read_listing
from pytest_modal_eval.stats.format import describe_attempts, describe_comparison


def _line(text: str, limit: int = 400) -> str:
    """Text as one short line (its control characters are escaped as the line is printed)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text(messages: Any) -> str:
    """A completion, an answer or an error (chat messages, or a string) as one short line: the
    messages' contents, without their roles."""
    if isinstance(messages, list):
        parts = [
            content_text(m.get("content")) if isinstance(m, dict) else str(m) for m in messages
        ]
        return _line(" | ".join(p for p in parts if p))
    return _line("" if messages is None else str(messages))


def _applied_server_config(run_config: dict[str, Any]) -> dict[str, Any]:
    """The server settings (``infra``, ``vllm``, ``chat_template``) that applied to a run: those
    its backend's server was built from (``BackendSpec.server_settings``); all of them for a run
    that does not record a backend this version knows."""
    resolved = run_config.get("config") or {}
    profile = run_config.get("server_profile")
    name = profile.get("backend") if isinstance(profile, dict) else None
    spec = BACKENDS.get(name) if isinstance(name, str) else None
    if spec is None:
        return {key: resolved[key] for key in SERVER_SECTIONS if key in resolved}
    return spec.server_config(resolved)


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
@remote_option
@volume_option
@api_key_env_option
@json_option
def show(
    run: str,
    missed: bool,
    errored: bool,
    limit: int,
    output_dir: str | None,
    remote: bool,
    volume: str | None,
    api_key_env: str | None,
    as_json: bool,
) -> None:
    """Show one run (RUN: a run id, or its directory).

    The secrets a pytest session of this project knows are shown as [redacted].
    """
    paths = find_run_here_or_remote(
        run, resolve_output_dir(output_dir), RemoteRuns(volume) if remote else None
    )
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
    # Only what applied: an endpoint run has no server settings, a local one no Modal scaling.
    server = _applied_server_config(config)
    shown_keys = ["env_id", "endpoint", "sampling", "rollouts", "num_examples"]
    if "chat_template" in server:  # the template the server used, as the run recorded it
        shown_keys.append("chat_template")
    for key in shown_keys:
        if key in config:
            echo(f"  {key}: {json.dumps(config[key], default=str)}")  # ASCII JSON
    general = config.get("config") or {}
    for section in ("infra", "vllm", "eval", "gate", "env_args"):
        source = server if section in SERVER_SECTIONS else general
        if section in source:
            echo(f"  {section}: {json.dumps(source[section], default=str)}")
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
        # The question, as the report's prompt column shows it: a system prompt is the same on
        # every example, and would push what differs off the line.
        echo(f"    prompt:     {_line(question_or_prompt(record.get('prompt')))}")
        echo(f"    completion: {_text(record.get('completion'))}")
        echo(f"    answer:     {_text(record.get('answer'))}")
        if record.get("error"):
            echo(f"    error:      {_text(record.get('error'))}")

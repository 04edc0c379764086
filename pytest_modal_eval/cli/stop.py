"""``pytest-modal-eval stop``: stop this tool's deployments, and only those."""

from __future__ import annotations

import click

from pytest_modal_eval.cli.common import say
from pytest_modal_eval.cli.modal_apps import modal_apps
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.serving.modal.app import tag_value


@click.command()
@click.option("-m", "--model", metavar="ORG/NAME", default=None, help="stop this model's apps")
@click.option(
    "-b",
    "--benchmark",
    "benchmark_path",
    metavar="YAML",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="with -m: only the app serving this benchmark's server profile",
)
@click.option(
    "--override",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    help="with -b: the overrides it was deployed with",
)
@click.option("--all", "stop_all", is_flag=True, help="stop every app this tool deployed")
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation")
@click.pass_context
def stop(
    ctx: click.Context,
    model: str | None,
    benchmark_path: str | None,
    overrides: tuple[str, ...],
    stop_all: bool,
    yes: bool,
) -> None:
    """Stop Modal apps this tool deployed (never any other app)."""
    if bool(model) == stop_all:
        raise click.UsageError("give either -m MODEL (optionally with -b BENCHMARK) or --all")
    if benchmark_path and not model:
        raise click.UsageError("-b needs -m MODEL")
    apps = modal_apps(ctx)
    try:
        ours = [r for r in apps.deployed() if r.ours]
        if model and benchmark_path:
            from pytest_modal_eval.cli.deploy import deploy_spec

            name = deploy_spec(model, benchmark_path, overrides).app_name()
            chosen = [r for r in ours if r.name == name]
        elif model:
            chosen = [r for r in ours if r.tags.get("model") == tag_value(model)]
        else:
            chosen = ours
        if not chosen:
            click.echo("nothing to stop: no matching app of pytest-modal-eval is deployed")
            return
        say(
            "\n".join(
                f"{r.name}  ({r.tags.get('model', '?')}, {r.tasks} containers)" for r in chosen
            )
        )
        if not yes:
            click.confirm(f"stop {len(chosen)} app(s)?", abort=True)
        for record in chosen:
            apps.stop(record.name)
            say(f"stopped {record.name}")
    except ServingError as exc:
        raise click.ClickException(str(exc)) from None

"""``pytest-modal-eval stop``: stop a detached session, this tool's deployments, or end its
leftover sandboxes, and nothing else."""

from __future__ import annotations

import click

from pytest_modal_eval.cli.common import say, shown
from pytest_modal_eval.cli.remote import volume_option
from pytest_modal_eval.exceptions import DetachError, ServingError


@click.command()
@click.argument("detached", metavar="SESSION", required=False)
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
@click.option(
    "--sandboxes",
    is_flag=True,
    help="end this tool's running Modal sandboxes (harnesses of the `modal` runtime) instead",
)
@click.option(
    "--session",
    metavar="ID",
    default=None,
    help="with --sandboxes: only those of this pytest session (as listed)",
)
@click.option("--dry-run", is_flag=True, help="list what would be stopped, stop nothing")
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation")
@click.option(
    "--timeout",
    "timeout_s",
    metavar="SECONDS",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="with SESSION: how long it gets to save and end before its containers are terminated",
)
@volume_option
@click.pass_context
def stop(
    ctx: click.Context,
    detached: str | None,
    model: str | None,
    benchmark_path: str | None,
    overrides: tuple[str, ...],
    stop_all: bool,
    sandboxes: bool,
    session: str | None,
    dry_run: bool,
    yes: bool,
    timeout_s: float,
    volume: str | None,
) -> None:
    """Stop a detached session (SESSION: its id, or a unique start of it), Modal apps this
    tool deployed, or end the Modal sandboxes its runs left (never any other app or sandbox).

    A session is asked to stop first: its pytest saves what it finished, stops the servers it
    started (a deployment another session uses is left alone) and ends; one that has not ended
    after --timeout seconds has its containers terminated."""
    if [bool(detached), bool(model), stop_all, sandboxes].count(True) != 1:
        raise click.UsageError(
            "give one of SESSION, -m MODEL (optionally with -b BENCHMARK), --all or --sandboxes"
        )
    if detached:
        stop_session(detached, timeout_s, volume, dry_run, yes)
        return
    if benchmark_path and not model:
        raise click.UsageError("-b needs -m MODEL")
    if session and not sandboxes:
        raise click.UsageError("--session needs --sandboxes")
    if sandboxes:
        stop_sandboxes(session, dry_run, yes)
    else:
        stop_apps(ctx, model, benchmark_path, overrides, dry_run, yes)


def stop_apps(
    ctx: click.Context,
    model: str | None,
    benchmark_path: str | None,
    overrides: tuple[str, ...],
    dry_run: bool,
    yes: bool,
) -> None:
    """List this tool's apps (one model's, or one benchmark's, when given) and stop them."""
    # Here, not at the top: ending sandboxes needs neither the app definition nor its listing.
    from pytest_modal_eval.cli.modal_apps import modal_apps
    from pytest_modal_eval.serving.modal.app import model_tag

    apps = modal_apps(ctx)
    try:
        ours = [r for r in apps.deployed() if r.ours]
        if model and benchmark_path:
            from pytest_modal_eval.cli.deploy import deploy_spec

            name = deploy_spec(model, benchmark_path, overrides).app_name()
            chosen = [r for r in ours if r.name == name]
        elif model:
            chosen = [r for r in ours if r.tags.get("model") == model_tag(model)]
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
        if dry_run:
            return
        if not yes:
            click.confirm(f"stop {len(chosen)} app(s)?", abort=True)
        for record in chosen:
            apps.stop(record.name)
            say(f"stopped {record.name}")
    except ServingError as exc:
        raise click.ClickException(str(exc)) from None


def stop_sandboxes(session: str | None, dry_run: bool, yes: bool) -> None:
    """List this tool's running Modal sandboxes (one session's when given) and end them."""
    from pytest_modal_eval.serving.modal.sandboxes import running_sandboxes

    try:
        found = running_sandboxes(session)
        if not found:
            click.echo("nothing to end: no sandbox of pytest-modal-eval is running")
            return
        # Ids and tags come from Modal: each printed on one line, secrets and control
        # characters escaped.
        for sandbox in found:
            sandbox_id, session_id = (
                shown(text, newlines=False) for text in (sandbox.sandbox_id, sandbox.session)
            )
            click.echo(f"{sandbox_id}  (session {session_id})")
        if dry_run:
            return
        if not yes:
            click.confirm(
                f"end {len(found)} sandbox(es)? A pytest still running loses their rollouts",
                abort=True,
            )
        failed = []
        for sandbox in found:
            try:
                sandbox.terminate()
            except ServingError as exc:  # the others are still ended
                failed.append(str(exc))
                continue
            say(f"ended {shown(sandbox.sandbox_id, newlines=False)}")
        if failed:
            raise ServingError(
                f"{len(failed)} of {len(found)} sandbox(es) could not be ended "
                f"({'; '.join(failed)}); run the command again"
            )
    except ServingError as exc:
        raise click.ClickException(str(exc)) from None


def stop_session(
    session: str, timeout_s: float, volume: str | None, dry_run: bool, yes: bool
) -> None:
    """Ask a detached session to stop, and wait for it (terminate it after ``timeout_s``)."""
    from pytest_modal_eval.cli.remote import modal_calls
    from pytest_modal_eval.detach.sessions import describe, find_session
    from pytest_modal_eval.detach.sessions import stop as stop_detached

    calls = modal_calls(volume)
    try:
        found = find_session(calls, session)
        info = describe(calls, found)
        say(f"{found}  ({info.state}) {info.command}")
        if dry_run:
            return
        if not yes:
            click.confirm(f"stop session {found}?", abort=True)
        end = stop_detached(calls, found, wait_s=timeout_s, say=say)
    except DetachError as exc:
        raise click.ClickException(str(exc)) from None
    if end is None:
        say(f"session {found} had ended already ({info.state})")
    else:
        say(f"session {found} {end.state}: exit status {end.exit_code}")

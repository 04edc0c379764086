"""``pytest-modal-eval logs``: the detached sessions, and one session's output, followed until
it ends with ``-f``."""

from __future__ import annotations

import click

from pytest_modal_eval.cli.common import echo_json, json_option, say, shown, table
from pytest_modal_eval.cli.remote import modal_calls, volume_option
from pytest_modal_eval.exceptions import DetachError


@click.command()
@click.argument("session", required=False)
@click.option("-f", "--follow", is_flag=True, help="follow the output until the session ends")
@click.option(
    "--worker",
    metavar="NAME",
    default=None,
    help="a fanned-out session's worker (its benchmark, as the session's log names it)",
)
@volume_option
@json_option
def logs(
    session: str | None, follow: bool, worker: str | None, volume: str | None, as_json: bool
) -> None:
    """Without SESSION: the detached sessions (pytest --detach), newest first. With SESSION
    (its id, or a unique start of it): its pytest output so far; with -f, followed until the
    session ends, and the exit status is the session's."""
    from pytest_modal_eval.detach.follow import follow as follow_log
    from pytest_modal_eval.detach.sessions import describe, find_session, session_ids

    calls = modal_calls(volume)
    try:
        if session is None:
            infos = [describe(calls, found) for found in session_ids(calls)]
            if as_json:
                echo_json([info.to_json() for info in infos])
            elif not infos:
                say(f"no detached sessions on Volume {calls.volume_name}")
            else:
                rows = [
                    [
                        info.session_id,
                        info.state,
                        "-" if info.exit_code is None else str(info.exit_code),
                        info.command,
                    ]
                    for info in infos
                ]
                say(table(["SESSION", "STATE", "EXIT", "COMMAND"], rows))
            return
        found = find_session(calls, session)
        end = follow_log(
            calls,
            found,
            None,
            lambda text: click.echo(shown(text), nl=False),
            worker=worker,
            until_end=follow,
        )
    except DetachError as exc:
        raise click.ClickException(str(exc)) from None
    if end is not None:
        say(f"session {found} {end.state}: exit status {end.exit_code}")
        if end.note:
            say(f"  {end.note}")
        raise SystemExit(end.exit_code)

"""``pytest-modal-eval pull``: a detached session's run copied from its Volume into the output
directory, byte for byte as its container wrote it."""

from __future__ import annotations

import click

from pytest_modal_eval.cli.common import output_dir_option, resolve_output_dir, say
from pytest_modal_eval.cli.remote import RemoteRuns, volume_option


@click.command()
@click.argument("run")
@output_dir_option
@volume_option
def pull(run: str, output_dir: str | None, volume: str | None) -> None:
    """Copy RUN (a run id on the Volume of detached sessions, or a unique start of it) into the
    output directory, where every command and pytest itself find it as a local run:
    `pytest-modal-eval runs --remote` lists them. Its files are the Volume's, byte for byte;
    a file that is already here and unchanged is not fetched again."""
    from pytest_modal_eval.detach.mirror import Mirror
    from pytest_modal_eval.runs.locate import find_run

    remote = RemoteRuns(volume)
    cache = remote.listing()
    found = find_run(run, cache)
    relative = found.dir.relative_to(cache)
    target = resolve_output_dir(output_dir)
    fetched = Mirror(remote.calls, target).sync(relative.as_posix())
    say(f"pulled run {found.run_id} into {target / relative} ({fetched} files fetched)")

"""``pytest-modal-eval push RUN... --to ORG/NAME``: push finished runs to the Hugging Face Hub.

The same push as ``pytest --push-to-hub``, for runs already on disk: a run directory, or a
directory holding runs (the output directory, or one benchmark x model's directory), of which
the finished runs are pushed and the unfinished ones skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from pytest_modal_eval.cli.common import require_dir
from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.share import bundle, hub


@click.command()
@click.argument(
    "locations",
    metavar="RUN...",
    nargs=-1,
    required=True,
    type=click.Path(path_type=Path),
)
@click.option(
    "--to",
    "repo_id",
    required=True,
    metavar="ORG/NAME",
    help="the Hub dataset repository (created if missing).",
)
@click.option(
    "--private",
    is_flag=True,
    default=False,
    help="create the repository private (an existing one keeps its visibility).",
)
def push(locations: tuple[Path, ...], repo_id: str, private: bool) -> None:
    """Push finished runs to a dataset repository on the Hugging Face Hub.

    One configuration per benchmark x model (the newest run given of each), with a dataset
    card. The token comes from HF_TOKEN. Pushing the same runs again changes nothing.
    """
    for location in locations:
        require_dir(location, "a run directory or a directory holding runs")
    try:
        hub.check_repo_id(repo_id)
        token = hub.hub_token(os.environ)
        redactor = Redactor.from_environ()
        runs = []
        for location in locations:
            found = bundle.find_runs(location)
            named = [paths.dir for paths in found] == [location]  # a run, not a folder of runs
            for paths in found:
                if not named and not paths.finished():
                    click.echo(f"skipped {paths.dir}: not finished")
                    continue
                runs.append(bundle.load_run(paths.dir, redactor))
        if not runs:
            raise ShareError("no finished runs among " + ", ".join(map(str, locations)))
        latest = bundle.latest_per_config(runs)
        for run in runs:
            if latest[run.config_name] is not run:
                click.echo(f"skipped {run.paths.dir}: {latest[run.config_name].run_id} is newer")
        result = hub.push_runs(runs, repo_id, token=token, redactor=redactor, private=private)
    except ShareError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(result.describe())

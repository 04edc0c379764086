"""``pytest-modal-eval push RUN... --to ORG/NAME``: push finished runs to the Hugging Face Hub.

The same push as ``pytest --push-to-hub``, for runs already on disk: a run directory, or a
directory holding runs (the output directory, or one benchmark x model's directory), of which
the finished runs are pushed and the unfinished ones skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from pytest_modal_eval.cli.common import (
    api_key_env_option,
    output_dir_option,
    project_redactor,
    resolve_output_dir,
    say,
)
from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.runs.locate import find_locations
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.share import bundle, hub


@click.command()
@click.argument(
    "locations",
    metavar="RUN...",
    nargs=-1,
    required=True,
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
@output_dir_option
@api_key_env_option
def push(
    locations: tuple[str, ...],
    repo_id: str,
    private: bool,
    output_dir: str | None,
    api_key_env: str | None,
) -> None:
    """Push finished runs to a dataset repository on the Hugging Face Hub.

    One configuration per benchmark x model (the newest run given of each), with a dataset
    card. The token comes from HF_TOKEN. Pushing the same runs again changes nothing. The
    secrets a pytest session of this project knows (--api-key-env, ini modal_eval_secret_env,
    secret-named variables) are replaced by [redacted] in everything pushed.
    """
    root = resolve_output_dir(output_dir)
    named = {location: find_locations(location, root) for location in locations}
    try:
        hub.check_repo_id(repo_id)
        token = hub.hub_token(os.environ)
        redactor = project_redactor(api_key_env)
        runs = []
        for location, found in named.items():
            # A run named itself (its directory or id) is loaded even unfinished, so the
            # error says why; in a folder of runs, unfinished ones are skipped.
            folder = Path(location).is_dir() and not RunPaths(Path(location)).is_run()
            for paths in found:
                if folder and not paths.finished():
                    say(f"skipped {paths.dir}: not finished")
                    continue
                runs.append(bundle.load_run(paths.dir, redactor))
        if not runs:
            raise ShareError("no finished runs among " + ", ".join(map(str, locations)))
        latest = bundle.latest_per_config(runs)
        for run in runs:
            if latest[run.config_name] is not run:
                say(f"skipped {run.paths.dir}: {latest[run.config_name].run_id} is newer")
        result = hub.push_runs(
            runs,
            repo_id,
            token=token,
            redactor=redactor,
            private=private,
            log_dir=root / "logs",
        )
    except ShareError as exc:
        raise click.ClickException(str(exc)) from None
    say(result.describe())

"""``pytest-modal-eval report RUN... -o report.html``: the HTML report of stored runs."""

from __future__ import annotations

from pathlib import Path

import click

from pytest_modal_eval.cli.common import (
    api_key_env_option,
    output_dir_option,
    project_redactor,
    resolve_output_dir,
    say,
)
from pytest_modal_eval.cli.remote import RemoteRuns, remote_option, volume_option
from pytest_modal_eval.report.html import write_report
from pytest_modal_eval.report.page import ReportError
from pytest_modal_eval.runs.locate import RunNotFound, find_locations, newest_finished
from pytest_modal_eval.runs.paths import RunPaths


@click.command("report")
@click.argument("runs", metavar="RUN...", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="where to write the page (its directory must exist)",
)
@output_dir_option
@remote_option
@volume_option
@api_key_env_option
def report(
    runs: tuple[str, ...],
    output: Path,
    output_dir: str | None,
    remote: bool,
    volume: str | None,
    api_key_env: str | None,
) -> None:
    """Write one self-contained HTML page for RUN... .

    Each RUN is a run id or a run directory, or a directory above run directories (a
    benchmark's, or the whole output directory): then the newest finished run of each
    benchmark and model in it. A run named itself that has not finished (interrupted, or still
    running) is shown from its checkpoint, marked unfinished. The secrets a pytest session of
    this project knows are replaced by [redacted] on the page.
    """
    folder = output.parent
    if not folder.is_dir():
        problem = "not a directory" if folder.exists() else "no such directory"
        raise click.ClickException(
            f"-o {output}: {folder} is {problem}; create it first or choose another -o"
        )
    root = resolve_output_dir(output_dir)
    where = RemoteRuns(volume) if remote else None
    run_dirs: list[Path] = []
    for run in runs:
        try:
            found = find_locations(run, root)
        except RunNotFound:
            if where is not None and not Path(run).is_dir():
                found = [where.run(run)]
            elif not Path(run).is_dir():
                raise
            else:
                found = []  # a directory without runs: told below, as one without finished runs
        # A run named itself is shown whatever its state; of a directory of runs, the finished.
        named = not Path(run).is_dir() or RunPaths(Path(run)).is_run()
        finished = [paths.dir for paths in (found if named else newest_finished(found))]
        if not finished:
            raise click.ClickException(
                f"{run}: no finished run here (a run directory holds metadata.json, written when "
                "the run ends); run the benchmark again to finish it, or pass a finished run"
            )
        run_dirs += finished
    try:
        benchmarks = write_report(
            output,
            [(run_dir, None) for run_dir in run_dirs],
            redactor=project_redactor(api_key_env),
            unfinished=True,
        )
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    examples = sum(len(b.rows) for b in benchmarks)
    written = f"{len(benchmarks)} run" + ("" if len(benchmarks) == 1 else "s")
    cut = sum(1 for b in benchmarks if b.unfinished is not None)
    partial = f", {cut} unfinished: a partial report" if cut else ""
    say(f"wrote {output} ({written}, {examples} examples{partial})")

"""``pytest-modal-eval report RUN... -o report.html``: the HTML report of stored runs."""

from __future__ import annotations

from pathlib import Path

import click

from pytest_modal_eval.cli.common import require_dir
from pytest_modal_eval.report.html import ReportError, find_runs, write_report

EXPECTED = "a run directory, a benchmark's directory or the output directory"


@click.command("report")
@click.argument("runs", metavar="RUN...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="where to write the page",
)
def report(runs: tuple[Path, ...], output: Path) -> None:
    """Write one self-contained HTML page for RUN... .

    Each RUN is a run directory (it holds metadata.json), or a directory above run
    directories (a benchmark's, or the whole output directory): then the newest finished run
    of each benchmark and model in it.
    """
    try:
        run_dirs = [run_dir for path in runs for run_dir in find_runs(require_dir(path, EXPECTED))]
        benchmarks = write_report(output, [(run_dir, None) for run_dir in run_dirs])
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    examples = sum(len(b.rows) for b in benchmarks)
    click.echo(f"wrote {output} ({len(benchmarks)} runs, {examples} examples)")

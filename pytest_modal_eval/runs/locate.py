"""Finding runs: every command, the HTML report and the plugin's resume look for runs here.

A run is named by its directory or by its id (or a unique prefix of it) in the output
directory; a directory above runs (a benchmark x model's directory, or the output directory)
names the runs inside it. Layout and file names are :mod:`~pytest_modal_eval.runs.paths`'.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.model_names import earlier_model_slugs, model_label, model_slug
from pytest_modal_eval.runs.paths import RUN_CONFIG, RunListing, RunPaths, read_listing

#: The fix every "no such run" message gives: where a user finds a run's id and directory.
FIND_RUNS = "`pytest-modal-eval runs --json` lists each run's id and dir"


class RunNotFound(LookupError):
    """A run that is neither a directory nor an id in the output directory; the message
    names what was given, where it was looked for, and the fix."""


def iter_runs(output_dir: Path) -> Iterator[RunPaths]:
    """Every run directory under ``output_dir`` (one with ``run_config.json``), sorted by path."""
    if not output_dir.is_dir():
        return
    for config_path in sorted(output_dir.glob(f"*/*/{RUN_CONFIG}")):
        yield RunPaths(config_path.parent)


def runs_in(benchmark_dir: Path) -> Iterator[RunPaths]:
    """The runs of one benchmark and model (``{output}/{benchmark}--{model slug}``), sorted."""
    if not benchmark_dir.is_dir():
        return
    for config_path in sorted(benchmark_dir.glob(f"*/{RUN_CONFIG}")):
        yield RunPaths(config_path.parent)


def runs_under(path: Path) -> list[RunPaths]:
    """The runs a directory names: itself when it is a run, else every run inside it (a
    benchmark x model's directory, or the output directory)."""
    if RunPaths(path).is_run():
        return [RunPaths(path)]
    return [*runs_in(path), *iter_runs(path)]


def find_run(run: str, output_dir: Path) -> RunPaths:
    """A run named by its directory, or by its id (or a unique prefix of it) in ``output_dir``."""
    given = Path(run).expanduser()
    if given.is_dir():
        if RunPaths(given).is_run():
            return RunPaths(given.resolve())
        raise RunNotFound(
            f"{run}: a directory, but not a run's (no {RUN_CONFIG}); give a run id or a run "
            f"directory ({FIND_RUNS})"
        )
    runs = list(iter_runs(output_dir))
    matches = [p for p in runs if p.run_id == run] or [p for p in runs if p.run_id.startswith(run)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise RunNotFound(
            f"{run!r} is the start of {len(matches)} run ids in {output_dir}; give more of it "
            f"({FIND_RUNS})"
        )
    problem = "not a directory" if given.exists() else "no such directory"
    raise RunNotFound(
        f"{run}: {problem}, nor a run id in {output_dir}; give a run id (or a unique prefix) "
        f"or a run directory ({FIND_RUNS})"
    )


def find_locations(location: str, output_dir: Path) -> list[RunPaths]:
    """What a command's RUN argument names: a directory holding runs (or a run), else a run id
    in ``output_dir``."""
    given = Path(location).expanduser()
    if given.is_dir():
        found = runs_under(given)
        if not found:
            raise RunNotFound(
                f"{location}: neither a run directory (no {RUN_CONFIG}) nor a directory holding "
                f"runs; give a run id, a run directory, a benchmark's directory or the output "
                f"directory ({FIND_RUNS})"
            )
        return found
    return [find_run(location, output_dir)]


def newest_finished(runs: list[RunPaths]) -> list[RunPaths]:
    """The newest finished run (by run id, which starts with its UTC start time) of each
    benchmark x model among ``runs``, sorted by that directory."""
    newest: dict[Path, RunPaths] = {}
    for run in runs:
        parent = run.dir.parent
        if run.finished() and (parent not in newest or run.run_id > newest[parent].run_id):
            newest[parent] = run
    return [newest[parent] for parent in sorted(newest)]


def model_matches(query: str, listing: RunListing) -> bool:
    """``query`` names the run's model however it was written: the id it was run with
    (``Qwen/Qwen3-8B``, ``./tiny-arith``), its directory name (``tiny-arith``), its slug
    (``Qwen--Qwen3-8B``, ``local--tiny-arith``), or a path to the same directory."""
    model, slug = listing.model, listing.model_slug
    names = {model, model.rstrip("/"), Path(model.rstrip("/")).name}
    if slug:
        names |= {slug, slug.removeprefix("local--"), slug.removeprefix("default--")}
    asked = {query, query.rstrip("/")}
    if query.strip("/"):
        asked |= {model_slug(query), model_label(query), *earlier_model_slugs(query)}
    return bool(asked & names)


def list_runs(
    output_dir: Path,
    *,
    benchmark: str | None = None,
    model: str | None = None,
    limit: int | None = None,
    problems: list[RunFileError] | None = None,
) -> list[RunListing]:
    """Runs under ``output_dir``, newest first (run ids start with their UTC start time).

    A run whose small files are damaged raises :class:`RunFileError`, or, given ``problems``,
    is added there and left out: one damaged run does not hide the others.
    """
    found = []
    for paths in sorted(iter_runs(output_dir), key=lambda p: p.run_id, reverse=True):
        try:
            listing = read_listing(paths)
        except RunFileError as exc:
            if problems is None:
                raise
            problems.append(exc)
            continue
        if benchmark is not None and listing.benchmark != benchmark:
            continue
        if model is not None and not model_matches(model, listing):
            continue
        found.append(listing)
        if limit is not None and len(found) >= limit:
            break
    return found

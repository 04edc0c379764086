"""``pytest-modal-eval benchmarks``: the benchmark YAMLs pytest would collect, as a table."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from pytest_modal_eval.cli.common import echo_json, json_option, parsed_overrides, say, table
from pytest_modal_eval.cli.project import Project
from pytest_modal_eval.collect.items import matches_benchmark_patterns
from pytest_modal_eval.collect.precheck import LoadCache, problems_message
from pytest_modal_eval.config.loader import load_benchmark
from pytest_modal_eval.config.options import DEFAULT_FILES
from pytest_modal_eval.exceptions import BenchmarkError

#: Directories pytest does not recurse into by default (its ``norecursedirs``).
_SKIP_DIRS = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}")


def find_benchmark_files(project: Project, paths: list[Path]) -> list[Path]:
    """Files named explicitly, plus YAMLs under the named directories (the rootdir when none
    is named) that match ini ``modal_eval_files`` — as pytest collects them. Sorted."""
    import fnmatch

    patterns = project.ini_lines("modal_eval_files", DEFAULT_FILES)
    found: set[Path] = set()
    for path in paths or [project.rootdir]:
        path = path.resolve()
        if path.is_file():
            found.add(path)
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(
                d for d in dirs if not any(fnmatch.fnmatch(d, skip) for skip in _SKIP_DIRS)
            )
            for name in files:
                candidate = Path(folder) / name
                if matches_benchmark_patterns(candidate, project.rootdir, patterns):
                    found.add(candidate)
    return sorted(found)


def describe(
    path: Path,
    load: bool = True,
    cache: LoadCache | None = None,
    overrides: Sequence[tuple[str, Any]] = (),
) -> dict[str, Any]:
    """A benchmark file as a row: its settings with ``overrides`` (``--override``'s), and the
    problems collection would find (``collect/precheck.py``; with ``load``, the environment is
    loaded as ``pytest --collect-only`` loads it), or the YAML's error."""
    from pytest_modal_eval.client.verifiers_adapter import missing_environment
    from pytest_modal_eval.collect.precheck import load_problems, quick_problems

    try:
        benchmark = load_benchmark(path, list(overrides))
    except BenchmarkError as exc:
        return {"file": str(path), "error": str(exc)}
    config = benchmark.config
    gate = config.gate.model_dump(exclude_defaults=True)
    problems = quick_problems(benchmark)
    examples = None
    if load and not problems:
        problems, loaded = load_problems(benchmark, cache)
        examples = len(loaded.example_ids) if loaded is not None else None
    return {
        "file": str(path),
        "name": benchmark.name,
        "env_id": config.env_id,
        "installed": missing_environment(config.env_id) is None,
        "gpu": config.infra.gpu,
        "tp": config.vllm.tensor_parallel_size,
        "dp": config.vllm.data_parallel_size,
        "num_examples": config.eval.num_examples,
        "examples": examples,  # selected examples the loaded environment holds
        "rollouts": config.eval.rollouts,
        "gate": gate,
        "problems": problems,
    }


def _examples_text(row: dict[str, Any]) -> str:
    """The examples a run selects: as many as the loaded environment holds (up to
    ``eval.num_examples``), else what the YAML asks for."""
    if row["examples"] is not None:
        return str(row["examples"])
    return str(row["num_examples"] or "all")


def _gate_text(gate: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in gate.items()) or "-"


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--quick",
    is_flag=True,
    help="check without loading the environments: the YAML, the environment installed, a "
    "bundled environment's data files (as every pytest run does). Default: load each, as "
    "pytest --collect-only does.",
)
@click.option(
    "--override",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    help="as for pytest, e.g. env_args.path=data/other.jsonl: each benchmark is checked with "
    "it. Repeatable.",
)
@json_option
def benchmarks(
    paths: tuple[Path, ...], quick: bool, overrides: tuple[str, ...], as_json: bool
) -> None:
    """List the benchmark YAMLs pytest would collect (PATHS: files or directories), each
    checked as pytest --collect-only checks it: the YAML and --override, the environment
    installed and loading with its env_args, a bundled environment's data files.

    Exit status 1 when any of them cannot run; the errors say which field to fix.
    """
    parsed = parsed_overrides(overrides)
    project = Project.find()
    cache: LoadCache = {}
    rows = [
        describe(path, load=not quick, cache=cache, overrides=parsed)
        for path in find_benchmark_files(project, list(paths))
    ]
    bad = [row for row in rows if "error" in row or row["problems"]]
    if as_json:
        echo_json(rows)
    else:
        valid = [row for row in rows if "error" not in row]
        if valid:
            say(
                table(
                    [
                        "NAME",
                        "ENV_ID",
                        "INSTALLED",
                        "GPU",
                        "TP/DP",
                        "EXAMPLES",
                        "ROLLOUTS",
                        "GATE",
                        "CHECK",
                    ],
                    [
                        [
                            r["name"],
                            r["env_id"],
                            "yes" if r["installed"] else "no",
                            r["gpu"],
                            f"{r['tp']}/{r['dp']}",
                            _examples_text(r),
                            str(r["rollouts"]),
                            _gate_text(r["gate"]),
                            "broken" if r["problems"] else "ok" if not quick else "ok (quick)",
                        ]
                        for r in valid
                    ],
                )
            )
        elif not bad:
            click.echo(
                "no benchmark files found (ini modal_eval_files: "
                f"{' '.join(project.ini_lines('modal_eval_files', DEFAULT_FILES))})"
            )
        for row in bad:
            if "error" in row:
                say(f"\nINVALID {row['error']}", err=True)
            else:
                say("\nBROKEN " + problems_message(Path(row["file"]), row["problems"]), err=True)
    if bad:
        raise SystemExit(1)

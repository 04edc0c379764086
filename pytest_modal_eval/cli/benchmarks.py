"""``pytest-modal-eval benchmarks``: the benchmark YAMLs pytest would collect, as a table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from pytest_modal_eval.cli.common import echo_json, json_option, say, table
from pytest_modal_eval.cli.project import Project
from pytest_modal_eval.collect.items import matches_benchmark_patterns
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


def describe(path: Path) -> dict[str, Any]:
    from pytest_modal_eval.client.verifiers_adapter import missing_environment

    try:
        benchmark = load_benchmark(path)
    except BenchmarkError as exc:
        return {"file": str(path), "error": str(exc)}
    config = benchmark.config
    gate = config.gate.model_dump(exclude_defaults=True)
    return {
        "file": str(path),
        "name": benchmark.name,
        "env_id": config.env_id,
        "installed": missing_environment(config.env_id) is None,
        "gpu": config.infra.gpu,
        "tp": config.vllm.tensor_parallel_size,
        "dp": config.vllm.data_parallel_size,
        "num_examples": config.eval.num_examples,
        "rollouts": config.eval.rollouts,
        "gate": gate,
    }


def _gate_text(gate: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in gate.items()) or "-"


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@json_option
def benchmarks(paths: tuple[Path, ...], as_json: bool) -> None:
    """List the benchmark YAMLs pytest would collect (PATHS: files or directories).

    Exit status 1 when any of them is invalid; the errors say which field to fix.
    """
    project = Project.find()
    rows = [describe(path) for path in find_benchmark_files(project, list(paths))]
    bad = [row for row in rows if "error" in row]
    if as_json:
        echo_json(rows)
    else:
        good = [row for row in rows if "error" not in row]
        if good:
            say(
                table(
                    ["NAME", "ENV_ID", "INSTALLED", "GPU", "TP/DP", "EXAMPLES", "ROLLOUTS", "GATE"],
                    [
                        [
                            r["name"],
                            r["env_id"],
                            "yes" if r["installed"] else "no",
                            r["gpu"],
                            f"{r['tp']}/{r['dp']}",
                            str(r["num_examples"] or "all"),
                            str(r["rollouts"]),
                            _gate_text(r["gate"]),
                        ]
                        for r in good
                    ],
                )
            )
        elif not bad:
            click.echo(
                "no benchmark files found (ini modal_eval_files: "
                f"{' '.join(project.ini_lines('modal_eval_files', DEFAULT_FILES))})"
            )
        for row in bad:
            say(f"\nINVALID {row['error']}", err=True)
    if bad:
        raise SystemExit(1)

"""Everything about a benchmark that can be checked without sending a request, checked when
it is collected: before any server starts, as pytest checks a test module by importing it.

Two depths, each a list of problems (one line each: the field, what is wrong, the fix):

- :func:`quick_problems`, on every collection: the environment is installed, a bundled
  environment's data files exist, a local ``--model`` directory holds a model's weights and
  tokenizer. They load nothing, so collecting stays cheap.
- :func:`load_problems`, under ``--collect-only`` and in ``pytest-modal-eval benchmarks``:
  the environment loads with the benchmark's ``env_args`` and has examples. Loading may import
  the environment's framework and read its dataset: what a user asking for a full check waits
  for. A run loads the environment when its item is set up, before it asks for an endpoint.

``pytest-modal-eval benchmarks`` and collection call the same functions, so the two never
disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.exceptions import EnvironmentLoadError

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_modal_eval.config.loader import Benchmark


def quick_problems(benchmark: Benchmark, local_models: Sequence[str] = ()) -> list[str]:
    """What can be seen without loading anything: the environment installed, a bundled
    environment's data files, and each of ``local_models`` (the ``--model`` values a server
    will load from this machine's disk) holding a model for this benchmark's vLLM arguments."""
    from pytest_modal_eval.client.verifiers_adapter import missing_environment
    from pytest_modal_eval.envs import data_file_problems
    from pytest_modal_eval.serving.preflight import model_dir_problem, model_files_problem

    config = benchmark.config
    problems = []
    missing = missing_environment(config.env_id)
    if missing is not None:
        problems.append(f"env_id: {missing}")
    for problem in data_file_problems(
        config.env_id, config.env_args, benchmark.path.parent.resolve()
    ):
        # "env_args.path: ...", marked as the YAML's errors mark a value --override gave.
        field, _, what = problem.partition(": ")
        overridden = any(key in ("env_args", field) for key, _ in benchmark.overrides)
        problems.append(f"{field} (from --override): {what}" if overridden else problem)
    for model in local_models:
        refused = model_dir_problem(model) or model_files_problem(model, config.vllm.extra_args)
        if refused is not None:
            problems.append(refused)
    return problems


@dataclass(frozen=True)
class Loaded:
    """What loading the environment found: the selected examples' ids (the first
    ``eval.num_examples`` of its dataset, or all)."""

    example_ids: list[int]


#: Loads already made in this process, by what they depend on (see :func:`load_problems`).
LoadCache = dict[str, tuple[list[str], "Loaded | None"]]


def load_problems(
    benchmark: Benchmark, cache: LoadCache | None = None
) -> tuple[list[str], Loaded | None]:
    """Load the environment as a run does and read which examples the benchmark selects;
    the problems (an environment that rejects its ``env_args``, fails to load, or has no
    example), else what was found. Benchmarks that load the same environment the same way
    (another gate, other sampling) share one load through ``cache``."""
    import json

    config = benchmark.config
    key = json.dumps(
        [
            config.env_id,
            config.env_args,
            str(benchmark.path.parent.resolve()),
            config.agent.model_dump(mode="json"),
            config.eval.num_examples,
            config.eval.max_turns,
            benchmark.overrides,
        ],
        sort_keys=True,
        default=str,
    )
    if cache is not None and key in cache:
        return cache[key]
    found = _load(benchmark)
    if cache is not None:
        cache[key] = found
    return found


def _load(benchmark: Benchmark) -> tuple[list[str], Loaded | None]:
    from pytest_modal_eval.client import verifiers_adapter

    config = benchmark.config
    try:
        env = verifiers_adapter.load_environment(
            config.env_id,
            config.env_args,
            benchmark.path.parent.resolve(),
            agent=config.agent.model_dump(exclude_none=True),
            num_examples=config.eval.num_examples,
            max_turns=config.eval.max_turns,
        )
        rows = verifiers_adapter.dataset_rows(env, config.eval.num_examples)
        ids = rows.example_ids().tolist()
    except EnvironmentLoadError as exc:
        source = env_args_source(benchmark.path, benchmark.overrides, str(exc))
        return [str(exc) if source == str(benchmark.path) else f"{source}: {exc}"], None
    if not ids:
        return [f"env_id: environment {config.env_id!r} has no example to evaluate"], None
    return [], Loaded(ids)


def problems_message(path: Path, problems: Sequence[str]) -> str:
    """A benchmark's problems as one error: the file, then each problem on a line of its own
    (as an invalid YAML's fields are listed)."""
    return "\n".join([f"{path}: this benchmark cannot run", *(f"  {p}" for p in problems)])


def env_args_source(path: Path, overrides: Sequence[tuple[str, Any]], message: str) -> str:
    """Where the ``env_args`` an environment rejected came from: the ``--override`` whose key
    the message names (``'pathh'`` or ``env_args.pathh`` for ``--override env_args.pathh=X``),
    else the YAML with the ``env_args`` overrides given, else the YAML alone."""
    given = [key for key, _ in overrides if key == "env_args" or key.startswith("env_args.")]
    named = [
        key
        for key in given
        if key != "env_args" and (key in message or f"'{key.rsplit('.', 1)[-1]}'" in message)
    ]
    if named:
        return f"--override {', '.join(named)}"
    if given:
        return f"{path} (env_args with --override {', '.join(given)})"
    return str(path)

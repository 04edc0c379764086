"""verifiers environments bundled with the plugin (no installation, no network).

What the plugin knows of each without loading it (:data:`BUNDLED_ENVIRONMENTS`): which
``env_args`` name a data file, so that a missing one is found when the benchmark is collected
(:func:`data_file_problems`), and how its rubric reads the answer from the model's final reply,
so that each record keeps the answer its reward was decided on (:func:`parsed_answer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval.envs.file_qa import data_file, final_answer


@dataclass(frozen=True)
class BundledEnvironment:
    """A bundled environment, as far as it is known before it loads."""

    #: The ``env_args`` naming a data file (relative to ``base_dir``, the benchmark YAML's
    #: directory), each required.
    data_file_args: tuple[str, ...]
    #: The answer the rubric compares with the example's ``answer``, from the final reply.
    parse_answer: Callable[[str], str]


BUNDLED_ENVIRONMENTS: dict[str, BundledEnvironment] = {
    "file-qa": BundledEnvironment(("path",), final_answer),
    "lookup-qa": BundledEnvironment(("path",), final_answer),
}


def data_file_problems(env_id: str, env_args: Mapping[str, Any], base_dir: Path) -> list[str]:
    """Why a bundled environment's data files cannot be read, one line per ``env_args`` key
    (``env_args.path: ...``); empty for another environment, whose files are its own."""
    bundled = BUNDLED_ENVIRONMENTS.get(env_id)
    if bundled is None:
        return []
    problems = []
    for arg in bundled.data_file_args:
        value = env_args.get(arg)
        if not isinstance(value, str) or not value:
            problems.append(
                f"env_args.{arg}: {env_id} needs its JSONL data file, e.g. env_args: {{{arg}: "
                "data/questions.jsonl}} (relative to the benchmark YAML's directory)"
            )
            continue
        given_base = env_args.get("base_dir")
        path = data_file(value, given_base if isinstance(given_base, str) else str(base_dir))
        if not path.is_file():
            what = "is a directory, not a file" if path.is_dir() else "does not exist"
            problems.append(
                f"env_args.{arg}: data file {path} {what} (a relative path is relative to the "
                "benchmark YAML's directory)"
            )
    return problems


def parsed_answer(env_id: str, final_reply: str) -> str | None:
    """The answer a bundled environment's rubric reads from ``final_reply``; None for another
    environment."""
    bundled = BUNDLED_ENVIRONMENTS.get(env_id)
    return bundled.parse_answer(final_reply) if bundled is not None else None

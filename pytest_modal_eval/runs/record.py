"""One rollout as ``results.jsonl`` (and the checkpoint) hold it: the file's schema, typed.

:class:`RolloutRecord` is the schema: every line of ``results.jsonl`` is one, plus one top-level
key per reward metric of the environment (each metric is also in ``metrics``). The fields'
descriptions are the ``Annotated`` strings below; the docs' outputs page is generated from them.
:func:`rollout_record` builds a record from verifiers' output and :func:`read_results` reads a
run's file back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict, get_type_hints


class RolloutRecord(TypedDict):
    """One line of ``results.jsonl``."""

    example_id: Annotated[int, "The example's id in the environment's dataset."]
    rollout: Annotated[
        int,
        "Which rollout of the example (0 .. eval.rollouts - 1); its seed is sampling.seed + it.",
    ]
    prompt: Annotated[Any, "The prompt as sent: a list of chat messages (or a string)."]
    completion: Annotated[Any, "The model's answer: a list of chat messages (or a string)."]
    task: Annotated[str, "The environment's task name."]
    answer: Annotated[Any, "The reference answer from the dataset, when it has one."]
    reward: Annotated[float, "The rollout's reward (0 for an errored rollout)."]
    generation_ms: Annotated[
        float,
        "Time spent generating, in ms (waiting for a request slot excluded).",
    ]
    slot_wait_ms: Annotated[
        float,
        "Time the rollout's requests waited for a free request slot (eval.prefetch), in ms.",
    ]
    scoring_ms: Annotated[float, "Time the environment's rubric took to score, in ms."]
    total_ms: Annotated[float, "The rollout's total time, in ms."]
    info: Annotated[
        dict[str, Any], "The example's extra fields (file-qa: the JSONL line's other keys)."
    ]
    error: Annotated[
        Any,
        "null, or the error that ended the rollout (an infrastructure failure, not a miss).",
    ]
    is_truncated: Annotated[bool, "Whether the completion hit max_tokens."]
    stop_condition: Annotated[str | None, "Why the rollout stopped, as verifiers reports it."]
    token_usage: Annotated[Any, "Token counts the server reported, when it did."]
    metrics: Annotated[
        dict[str, float],
        "Each reward metric of the rubric; each is also a top-level key.",
    ]


def field_docs() -> dict[str, tuple[str, str]]:
    """Field name -> (type, description), in file order: what the docs' schema table shows."""
    hints = get_type_hints(RolloutRecord, include_extras=True)
    docs: dict[str, tuple[str, str]] = {}
    for name, hint in hints.items():
        base, description = hint.__origin__, hint.__metadata__[0]
        docs[name] = (getattr(base, "__name__", str(base)).replace("typing.", ""), description)
    return docs


def rollout_record(
    output: dict[str, Any], rollout: int, task_default: str, *, slot_wait_s: float | None = None
) -> dict[str, Any]:
    """One rollout of verifiers' output as a :class:`RolloutRecord` (plus its metric keys).

    ``slot_wait_s`` is how long the rollout's requests waited for a free request slot
    (``eval.prefetch``): harness time, taken out of ``generation_ms``.
    """
    timing = output.get("timing") or {}
    wait_ms = round(float(slot_wait_s or 0.0) * 1000, 3)

    def ms(span: str) -> float:
        part = timing.get(span) or {}
        return round(float(part.get("duration") or 0.0) * 1000, 3)

    metrics = dict(output.get("metrics") or {})
    record: RolloutRecord = {
        "example_id": output["example_id"],
        "rollout": rollout,
        "prompt": output.get("prompt"),
        "completion": output.get("completion"),
        "task": output.get("task") or task_default,
        "answer": output.get("answer"),
        "reward": float(output.get("reward") or 0.0),
        "generation_ms": round(max(0.0, ms("generation") - wait_ms), 3),
        "slot_wait_ms": wait_ms,
        "scoring_ms": ms("scoring"),
        "total_ms": round(float(timing.get("total") or 0.0) * 1000, 3),
        "info": output.get("info") or {},
        "error": output.get("error"),
        "is_truncated": bool(output.get("is_truncated")),
        "stop_condition": output.get("stop_condition"),
        "token_usage": output.get("token_usage"),
        "metrics": metrics,
    }
    flat: dict[str, Any] = dict(record)
    for name, value in metrics.items():
        flat.setdefault(name, value)
    # Metric keys sit between the fixed fields and "metrics", as the file has always had them.
    flat["metrics"] = flat.pop("metrics")
    return flat


def read_results(path: Path) -> Iterator[RolloutRecord]:
    """The records of a ``results.jsonl``, in file order (one line at a time: flat in memory)."""
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)

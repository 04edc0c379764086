"""One rollout as ``results.jsonl`` (and the checkpoint) hold it: the file's schema, typed.

:class:`RolloutRecord` is the schema: every line of ``results.jsonl`` is one, plus one top-level
key per reward metric of the environment (each metric is also in ``metrics``). The fields'
descriptions are the ``Annotated`` strings below; the docs' outputs page is generated from them.
:func:`rollout_record` builds a record from verifiers' output;
:mod:`~pytest_modal_eval.runs.reader` reads a run's files back, checked against this schema.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypedDict, get_type_hints

from pytest_modal_eval.envs import parsed_answer
from pytest_modal_eval.runs.messages import final_reply


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
    parsed_answer: Annotated[
        str | None,
        "The answer the environment's parser read from the completion, which its rubric "
        "compares with answer: the bundled environments' final answer (the last \\boxed{}, "
        "else the last number, else the last line), a verifiers 0.3 environment's own parser's "
        "(Parser.parse_answer); null when the environment has no parser of its own, or the "
        "rollout errored.",
    ]
    reward: Annotated[
        float,
        "The rollout's reward (0 for an errored rollout; one that is not a finite number, such "
        "as NaN, makes the rollout errored).",
    ]
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
    agent: Annotated[
        str | None,
        "The seat of a verifiers 0.4 environment whose trace this is: with several seats (a "
        "two-player game) each rollout has one record per seat; with one, its name (agent); "
        "null for the classic API and the bundled tasksets.",
    ]
    seats: Annotated[
        dict[str, Any],
        "The other seats' results in the same episode (each also has a record of its own): "
        "seat -> reward, metrics, stop_condition, error (empty with one seat); a seat played "
        "several times in the episode has its means there and each play under attempts.",
    ]
    attempts: Annotated[
        list[dict[str, Any]],
        "When the episode played this seat several times (best-of-n's attempts, a solver fanned "
        "out): each play's reward, metrics, stop_condition and error, in the order the episode "
        "recorded them; reward and metrics are their means, prompt and completion the last "
        "play's (empty when the seat played once).",
    ]
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
    output: dict[str, Any], rollout: int, env_id: str, *, slot_wait_s: float | None = None
) -> dict[str, Any]:
    """One rollout of verifiers' output as a :class:`RolloutRecord` (plus its metric keys).

    ``env_id`` is the benchmark's environment: the record's task when verifiers names none,
    and the parser of a bundled environment's answer. ``slot_wait_s`` is how long the
    rollout's requests waited for a free request slot (``eval.prefetch``): harness time, taken
    out of ``generation_ms``.
    """
    timing = output.get("timing") or {}
    wait_ms = round(float(slot_wait_s or 0.0) * 1000, 3)

    def ms(span: str) -> float:
        part = timing.get(span) or {}
        return round(float(part.get("duration") or 0.0) * 1000, 3)

    metrics = dict(output.get("metrics") or {})
    reward, problem = _score("reward", output.get("reward") or 0.0)
    for name, value in metrics.items():
        metrics[name], wrong = _score(f"metric {name!r}", value)
        problem = problem or wrong
    if problem is not None:
        reward = 0.0
    record: RolloutRecord = {
        "example_id": output["example_id"],
        "rollout": rollout,
        "prompt": output.get("prompt"),
        "completion": output.get("completion"),
        "task": output.get("task") or env_id,
        "answer": output.get("answer"),
        "parsed_answer": _parsed_answer(output, env_id),
        "reward": reward,
        "generation_ms": round(max(0.0, ms("generation") - wait_ms), 3),
        "slot_wait_ms": wait_ms,
        "scoring_ms": ms("scoring"),
        "total_ms": round(float(timing.get("total") or 0.0) * 1000, 3),
        "info": output.get("info") or {},
        "error": output.get("error") or problem,
        "is_truncated": bool(output.get("is_truncated")),
        "stop_condition": output.get("stop_condition"),
        "token_usage": output.get("token_usage"),
        "agent": output.get("agent"),
        "seats": output.get("seats") or {},
        "attempts": output.get("attempts") or [],
        "metrics": metrics,
    }
    flat: dict[str, Any] = dict(record)
    for name, value in metrics.items():
        flat.setdefault(name, value)
    # Metric keys sit between the fixed fields and "metrics", as the file has always had them.
    flat["metrics"] = flat.pop("metrics")
    return flat


def _parsed_answer(output: dict[str, Any], env_id: str) -> str | None:
    """What the environment's parser read: the adapter's (``parsed_answer`` in ``output``,
    from a verifiers 0.3 environment's own parser), else a bundled environment's."""
    if output.get("error"):
        return None
    if "parsed_answer" in output:
        given = output["parsed_answer"]
        return None if given is None else str(given)
    return parsed_answer(env_id, final_reply(output.get("completion")))


def _score(name: str, value: Any) -> tuple[float, dict[str, str] | None]:
    """A reward or metric as a finite float, else 0.0 and the error that makes the rollout
    errored (so it is retried, never counted, and the files stay strict JSON)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if math.isfinite(number):
        return number, None
    return 0.0, {
        "error": "InvalidReward",
        "message": f"the environment's rubric returned {name} {value!r}, not a finite number",
    }

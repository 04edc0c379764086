"""The bundled ``file-qa`` environment run by the plugin itself, with no framework imported.

A file-qa rollout is one chat request, scored by the plugin's own rule
(:func:`~pytest_modal_eval.envs.file_qa.final_answer`,
:func:`~pytest_modal_eval.envs.file_qa.answers_match`). Run through verifiers it costs the
framework's import before the first request: ~2 s for 0.3 (datasets, pyarrow, openai,
anthropic) and ~8 s for 0.4's ``verifiers.v1`` on a 2-core machine, for one request per
example. Here the rows are read from the JSONL file, each rollout's request is sent by
:class:`~pytest_modal_eval.client.direct_client.DirectOpenAI` with no SDK client behind it
(the same in-flight cap, retries, journal, seeds and proxy settings), and the rollout's output
is built in the shape the installed verifiers gives for it (its API's: :class:`Shape`), so that
``results.jsonl`` holds the same records whichever runs it.
``tests/test_verifiers_native_parity.py`` runs this and real verifiers (0.3 and 0.4) against one
server with awkward replies and compares the requests and the records.

What differs from verifiers' rows: ``info`` is each line's own other fields (verifiers 0.3's
Arrow dataset gives every row every field another line has, as null), as verifiers 0.4 has it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from pytest_modal_eval.client.answer_journal import AnswerJournal, current_example
from pytest_modal_eval.client.direct_client import open_plain_client, slot_waits
from pytest_modal_eval.client.installed_envs import FILE_QA_ARGS, NATIVE, installed_api
from pytest_modal_eval.client.observe import current_rollout
from pytest_modal_eval.client.rollout_seeds import ROLLOUT_COLUMN, SLOT_WAIT_COLUMN, seeded
from pytest_modal_eval.client.workers import Intake, run_workers
from pytest_modal_eval.envs.file_qa import (
    FileQAError,
    answers_match,
    data_file,
    final_answer,
    read_records,
)
from pytest_modal_eval.exceptions import EnvironmentLoadError, RunAborted
from pytest_modal_eval.serving.endpoint import Endpoint

ExampleCallback = Callable[[int, list[dict[str, Any]]], None]

#: Failed rollouts are logged here, in verifiers' words; the run's log receives them
#: (runs/rollout_batches.py).
log = logging.getLogger("pytest_modal_eval.rollouts")

Shape = Literal["classic", "v1"]


@dataclass
class NativeEnvironment:
    """A bundled environment loaded here: its id and its rows (``rows[i]`` is example ``i``)."""

    env_id: str
    rows: list[dict[str, Any]]


def missing_environment(env_id: str) -> str | None:
    """Nothing is missing: the environments run here ship with the plugin."""
    return None


def import_framework() -> None:
    """Nothing to import: the plugin plays these environments without a framework."""


def load_environment(
    env_id: str,
    env_args: dict[str, Any],
    base_dir: Path,
    *,
    agent: dict[str, Any] | None = None,
    num_examples: int | None = None,
    max_turns: int | None = None,
) -> NativeEnvironment:
    """file-qa's rows from its data file, checked as verifiers' loading checks them: each
    problem is one :class:`EnvironmentLoadError` naming the file, line or field and the fix."""
    if env_id not in NATIVE:
        raise EnvironmentLoadError(f"environment {env_id!r} is not one the plugin runs itself")
    if agent and any(agent.get(key) for key in ("harness", "runtime", "seat", "env")):
        raise EnvironmentLoadError(
            f"environment {env_id!r} is bundled with pytest-modal-eval and played by the "
            "plugin itself; remove the benchmark's agent section"
        )
    unknown = sorted(set(env_args) - set(FILE_QA_ARGS))
    if unknown:
        raise EnvironmentLoadError(
            f"environment {env_id!r} rejected env_args: unknown "
            f"{' and '.join(repr(key) for key in unknown)}; the env_args it takes: "
            f"{', '.join(FILE_QA_ARGS)}"
        )
    path, system_prompt = env_args.get("path"), env_args.get("system_prompt")
    if not isinstance(path, str) or not path:
        raise EnvironmentLoadError(
            f"environment {env_id!r} rejected env_args: 'path' (the JSONL data file, relative "
            "to the benchmark YAML) is required"
        )
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise EnvironmentLoadError(
            f"environment {env_id!r} rejected env_args: 'system_prompt' must be text"
        )
    rows: list[dict[str, Any]] = []
    try:
        for question, answer, extra in read_records(data_file(path, str(base_dir))):
            prompt = [{"role": "system", "content": system_prompt}] if system_prompt else []
            prompt.append({"role": "user", "content": question})
            rows.append(
                {
                    "example_id": len(rows),
                    "prompt": prompt,
                    "answer": answer,
                    "info": extra or None,
                }
            )
    except FileQAError as exc:
        raise EnvironmentLoadError(str(exc)) from None
    return NativeEnvironment(env_id, rows)


def dataset_rows(env: NativeEnvironment, num_examples: int | None) -> NativeRows:
    rows = env.rows if num_examples is None else env.rows[:num_examples]
    return NativeRows(rows)


class NativeRows(Sequence[dict[str, Any]]):
    """The rows (``example_id``, ``prompt``, ``answer``, ``info``), in example order."""

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> NativeRows: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | NativeRows:
        if isinstance(index, slice):
            return NativeRows(self._rows[index])
        return self._rows[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._rows)

    def example_ids(self) -> array[int]:
        return array("q", (row["example_id"] for row in self._rows))


def secret_variables(env: NativeEnvironment) -> list[str]:
    """file-qa calls no judge: it names no key variables."""
    return []


def check_judge_endpoints(env: NativeEnvironment, timeout: float) -> None:
    """Nothing to check: file-qa calls no judge."""


def installed_shape() -> Shape:
    """The shape of the installed verifiers' rollout outputs (its API's)."""
    return installed_api()


async def run_examples(
    env: NativeEnvironment,
    rows: Iterable[dict[str, Any]],
    *,
    endpoint: Endpoint,
    sampling_args: dict[str, Any],
    rollouts: int,
    max_concurrent_requests: int,
    request_timeout: float,
    max_retries: int,
    on_example: ExampleCallback,
    should_stop: Callable[[], str | None] = lambda: None,
    extra_headers: dict[str, str] | None = None,
    prefetch: int = 0,
    journal: AnswerJournal | None = None,
    rollout_indexes: Callable[[int], Sequence[int]] | None = None,
    max_turns: int | None = None,
    intake: Intake | None = None,
    shape: Shape | None = None,
) -> None:
    """See :meth:`pytest_modal_eval.client.verifiers_adapter.VerifiersAPI.run_examples`;
    ``shape`` is whose rollout outputs to give (default: the installed verifiers')."""
    shape = shape or installed_shape()
    api_key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    client = open_plain_client(
        endpoint.base_url,
        api_key=api_key,
        headers={**dict(endpoint.headers), **(extra_headers or {})},
        request_timeout=request_timeout,
        max_retries=max_retries,
        max_connections=max(64, max_concurrent_requests * 2),
        max_in_flight=max_concurrent_requests,
        journal=journal,
        intake=intake,
    )
    slots = max(1, math.ceil(max_concurrent_requests / rollouts)) * (1 + prefetch)
    pending = iter(rows)

    async def rollout(row: dict[str, Any], index: int) -> dict[str, Any]:
        waits: list[float] = []
        token = slot_waits.set(waits)
        # Which rollout the request is for, for an observer of the run (traces).
        rollout_token = current_rollout.set((int(row["example_id"]), index))
        started = time.perf_counter()
        try:
            body = request_body(shape, endpoint.model, row["prompt"], seeded(sampling_args, index))
            try:
                answer = await client.post_json("/chat/completions", body)
            except Exception as exc:
                if not _request_failed(exc):
                    raise
                return failed_output(shape, row, index, sum(waits), exc, started)
            return answered_output(shape, row, index, sum(waits), answer.content, started)
        finally:
            current_rollout.reset(rollout_token)
            slot_waits.reset(token)

    async def worker() -> None:
        for row in pending:
            example_id = int(row["example_id"])
            if intake is not None and not intake.take(example_id):
                return
            current_example.set(example_id)  # the journal's key, for this task's requests
            indexes = rollout_indexes(example_id) if rollout_indexes else range(rollouts)
            outputs = await asyncio.gather(*(rollout(row, i) for i in list(indexes)[:rollouts]))
            on_example(example_id, list(outputs))
            if intake is not None:
                intake.finished(example_id)
            reason = should_stop()
            if reason is not None:
                raise RunAborted(reason)

    try:
        await run_workers(worker, slots)
    finally:
        await client.close()


def request_body(
    shape: Shape, model: str, prompt: list[dict[str, Any]], sampling: Any
) -> dict[str, Any]:
    """The chat request verifiers sends for a single-turn rollout, keys in its order: 0.3 puts
    ``max_tokens`` last as ``max_completion_tokens``; 0.4 sends its sampling config's fields."""
    args = {key: value for key, value in dict(sampling).items() if value is not None}
    if shape == "classic":
        if "max_tokens" in args:
            args["max_completion_tokens"] = args.pop("max_tokens")
        return {"model": model, "messages": prompt, **args}
    ordered = {key: args[key] for key in V1_SAMPLING_ORDER if key in args}
    return {"model": model, "messages": prompt, **ordered, **args}


#: The order verifiers 0.4's sampling config sends its fields in.
V1_SAMPLING_ORDER = ("temperature", "top_p", "max_tokens", "seed")


def _common(row: dict[str, Any], index: int, waited: float, started: float) -> dict[str, Any]:
    return {
        "example_id": row["example_id"],
        "prompt": row["prompt"],
        "answer": row["answer"],
        "info": row["info"],
        ROLLOUT_COLUMN: index,
        SLOT_WAIT_COLUMN: waited,
        "timing": {"total": time.perf_counter() - started},
    }


def answered_output(
    shape: Shape, row: dict[str, Any], index: int, waited: float, content: bytes, started: float
) -> dict[str, Any]:
    """A rollout whose request was answered: the reply scored, in ``shape``'s form."""
    generated = time.perf_counter()
    output = _common(row, index, waited, started)
    try:
        answer = json.loads(content)
        choice = answer["choices"][0]
        message = dict(choice["message"])
        usage = answer.get("usage") or {}
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return _errored(shape, output, _malformed(exc), generated, started)
    text = message.get("content")
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if shape == "classic" and not text and not reasoning and not message.get("tool_calls"):
        error = {
            "error": "EmptyModelResponseError",
            "message": "Model returned no content and did not call any tools",
            "error_chain_repr": "EmptyModelResponseError('Model returned no content and did "
            "not call any tools')",
            "error_chain_str": "EmptyModelResponseError",
        }
        log.error("Aborted rollout due to %s", error["error_chain_repr"])
        return _errored(shape, output, error, generated, started)
    scoring = time.perf_counter()
    reward = 1.0 if answers_match(final_answer(text or ""), row["answer"]) else 0.0
    scored = time.perf_counter()
    completion: dict[str, Any] = {"role": "assistant"}
    if shape == "classic" or text:
        completion["content"] = text or ""
    if reasoning:
        completion["reasoning_content"] = reasoning
    if shape == "classic":
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        output.update(
            metrics={"correct": reward, "num_turns": 1.0},
            stop_condition="max_turns_reached",
            token_usage={
                "input_tokens": float(prompt_tokens or 0),
                "output_tokens": float(completion_tokens or 0),
                "final_output_tokens": completion_tokens or 0,
                "final_input_tokens": prompt_tokens or 0,
            },
        )
    else:
        output.update(
            metrics={"correct": reward},
            stop_condition="agent_completed",
            token_usage={
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
                "cached_input_tokens": None,
                "reasoning_tokens": None,
                "cost": None,
            },
        )
    output.update(
        completion=[completion],
        reward=reward,
        error=None,
        is_truncated=choice.get("finish_reason") == "length",
    )
    output["timing"].update(
        generation={"duration": generated - started},
        scoring={"duration": scored - scoring},
        total=scored - started,
    )
    return output


def failed_output(
    shape: Shape, row: dict[str, Any], index: int, waited: float, exc: Exception, started: float
) -> dict[str, Any]:
    """A rollout whose request failed (after its retries), in ``shape``'s form: an errored
    rollout, as verifiers records one, not an exception."""
    output = _common(row, index, waited, started)
    now = time.perf_counter()
    if shape == "classic":
        chain: list[BaseException] = [exc]
        while (cause := chain[-1].__cause__) is not None and cause not in chain:
            chain.append(cause)
        error = {
            "error": "ModelError",
            "message": "ModelError",
            "error_chain_repr": " -> ".join(["ModelError()", *map(repr, chain)]),
            "error_chain_str": " -> ".join(["ModelError", *(type(e).__name__ for e in chain)]),
        }
        log.error("Aborted rollout due to %s", error["error_chain_repr"])
    else:
        error = {"error": "ProviderError", "message": str(exc) or _provider_message(exc)}
        log.warning("model call failed: %s", error["message"])
    return _errored(shape, output, error, now, started)


def _request_failed(exc: Exception) -> bool:
    """Whether ``exc`` is how the client says a request failed (openai's errors, imported by
    the client when it raised one), not a fault of the code."""
    openai = sys.modules.get("openai")
    return openai is not None and isinstance(exc, openai.APIError)


def _provider_message(exc: Exception) -> str:
    name = type(exc).__name__
    return "request timed out" if "Timeout" in name else "connection error"


def _malformed(exc: Exception) -> dict[str, Any]:
    return {
        "error": "ProviderError",
        "message": f"malformed upstream response: {type(exc).__name__}: {exc}",
    }


def _errored(
    shape: Shape, output: dict[str, Any], error: dict[str, Any], ended: float, started: float
) -> dict[str, Any]:
    if shape == "classic":
        output.update(
            completion=[],
            reward=0.0,
            metrics={"correct": 0.0, "num_turns": 0.0},
            stop_condition="has_error",
        )
    else:
        output.update(
            completion=[], reward=0, metrics={}, stop_condition="provider_error", token_usage=None
        )
    output.update(error=error, is_truncated=False)
    output["timing"].update(
        generation={"duration": ended - started}, scoring={"duration": 0.0}, total=ended - started
    )
    return output

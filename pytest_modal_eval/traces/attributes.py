"""Span attributes: the OpenTelemetry GenAI semantic conventions for model requests and tool
calls, the plugin's own (``modal_eval.*``) for benchmarks, examples and rollouts.

Every string that goes on a span passes the session's redactor (:func:`clean`). GenAI names
follow the conventions as they stand (``gen_ai.provider.name``, not the deprecated
``gen_ai.system``); token usage goes on the model request's span only, since trace UIs
(Langfuse, Phoenix) add up usage over nested spans. Prompts, completions, tool arguments and
results are attributes only when content capture is on (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from pytest_modal_eval.redact import Redactor

Attributes = dict[str, Any]

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
AGENT_NAME = "gen_ai.agent.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
#: The evaluation event of the GenAI conventions (a score on the span it judges).
EVALUATION_EVENT = "gen_ai.evaluation.result"

EXAMPLE_ID = "modal_eval.example.id"
ROLLOUT_INDEX = "modal_eval.rollout.index"
#: An example (and its rollouts) dropped before it sent anything: the gate was decided.
DROPPED = "modal_eval.dropped"
#: A request not sent, or given up, because its example was dropped or the run cancelled.
CANCELLED = "modal_eval.request.cancelled"
REWARD = "modal_eval.reward"
METRIC_PREFIX = "modal_eval.metric."

#: The request body's sampling fields and the attributes they become.
SAMPLING = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "max_output_tokens": "gen_ai.request.max_tokens",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
}


def clean(redactor: Redactor, value: Any) -> Any:
    """An attribute value as OpenTelemetry takes it (str, bool, int, float, or a list of one
    of them), strings redacted; None when there is nothing to set."""
    if value is None:
        return None
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return redactor.text(value)
    if isinstance(value, Sequence):
        items = [clean(redactor, v) for v in value]
        items = [v for v in items if v is not None]
        kinds = {type(v) for v in items}
        return items if len(kinds) <= 1 else [str(v) for v in items]
    return redactor.text(json.dumps(value, default=str, ensure_ascii=False))


def cleaned(redactor: Redactor, attributes: Mapping[str, Any]) -> Attributes:
    """``attributes`` as :func:`clean` makes each value, those without one left out."""
    found: Attributes = {}
    text = redactor.text
    for key, value in attributes.items():
        kind = type(value)
        if kind is str:
            found[key] = text(value)
        elif kind is int or kind is bool:
            found[key] = value
        else:
            value = clean(redactor, value)
            if value is not None:
                found[key] = value
    return found


@lru_cache(maxsize=64)
def server(url: str) -> tuple[str, int | None]:
    """``server.address`` and ``server.port`` of a request URL (the scheme's port when the
    URL names none)."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.hostname or "", port


def operation(url: str) -> tuple[str, str]:
    """``gen_ai.operation.name`` and ``gen_ai.provider.name`` of a request, from its path:
    the API the request speaks (``openai`` for the OpenAI API, whichever server answers it,
    as the OpenAI instrumentation of OpenTelemetry names it)."""
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/messages") and not path.endswith("/chat/messages"):
        return "chat", "anthropic"
    if path.endswith("/completions") and not path.endswith("/chat/completions"):
        return "text_completion", "openai"
    if path.endswith("/embeddings"):
        return "embeddings", "openai"
    return "chat", "openai"


def request_attributes(url: str, body: Any) -> tuple[str, Attributes]:
    """The span name (``{operation} {model}``) and attributes of a request about to be
    sent."""
    op, provider = operation(url)
    address, port = server(url)
    attributes: Attributes = {OPERATION: op, PROVIDER: provider, SERVER_ADDRESS: address}
    if port is not None:
        attributes[SERVER_PORT] = port
    model = ""
    if isinstance(body, Mapping):
        model = str(body.get("model") or "")
        if model:
            attributes[REQUEST_MODEL] = model
        for name, attribute in SAMPLING.items():
            value = body.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[attribute] = value
        stop = body.get("stop")
        if stop:
            attributes["gen_ai.request.stop_sequences"] = [stop] if isinstance(stop, str) else stop
        n = body.get("n")
        if isinstance(n, int) and n != 1:
            attributes["gen_ai.request.choice.count"] = n
    return f"{op} {model}".strip(), attributes


def response_attributes(content: bytes) -> tuple[Attributes, Any]:
    """Attributes of an answer's JSON body (chat completions, completions, responses,
    Anthropic messages), and the body parsed (None when it is not JSON)."""
    try:
        answer = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return {}, None
    if not isinstance(answer, Mapping):
        return {}, None
    attributes: Attributes = {}
    if isinstance(answer.get("id"), str):
        attributes[RESPONSE_ID] = answer["id"]
    if isinstance(answer.get("model"), str):
        attributes[RESPONSE_MODEL] = answer["model"]
    reasons = [
        str(choice.get("finish_reason"))
        for choice in answer.get("choices") or ()
        if isinstance(choice, Mapping) and choice.get("finish_reason") is not None
    ]
    if not reasons and isinstance(answer.get("stop_reason"), str):
        reasons = [answer["stop_reason"]]
    if reasons:
        attributes[FINISH_REASONS] = reasons
    usage = answer.get("usage")
    if isinstance(usage, Mapping):
        for attribute, names in (
            (INPUT_TOKENS, ("prompt_tokens", "input_tokens")),
            (OUTPUT_TOKENS, ("completion_tokens", "output_tokens")),
        ):
            value = next((usage[n] for n in names if isinstance(usage.get(n), int)), None)
            if value is not None:
                attributes[attribute] = value
    return attributes, answer


def input_messages(body: Any) -> str | None:
    """``gen_ai.input.messages``: the request's chat messages in the conventions' parts
    form, as JSON."""
    if not isinstance(body, Mapping):
        return None
    messages = body.get("messages")
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        prompt = body.get("prompt") or body.get("input")
        if prompt is None:
            return None
        return _json([{"role": "user", "parts": [{"type": "text", "content": prompt}]}])
    return _json([_message(m) for m in messages if isinstance(m, Mapping)])


def output_messages(answer: Any) -> str | None:
    """``gen_ai.output.messages``: each choice's message in the parts form, as JSON."""
    if not isinstance(answer, Mapping):
        return None
    found = []
    for choice in answer.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        message = choice.get("message")
        if isinstance(message, Mapping):
            shaped = _message(message)
        else:
            shaped = {"role": "assistant", "parts": [_text(choice.get("text"))]}
        shaped["finish_reason"] = choice.get("finish_reason")
        found.append(shaped)
    return _json(found) if found else None


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = str(message.get("role") or "user")
    parts: list[dict[str, Any]] = []
    if role == "tool":
        parts.append(
            {
                "type": "tool_call_response",
                "id": message.get("tool_call_id"),
                "response": message.get("content"),
            }
        )
        return {"role": role, "parts": parts}
    content = message.get("content")
    if isinstance(content, str):
        parts.append(_text(content))
    elif isinstance(content, Sequence):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(_text(part.get("text")))
            elif isinstance(part, Mapping):
                parts.append({"type": str(part.get("type") or "unknown")})
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
    return {"role": role, "parts": parts}


def _text(content: Any) -> dict[str, Any]:
    return {"type": "text", "content": "" if content is None else str(content)}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def record_attributes(records: Sequence[Mapping[str, Any]]) -> tuple[Attributes, str | None]:
    """A rollout span's attributes from its records (one, or one per seat: the first is the
    rollout's, the others are under ``modal_eval.seat.<name>.``), and its error type, if it
    errored."""
    attributes: Attributes = {}
    error: str | None = None
    for i, record in enumerate(records):
        prefix = "modal_eval." if i == 0 else f"modal_eval.seat.{record.get('agent')}."
        attributes[prefix + "reward"] = record.get("reward")
        for name, value in (record.get("metrics") or {}).items():
            attributes[f"{prefix}metric.{name}"] = value
        attributes[prefix + "stop_condition"] = record.get("stop_condition")
        if record.get("is_truncated"):
            attributes[prefix + "truncated"] = True
        if record.get("agent") is not None:
            attributes[prefix + "seat"] = record.get("agent")
        failure = record.get("error")
        if failure and error is None:
            error = str(failure.get("error") if isinstance(failure, Mapping) else failure)
            message = failure.get("message") if isinstance(failure, Mapping) else None
            attributes["modal_eval.error.message"] = message or error
    return attributes, error

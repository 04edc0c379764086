"""The spans of a benchmark's run: one per example, per rollout, per model request and per
tool call, made as the evaluation tells its observer (the seam in
:mod:`pytest_modal_eval.client.observe`).

An example's span and its rollouts' spans open when the example is handed to the client and
close when its records are kept, with the rewards on them; a request's span is a child of its
rollout's (of the benchmark's when the request belongs to no known rollout).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.traces import attributes as attrs


def fail(span: Span, redactor: Redactor, error_type: str, message: str | None) -> None:
    """An error on ``span``: its status, ``error.type`` and an ``exception`` event, the
    message redacted (no traceback: it would carry local paths and values)."""
    text, kind = redactor.text(message or error_type), redactor.text(error_type)
    span.set_status(Status(StatusCode.ERROR, text[:500]))
    span.set_attribute(attrs.ERROR_TYPE, kind)
    span.add_event("exception", {"exception.type": kind, "exception.message": text})


class RequestSpan:
    """A model request's span (a :class:`~pytest_modal_eval.client.observe.RequestWatch`)."""

    __slots__ = ("capture", "redactor", "span")

    def __init__(self, span: Span, redactor: Redactor, capture: bool) -> None:
        self.span = span
        self.redactor = redactor
        self.capture = capture

    def answered(self, status: int, content: bytes, replayed: bool = False) -> None:
        span = self.span
        found, answer = attrs.response_attributes(content)
        if replayed:
            found["modal_eval.request.replayed"] = True
        if self.capture:
            found[attrs.OUTPUT_MESSAGES] = attrs.output_messages(answer)
        span.set_attributes(attrs.cleaned(self.redactor, found))
        span.end()

    def failed(self, error: BaseException) -> None:
        if isinstance(error, asyncio.CancelledError):  # not sent, or given up: not an error
            self.span.set_attribute(attrs.CANCELLED, True)
            self.span.end()
            return
        status = getattr(error, "status_code", None)
        error_type = str(status) if isinstance(status, int) else type(error).__name__
        if isinstance(status, int):
            self.span.set_attribute("http.response.status_code", status)
        fail(self.span, self.redactor, error_type, str(error))
        self.span.end()


class ToolSpan:
    """A tool call's span (a :class:`~pytest_modal_eval.client.observe.ToolWatch`)."""

    __slots__ = ("capture", "redactor", "span")

    def __init__(self, span: Span, redactor: Redactor, capture: bool) -> None:
        self.span = span
        self.redactor = redactor
        self.capture = capture

    def returned(self, result: Any) -> None:
        if self.capture:
            text = result if isinstance(result, str) else json.dumps(result, default=str)
            self.span.set_attribute(attrs.TOOL_RESULT, self.redactor.text(text))
        self.span.end()

    def failed(self, error: BaseException) -> None:
        fail(self.span, self.redactor, type(error).__name__, str(error))
        self.span.end()


class RunSpans:
    """The example, rollout, request and tool spans of the benchmarks run in this process
    (an :class:`~pytest_modal_eval.client.observe.EvalObserver`). ``parent`` gives the
    context examples go under: the running benchmark's."""

    def __init__(
        self,
        tracer: Tracer,
        redactor: Redactor,
        capture: bool,
        parent: Callable[[], Context | None],
    ) -> None:
        self.tracer = tracer
        self.redactor = redactor
        self.capture = capture
        self.parent = parent
        self.examples: dict[int, Span] = {}
        self.rollouts: dict[tuple[int, int], tuple[Span, Context]] = {}

    def example_started(self, example_id: int, rollouts: Sequence[int]) -> None:
        if example_id in self.examples:  # started again before it finished: a new attempt
            self._end_example(example_id, "the example was started again")
        start = time.time_ns()
        example = self.tracer.start_span(
            f"example {example_id}",
            context=self.parent(),
            attributes={attrs.EXAMPLE_ID: example_id, "modal_eval.rollouts": len(rollouts)},
            start_time=start,
        )
        self.examples[example_id] = example
        under = trace.set_span_in_context(example)
        for index in rollouts:
            span = self.tracer.start_span(
                f"rollout {example_id}.{index}",
                context=under,
                attributes={
                    attrs.EXAMPLE_ID: example_id,
                    attrs.ROLLOUT_INDEX: index,
                    attrs.OPERATION: "invoke_agent",
                },
                start_time=start,
            )
            self.rollouts[(example_id, index)] = (span, trace.set_span_in_context(span))

    def example_finished(self, example_id: int, records: Sequence[Mapping[str, Any]]) -> None:
        by_rollout: dict[int, list[Mapping[str, Any]]] = {}
        for record in records:
            by_rollout.setdefault(int(record.get("rollout") or 0), []).append(record)
        errored = False
        rewards: list[float] = []
        for (owner, index), (span, _) in list(self.rollouts.items()):
            if owner != example_id:
                continue
            del self.rollouts[(owner, index)]
            found, error = attrs.record_attributes(by_rollout.get(index, []))
            span.set_attributes(attrs.cleaned(self.redactor, found))
            reward = found.get("modal_eval.reward")
            if isinstance(reward, int | float):
                span.add_event(
                    attrs.EVALUATION_EVENT,
                    {"gen_ai.evaluation.name": "reward", "gen_ai.evaluation.score.value": reward},
                )
                rewards.append(float(reward))
            if error is not None:
                errored = True
                fail(span, self.redactor, error, found.get("modal_eval.error.message"))
            elif index not in by_rollout:
                errored = True
                fail(span, self.redactor, "NotRecorded", "the rollout left no record")
            span.end()
        example = self.examples.pop(example_id, None)
        if example is None:
            return
        if errored:
            fail(example, self.redactor, "RolloutError", "a rollout of the example errored")
        elif rewards:
            example.set_attribute("modal_eval.example.reward", sum(rewards) / len(rewards))
        example.end()

    def model_request(self, url: str, body: Any, rollout: tuple[int, int] | None) -> RequestSpan:
        name, found = attrs.request_attributes(url, body)
        if self.capture:
            found[attrs.INPUT_MESSAGES] = attrs.input_messages(body)
        span = self.tracer.start_span(
            self.redactor.text(name),
            context=self._under(rollout),
            kind=SpanKind.CLIENT,
            attributes=attrs.cleaned(self.redactor, found),
        )
        return RequestSpan(span, self.redactor, self.capture)

    def tool_call(
        self, name: str, call_id: str, arguments: str, rollout: tuple[int, int] | None
    ) -> ToolSpan:
        found: dict[str, Any] = {
            attrs.OPERATION: "execute_tool",
            attrs.TOOL_NAME: name,
            attrs.TOOL_CALL_ID: call_id or None,
            attrs.TOOL_TYPE: "function",
        }
        if rollout is not None:
            found[attrs.EXAMPLE_ID], found[attrs.ROLLOUT_INDEX] = rollout
        if self.capture:
            found[attrs.TOOL_ARGUMENTS] = arguments
        span = self.tracer.start_span(
            self.redactor.text(f"execute_tool {name}"),
            context=self._under(rollout),
            kind=SpanKind.INTERNAL,
            attributes=attrs.cleaned(self.redactor, found),
        )
        return ToolSpan(span, self.redactor, self.capture)

    def _under(self, rollout: tuple[int, int] | None) -> Context | None:
        found = self.rollouts.get(rollout) if rollout is not None else None
        return found[1] if found is not None else self.parent()

    def example_dropped(self, example_id: int) -> None:
        """End a dropped example's spans, and its rollouts', as not evaluated (no error)."""
        for key in [key for key in self.rollouts if key[0] == example_id]:
            span = self.rollouts.pop(key)[0]
            span.set_attribute(attrs.DROPPED, True)
            span.end()
        if example_id in self.examples:
            example = self.examples.pop(example_id)
            example.set_attribute(attrs.DROPPED, True)
            example.end()

    def abandon(self, reason: str) -> None:
        """End the spans of examples that will not finish (the run stopped), as errors."""
        for example_id in list(self.examples):
            self._end_example(example_id, reason)

    def _end_example(self, example_id: int, reason: str) -> None:
        """End an unfinished example's span and its rollouts', as errors."""
        for key in [key for key in self.rollouts if key[0] == example_id]:
            span = self.rollouts.pop(key)[0]
            fail(span, self.redactor, "NotFinished", reason)
            span.end()
        span = self.examples.pop(example_id)
        fail(span, self.redactor, "NotFinished", reason)
        span.end()

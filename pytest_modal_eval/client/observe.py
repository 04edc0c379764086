"""What an evaluation tells an observer as it goes: examples starting and finishing, each
model request and each tool call, with the rollout it belongs to.

The seam between the evaluation (this layer and ``runs/``) and whoever watches it (traces,
in ``pytest_modal_eval.traces``, wired by the session): the lower layers know only the
protocols below, never who implements them. With no observer (the default), each place that
would tell one checks a ``None`` and goes on.

Who tells what:

- ``runs/`` tells :meth:`EvalObserver.example_started` as a row is handed to the client, and
  :meth:`EvalObserver.example_finished` with the example's records once they are kept;
- :class:`~pytest_modal_eval.client.direct_client.DirectOpenAI`, where every model request is
  sent, asks :meth:`EvalObserver.model_request` for a :class:`RequestWatch` per request;
- the v1 chat harness, where tools are called, asks :meth:`EvalObserver.tool_call`.

Which rollout a request or a tool call belongs to is :data:`current_rollout`, set where it is
known: the classic chat client once a rollout has taken its index, the v1 client from its
rollout's trace id, the v1 worker for the tasks of one rollout.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

#: (example id, rollout index) of the rollout the current task works for, None: unknown.
current_rollout: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "pytest_modal_eval_rollout", default=None
)

#: The observer of the run going on in this context (set by ``runs/`` around a run).
current_observer: contextvars.ContextVar[EvalObserver | None] = contextvars.ContextVar(
    "pytest_modal_eval_observer", default=None
)


class RequestWatch(Protocol):
    """One model request, from when it is sent until its answer or its error."""

    def answered(self, status: int, content: bytes, replayed: bool = False) -> None:
        """The answer (``replayed``: from the answer journal, not sent again)."""

    def failed(self, error: BaseException) -> None:
        """No answer: the error raised to the caller (after retries)."""


class ToolWatch(Protocol):
    """One tool call, from when it is made until its result."""

    def returned(self, result: Any) -> None:
        """The tool's result as the model will read it."""

    def failed(self, error: BaseException) -> None:
        """The call raised ``error``."""


class EvalObserver(Protocol):
    """What watches an evaluation (see the module docstring for who calls what)."""

    def example_started(self, example_id: int, rollouts: Sequence[int]) -> None:
        """An example's rollouts ``rollouts`` (indexes) are about to run."""

    def example_finished(self, example_id: int, records: Sequence[Mapping[str, Any]]) -> None:
        """An example's records (``runs.record.RolloutRecord`` as JSON, secrets removed) are
        kept: one per rollout (per seat)."""

    def example_dropped(self, example_id: int) -> None:
        """A started example was dropped before it sent anything (the run needed no more
        examples: its gate was decided); it stays unevaluated."""

    def model_request(self, url: str, body: Any, rollout: tuple[int, int] | None) -> RequestWatch:
        """A request to ``url`` with the JSON ``body`` is about to be sent."""

    def tool_call(
        self, name: str, call_id: str, arguments: str, rollout: tuple[int, int] | None
    ) -> ToolWatch:
        """A tool call is about to be made."""


@contextlib.contextmanager
def observing(observer: EvalObserver | None) -> Iterator[None]:
    """``observer`` is :data:`current_observer` inside (for the run's clients and harness)."""
    token = current_observer.set(observer)
    try:
        yield
    finally:
        current_observer.reset(token)

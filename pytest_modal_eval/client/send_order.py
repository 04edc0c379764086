"""Requests go out before answers are processed, so the server's next batch does not wait
for the client's scoring.

vLLM finishes the requests of one batch together, so their answers reach the client within a
few milliseconds of each other. Each answer frees a request slot, and the request waiting for
it (``eval.prefetch``) could go out at once; two things held it back, measured against vLLM
at 64 in flight (README, Performance):

- on Python 3.11, aiohttp writes a request's body from a task of its own, queued behind every
  task already ready: the other answers of the batch, each parsed, scored and recorded
  (~1.5 ms of CPU) before the request left;
- one turn of the event loop ran every answer that was ready, so answers that arrived during
  that turn were not even read (and their slots not freed) until all of them were processed.

:class:`SendsFirst` changes the order, not the work. An answer whose slot is freed is handed
back to its caller only once every request that has a slot has been written, and only one
answer is handed back per turn of the event loop, so sockets are read between two answers.
"Written" is aiohttp's ``on_request_chunk_sent`` trace signal (public since aiohttp 3.0),
which runs just before a body is handed to the socket; a request that fails or ends counts as
written, and no answer waits longer than :data:`WRITE_GRACE_S` (a connection slow to open).
The order is nearly, not strictly, kept: an answer read in a later turn than the one being
handed back may have its waiting request written after that answer's processing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp

#: Seconds an answer waits at most for requests that have a slot to be written.
WRITE_GRACE_S = 0.5

#: The current request's "written" mark; the body-writing task aiohttp starts inherits it.
_mark_written: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "pytest_modal_eval_mark_written", default=None
)


class SendsFirst:
    """Holds answers back while requests that have a slot are not written yet, and hands
    them back one per turn of the event loop. One per event loop (the client's)."""

    def __init__(self) -> None:
        self._unwritten = 0
        self._all_written = asyncio.Event()
        self._all_written.set()
        self._turns: collections.deque[asyncio.Future[None]] = collections.deque()
        self._turn_taken = False

    @contextlib.contextmanager
    def sending(self) -> Iterator[None]:
        """Around one request's exchange, on a session traced by :func:`trace_config`."""
        self._unwritten += 1
        self._all_written.clear()
        pending = True

        def written() -> None:
            nonlocal pending
            if pending:
                pending = False
                self._unwritten -= 1
                if not self._unwritten:
                    self._all_written.set()

        token = _mark_written.set(written)
        try:
            yield
        finally:
            _mark_written.reset(token)
            written()

    async def answered(self) -> None:
        """Await after an answer freed its slot, before the answer goes back to its caller."""
        await self._requests_written()
        if not self._turn_taken:
            self._turn_taken = True
            self._pass_turn()
            return
        # Another answer has this turn of the loop: wait for a turn of its own.
        turn = asyncio.get_running_loop().create_future()
        self._turns.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # given the turn, then cancelled
                self._pass_turn()
            raise
        try:
            await self._requests_written()  # for answers read while this one waited
        finally:
            self._pass_turn()

    async def _requests_written(self) -> None:
        # One turn of the loop first: a request woken by a freed slot takes it (and counts).
        await asyncio.sleep(0)
        if not self._unwritten:
            return
        try:
            async with asyncio.timeout(WRITE_GRACE_S):
                while self._unwritten:
                    await self._all_written.wait()
        except TimeoutError:
            pass  # a request that cannot be written yet (a slow connect) holds no answer longer

    def _pass_turn(self) -> None:
        # In the next turn of the loop, after it has read its sockets again.
        asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        while self._turns:
            turn = self._turns.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._turn_taken = False


def trace_config() -> aiohttp.TraceConfig:
    """The session tracing that marks each request written (see the module docstring)."""

    async def mark(session: Any, context: Any, params: Any) -> None:
        if (written := _mark_written.get()) is not None:
            written()

    config = aiohttp.TraceConfig()
    config.on_request_chunk_sent.append(mark)
    config.on_request_exception.append(mark)  # e.g. a refused connection, retried later
    config.on_request_end.append(mark)  # answered without a body written (not expected)
    config.freeze()
    return config

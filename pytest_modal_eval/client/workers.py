"""The examples' workers: a fixed number of tasks taking examples from one iterator, and the
intake that stops them sending once a run needs no more examples."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def run_workers(worker: Callable[[], Awaitable[None]], count: int) -> None:
    """Run ``count`` copies of ``worker`` until every one is done. The first to fail cancels
    the others, and its exception is raised once they have all stopped. A worker cancelled
    on its own (an example the intake dropped) is not a failure."""
    workers = [asyncio.ensure_future(worker()) for _ in range(count)]
    try:
        done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


class Intake:
    """Which examples the workers hold, and which of those have sent a request.

    Workers start examples ahead of a free request slot (``eval.prefetch``), so when a run
    needs no more examples (``keep_sending`` says no: the gate is decided) some of them are
    set up, or wait for a slot, without having sent anything. :meth:`finished`, called as each
    example is recorded, then closes the intake: the examples that sent nothing are dropped
    (their workers' tasks cancelled; they stay missing, as if never taken) and no worker takes
    another, while those whose requests went out finish and are recorded. The client asks
    :meth:`may_send` before writing each request, so one racing the close is not sent either.
    Runs on the client's event loop, one per run.
    """

    def __init__(
        self,
        keep_sending: Callable[[], bool] = lambda: True,
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        """``on_drop(example_id)`` is told of each example dropped at the close."""
        self._keep_sending = keep_sending
        self._on_drop = on_drop
        self._unsent: dict[int, asyncio.Task[object] | None] = {}
        self._unanswered: set[int] = set()
        self.closed = False
        #: Examples that had sent a request and were not yet recorded when the intake closed.
        self.unanswered_at_close = 0
        #: Examples dropped at the close (taken by a worker, nothing sent).
        self.dropped = 0

    def take(self, example_id: int) -> bool:
        """A worker starts ``example_id`` (False: the intake is closed, take nothing more)."""
        if not self.open():
            return False
        self._unsent[example_id] = asyncio.current_task()
        return True

    def open(self) -> bool:
        """Whether another example may be taken; closes the intake when not."""
        if self.closed or not self._keep_sending():
            self.close()
            return False
        return True

    def may_send(self, example_id: int | None) -> bool:
        """Whether a request of ``example_id`` may go out now; the first one marks it sent.
        Once the intake is closed only examples that have sent already may: not one it
        dropped, nor a request of no known example (a v1 agent's request whose rollout was
        dropped: its trace is no longer mapped to an example)."""
        if example_id is not None and example_id in self._unanswered:
            return True
        if self.closed:
            return False
        if example_id is not None:
            self._unsent.pop(example_id, None)
            self._unanswered.add(example_id)
        return True

    def finished(self, example_id: int) -> None:
        """``example_id`` is recorded; close the intake once no more examples are wanted."""
        self._unsent.pop(example_id, None)
        self._unanswered.discard(example_id)
        if not self.closed and not self._keep_sending():
            self.close()

    def close(self) -> None:
        """Take no more examples and drop those that sent nothing."""
        if self.closed:
            return
        self.closed = True
        self.unanswered_at_close = len(self._unanswered)
        current = asyncio.current_task()
        for example_id, task in self._unsent.items():
            if task is not None and task is not current:
                task.cancel()
                self.dropped += 1
                if self._on_drop is not None:
                    self._on_drop(example_id)
        self._unsent.clear()

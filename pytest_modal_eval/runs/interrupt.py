"""Ctrl-C during an evaluation ends it as ``KeyboardInterrupt``, whatever the rollouts catch.

``asyncio.run`` turns SIGINT into a cancellation of its main task and raises
``KeyboardInterrupt`` only when that task ends cancelled. Code below it that catches the
cancellation and goes on (a rollout recording it as its error, for instance) would leave
pytest running the remaining examples and exiting 0. :func:`run_interruptibly` keeps SIGINT
itself: it marks the run interrupted (the evaluation's stop check reads that), cancels the
main task, and raises ``KeyboardInterrupt`` once the run has stopped, so pytest reports
"Interrupted" and the checkpoint holds what finished.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from types import FrameType
from typing import Any


def run_interruptibly(
    main_coroutine: Coroutine[Any, Any, None], interrupt: threading.Event
) -> None:
    """``asyncio.run(main_coroutine)``; SIGINT sets ``interrupt``, cancels the run and makes
    it raise ``KeyboardInterrupt``. Outside the main thread, or with a SIGINT handler of
    someone else's installed, this is plain ``asyncio.run``."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        asyncio.run(main_coroutine)
        return
    main: list[asyncio.Task[None]] = []

    async def run() -> None:
        task = asyncio.current_task()
        if task is not None:
            main.append(task)
        await main_coroutine

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        interrupt.set()
        if main:
            main[0].get_loop().call_soon_threadsafe(main[0].cancel)

    signal.signal(signal.SIGINT, on_sigint)
    try:
        asyncio.run(run())
    except BaseException:
        if interrupt.is_set():
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupt.is_set():
        raise KeyboardInterrupt

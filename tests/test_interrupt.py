"""Ctrl-C ends an evaluation even when the code under asyncio catches the cancellation
(pytest_modal_eval/runs/interrupt.py). A real SIGINT is sent to this process while the run
is under way; the handler is installed by then, so pytest itself never sees it.

verifiers 0.3's classic environments install a SIGINT handler of their own when one is built
(it raises KeyboardInterrupt wherever the main thread is, and run_interruptibly leaves it in
charge); verifiers 0.4 installs none. These tests run with Python's default handler, the v1
case, whatever earlier tests of the process installed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from pytest_modal_eval.runs.interrupt import run_interruptibly

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals are handled by the main thread",
)


@pytest.fixture(autouse=True)
def default_sigint_handler() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


async def stubborn(interrupt: threading.Event | None, steps: list[int]) -> None:
    """Catches every cancellation and goes on, as a rollout recording it as its error would;
    stops early only when the run's stop check (``interrupt``) says so."""
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    for step in range(40):
        if interrupt is not None and interrupt.is_set():
            return
        steps.append(step)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)


def test_plain_asyncio_run_loses_ctrl_c_when_the_cancellation_is_caught() -> None:
    # What the guard is for: this process keeps Python's handler outside asyncio.run, so the
    # signal must arrive inside it; asyncio.run cancels, the coroutine catches, nothing raises.
    steps: list[int] = []
    asyncio.run(stubborn(None, steps))
    assert len(steps) == 40


def test_ctrl_c_stops_the_run_and_raises_keyboard_interrupt() -> None:
    interrupt = threading.Event()
    steps: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        run_interruptibly(stubborn(interrupt, steps), interrupt)
    assert interrupt.is_set()
    assert 2 <= len(steps) < 40  # stopped at the signal, not after its 40 steps
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_run_without_ctrl_c_ends_normally() -> None:
    interrupt = threading.Event()
    done: list[bool] = []

    async def work() -> None:
        await asyncio.sleep(0.01)
        done.append(True)

    run_interruptibly(work(), interrupt)
    assert done == [True] and not interrupt.is_set()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

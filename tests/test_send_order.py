"""SendsFirst's bookkeeping on a real event loop: answers wait for unwritten requests, take
turns, and neither a cancelled answer nor a request that is never written stalls the rest.
(Its effect on DirectOpenAI's requests: tests/test_direct_client.py, against a real server.)"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pytest_modal_eval.client import send_order
from pytest_modal_eval.client.send_order import SendsFirst


def test_an_answer_waits_until_the_request_with_a_slot_is_written() -> None:
    async def scenario() -> list[str]:
        order = SendsFirst()
        events: list[str] = []
        with order.sending():
            answer = asyncio.ensure_future(order.answered())
            for _ in range(5):  # turns of the loop: the answer is still held back
                await asyncio.sleep(0)
            events.append(f"answer done: {answer.done()}")
            events.append("written")
        await answer
        events.append("answer handed back")
        return events

    assert asyncio.run(scenario()) == ["answer done: False", "written", "answer handed back"]


def test_answers_are_handed_back_one_per_turn_of_the_loop() -> None:
    async def scenario() -> list[int]:
        order = SendsFirst()
        turns: list[int] = []
        loop_turn = 0

        async def count_turns() -> None:
            nonlocal loop_turn
            while True:
                await asyncio.sleep(0)
                loop_turn += 1

        counter = asyncio.ensure_future(count_turns())

        async def answer() -> None:
            await order.answered()
            turns.append(loop_turn)

        await asyncio.gather(*(answer() for _ in range(4)))
        counter.cancel()
        return turns

    turns = asyncio.run(scenario())
    assert len(turns) == 4
    assert len(set(turns)) == 4, turns  # no two answers went back in the same turn


def test_an_answer_cancelled_once_given_its_turn_passes_the_turn_on() -> None:
    async def scenario() -> bool:
        order = SendsFirst()
        answers = [asyncio.ensure_future(order.answered()) for _ in range(3)]
        # The first takes the turn; in the turn of the loop that wakes this test, the next
        # turn has just been given to the second, which has not run yet.
        await answers[0]
        answers[1].cancel()
        async with asyncio.timeout(5):
            await answers[2]
        return answers[1].cancelled()

    assert asyncio.run(scenario()) is True


def test_a_request_never_written_holds_answers_back_only_for_the_grace() -> None:
    async def scenario() -> float:
        order = SendsFirst()
        with order.sending():  # a connection that takes long to open: nothing is written
            started = time.monotonic()
            await order.answered()
            return time.monotonic() - started

    waited = asyncio.run(scenario())
    assert send_order.WRITE_GRACE_S <= waited < send_order.WRITE_GRACE_S + 2


def test_the_trace_marks_the_request_in_whose_context_it_runs() -> None:
    async def scenario() -> list[bool]:
        order = SendsFirst()
        config = send_order.trace_config()
        mark: Any = config.on_request_chunk_sent[0]
        seen = []
        with order.sending():
            # aiohttp's body-writing task: created inside the request's context
            await asyncio.ensure_future(mark(None, None, None))
            answer = asyncio.ensure_future(order.answered())
            await asyncio.sleep(0.01)
            seen.append(answer.done())
        await mark(None, None, None)  # outside any request: nothing to mark, no error
        await answer
        return seen

    assert asyncio.run(scenario()) == [True]

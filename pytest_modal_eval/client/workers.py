"""The examples' workers: a fixed number of tasks taking examples from one iterator."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def run_workers(worker: Callable[[], Awaitable[None]], count: int) -> None:
    """Run ``count`` copies of ``worker`` until every one is done. The first to fail cancels
    the others, and its exception is raised once they have all stopped."""
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

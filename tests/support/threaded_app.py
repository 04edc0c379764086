"""An aiohttp app on 127.0.0.1, served from a daemon thread with its own event loop.

The test servers that must answer while the test's own code blocks (a synchronous client, a
proxy in another thread) derive from :class:`ThreadedApp`: every request goes to ``_handle``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from contextlib import AbstractAsyncContextManager

from aiohttp import web


class ThreadedApp:
    def __init__(self) -> None:
        self.url = ""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def start(self) -> str:
        """Serve on a free port; return the base URL (``http://127.0.0.1:PORT``)."""
        ready: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(ready),), daemon=True)
        self._thread.start()
        self.url = ready.result(timeout=10)
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
            self._loop = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    def _lifespan(self) -> AbstractAsyncContextManager[None]:
        """What the server holds while it serves (entered on its loop)."""
        return contextlib.nullcontext()

    async def _main(self, ready: concurrent.futures.Future[str]) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        async with self._lifespan():
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            ready.set_result(f"http://127.0.0.1:{runner.addresses[0][1]}")
            await self._stop.wait()
            await runner.cleanup()

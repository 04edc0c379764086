"""A plain HTTP forward proxy on 127.0.0.1 (absolute-form requests, no CONNECT), in a thread.

It relays each request to the host named in its ``Host`` header and records what it relayed
and the ``Proxy-Authorization`` it was given. ``start()`` returns its URL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import aiohttp
import pytest
from aiohttp import web

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy variable of the machine's, in either case, leaks into a test about them."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)


_NOT_FORWARDED = frozenset({"host", "proxy-authorization", "proxy-connection", "connection"})


class ForwardProxy:
    def __init__(self) -> None:
        self.relayed: list[tuple[str, str]] = []  # (method, absolute URL)
        self.proxy_auth: list[str | None] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def start(self) -> str:
        ready: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(ready),), daemon=True)
        self._thread.start()
        return ready.result(timeout=10)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
            self._loop = None

    async def _main(self, ready: concurrent.futures.Future[str]) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._relay)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            self._session = session
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            ready.set_result(f"http://127.0.0.1:{runner.addresses[0][1]}")
            await self._stop.wait()
            await runner.cleanup()

    async def _relay(self, request: web.Request) -> web.Response:
        target = f"http://{request.headers['Host']}{request.rel_url}"
        self.relayed.append((request.method, target))
        self.proxy_auth.append(request.headers.get("Proxy-Authorization"))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        body = await request.read()
        async with self._session.request(
            request.method, target, headers=headers, data=body or None, allow_redirects=False
        ) as answer:
            kept = {
                k: v
                for k, v in answer.headers.items()
                if k.lower() in ("content-type", "content-encoding", "location", "retry-after")
            }
            return web.Response(status=answer.status, body=await answer.read(), headers=kept)

"""A plain HTTP forward proxy on 127.0.0.1 (absolute-form requests, no CONNECT), in a thread.

It relays each request to the host named in its ``Host`` header and records what it relayed
and the ``Proxy-Authorization`` it was given. ``start()`` returns its URL.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.support.threaded_app import ThreadedApp

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy variable of the machine's, in either case, leaks into a test about them."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)


_NOT_FORWARDED = frozenset({"host", "proxy-authorization", "proxy-connection", "connection"})


class ForwardProxy(ThreadedApp):
    def __init__(self) -> None:
        super().__init__()
        self.relayed: list[tuple[str, str]] = []  # (method, absolute URL)
        self.proxy_auth: list[str | None] = []

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(auto_decompress=False) as self._session:
            yield

    async def _handle(self, request: web.Request) -> web.Response:
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

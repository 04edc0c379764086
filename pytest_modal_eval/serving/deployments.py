"""One server per server profile per session, owned by the controller process.

A *server profile* is what a server depends on (backend, model, infra, vllm, chat
template). Benchmarks with equal profiles share one server, started lazily by the first
benchmark that needs it and stopped at the end of the session.

Without xdist the :class:`Deployments` object runs in-process. Under xdist it lives on the
controller, which also runs a small HTTP broker on 127.0.0.1; workers ask the broker for
the endpoint of a profile (handing it only JSON), so ``-n 4`` still deploys once.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.exceptions import ServerStartError
from pytest_modal_eval.serving.backends import endpoint_info_for_existing, start_server
from pytest_modal_eval.serving.endpoint import EndpointInfo, ServerRequest

BROKER_INPUT_KEY = "modal_eval_broker"


class Deployments:
    """Starts and remembers one server per profile; stops them all at the end."""

    def __init__(self, settings: Settings, logs_dir: Path) -> None:
        self.settings = settings
        self.logs_dir = logs_dir
        self._servers: dict[str, tuple[Any, EndpointInfo]] = {}
        self._failures: dict[str, str] = {}  # a profile that failed to start is not retried
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.started: list[str] = []  # profile keys, in start order (tests count these)

    def endpoint_for(self, request: ServerRequest) -> EndpointInfo:
        if request.backend == "endpoint":
            return endpoint_info_for_existing(request)

        key = json.dumps(request.profile(), sort_keys=True)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key in self._failures:
                raise ServerStartError(self._failures[key])
            if key not in self._servers:
                try:
                    server, info = start_server(request, self.settings, self.logs_dir)
                except Exception as exc:
                    # Every benchmark on this profile would wait out the same failure again.
                    self._failures[key] = str(exc)
                    raise ServerStartError(str(exc)) from None
                self._servers[key] = (server, info)
                self.started.append(key)
            return self._servers[key][1]

    def stop_all(self) -> None:
        for server, _ in reversed(list(self._servers.values())):
            try:
                server.stop()
            except Exception as exc:  # keep stopping the others
                print(f"pytest-modal-eval: failed to stop a server: {exc}")
        self._servers.clear()


class Broker:
    """Controller side: answers workers' ``POST /endpoint`` from :class:`Deployments`."""

    def __init__(self, deployments: Deployments) -> None:
        self.deployments = deployments
        self.token = secrets.token_hex(16)
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None

    def start(self) -> str:
        from aiohttp import web

        ready = threading.Event()

        async def handle(request: web.Request) -> web.Response:
            if request.headers.get("X-Broker-Token") != self.token:
                return web.json_response({"error": "forbidden"}, status=403)
            payload = await request.json()
            try:
                info = await asyncio.to_thread(
                    self.deployments.endpoint_for, ServerRequest(**payload)
                )
            except Exception as exc:
                return web.json_response({"error": str(exc)}, status=500)
            return web.json_response(info.to_json())

        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/endpoint", handle)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            ready.set()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(serve())
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="modal-eval-broker", daemon=True)
        self._thread.start()
        ready.wait(30)
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None


class BrokerClient:
    """Worker side: the same ``endpoint_for`` as :class:`Deployments`, over HTTP."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self._cache: dict[str, EndpointInfo] = {}

    def endpoint_for(self, request: ServerRequest) -> EndpointInfo:
        if request.backend == "endpoint":
            return endpoint_info_for_existing(request)
        key = json.dumps(request.profile(), sort_keys=True)
        if key not in self._cache:
            import httpx

            # Deploys can take many minutes (cold starts, image builds): no short timeout.
            response = httpx.post(
                f"{self.url}/endpoint",
                json=asdict(request),
                headers={"X-Broker-Token": self.token},
                timeout=None,
            )
            if response.status_code != 200:
                raise ServerStartError(response.json().get("error", response.text))
            self._cache[key] = EndpointInfo.from_json(response.json())
        return self._cache[key]


DEPLOYMENTS_KEY = pytest.StashKey[Deployments]()
SOURCE_KEY = pytest.StashKey["Deployments | BrokerClient"]()


def endpoint_source(config: pytest.Config) -> Deployments | BrokerClient:
    return config.stash[SOURCE_KEY]

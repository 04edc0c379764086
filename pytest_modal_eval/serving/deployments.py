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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import Endpoint
from pytest_modal_eval.config.options import Settings

if TYPE_CHECKING:
    from pytest_modal_eval.config.loader import Benchmark

BROKER_INPUT_KEY = "modal_eval_broker"


@dataclass(frozen=True)
class ServerRequest:
    """What a benchmark needs from the serving tier; JSON-able for the trip to the controller."""

    backend: str
    model: str
    infra: dict[str, Any]
    vllm: dict[str, Any]
    chat_template: str | None
    base_url: str | None
    api_key_env: str

    @classmethod
    def for_benchmark(cls, settings: Settings, benchmark: Benchmark) -> ServerRequest:
        config = benchmark.config
        template = config.chat_template
        if template is not None and template.endswith(".jinja"):
            # A template file is named relative to its benchmark YAML.
            template = str((benchmark.path.parent / template).resolve())
        return cls(
            backend=settings.backend,
            model=settings.model or "",
            infra=config.infra.model_dump(),
            vllm=config.vllm.model_dump(),
            chat_template=template,
            base_url=settings.base_url,
            api_key_env=settings.api_key_env,
        )

    @property
    def endpoint_identity(self) -> str | None:
        """The endpoint's part of the answer key: a ``--base-url`` endpoint is known by its URL;
        a server we start, by its profile's fields (already in the key)."""
        return self.base_url if self.backend == "endpoint" else None

    def applies_template(self, recorded: object) -> bool:
        """Whether the vLLM we start for this request, started now, would apply the chat
        template a finished run recorded (see ``chat_template.decided_now``)."""
        from pytest_modal_eval.serving.chat_template import decided_now

        return decided_now(
            recorded,
            self.model,
            self.chat_template,
            extra_args=self.vllm.get("extra_args") or (),
            served_from_here=self.backend == "local",
        )

    def profile(self) -> dict[str, Any]:
        """The server profile: the fields that decide which server answers."""
        if self.backend == "endpoint":
            return {"backend": "endpoint", "base_url": self.base_url, "model": self.model}
        return {
            "backend": self.backend,
            "model": self.model,
            "infra": self.infra,
            "vllm": self.vllm,
            "chat_template": self.chat_template,
        }


@dataclass(frozen=True)
class EndpointInfo:
    endpoint: Endpoint
    profile: dict[str, Any]
    chat_template: dict[str, str] = field(default_factory=dict)
    identity: str | None = None  # part of the resume key (the endpoint URL for `endpoint`)
    check_timeout: float = 15.0
    server_logs: str | None = None  # directory of the server's logs, linked into each run
    proxied: bool = False  # behind our proxy: requests may route their log line per run

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["endpoint"]["headers"] = [list(h) for h in self.endpoint.headers]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndpointInfo:
        raw = dict(data["endpoint"])
        raw["headers"] = tuple(tuple(h) for h in raw.get("headers", ()))
        return cls(**{**data, "endpoint": Endpoint(**raw)})


def endpoint_info_for_existing(request: ServerRequest) -> EndpointInfo:
    assert request.base_url is not None
    return EndpointInfo(
        endpoint=Endpoint(request.base_url, request.model, request.api_key_env),
        profile=request.profile(),
        identity=request.endpoint_identity,
    )


class ServerStartError(RuntimeError):
    """The server for a profile could not be started; the message says why and where to look."""


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
        from pytest_modal_eval.serving.backends import start_server

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

"""The xdist broker: workers ask the controller's :class:`~.deployments.Deployments` for
endpoints over HTTP on 127.0.0.1, so ``-n 4`` still deploys once.

The controller runs :class:`Broker` (an aiohttp server on a thread) and hands each worker its
address and a per-session token through ``workerinput``; a worker's :class:`BrokerClient`
offers the same ``plan``, ``endpoint_for`` and ``finished`` as ``Deployments``, sending only
JSON.

The broker also teaches the controller's redactor every secret a worker's redactor knows
(``POST /secrets``, from :meth:`BrokerClient.learn_secrets`): workers collect the benchmarks,
so only they read the secrets in a benchmark's ``env_args`` and its judges' key variables,
while the controller writes the servers' logs, the report and what is shared. A worker sends
each value as its redactor learns it, before it goes on to ask for a server; the values travel
over 127.0.0.1 with the session's token, and are never written to a file.

Workers' set-up phases (an environment loading, a run's checkpoint read:
:mod:`pytest_modal_eval.phases`) reach the controller's terminal the same way
(``POST /phase``, from :class:`PhaseForwarder`), where the live progress shows them beside the
controller's own (the servers it starts).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from pytest_modal_eval import phases
from pytest_modal_eval.config.backends import backend
from pytest_modal_eval.exceptions import ServerStartError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.serving.backends import endpoint_info_for_existing
from pytest_modal_eval.serving.deployments import Deployments
from pytest_modal_eval.serving.endpoint import EndpointInfo, ServerRequest

#: The ``workerinput`` key holding the broker's address and token.
BROKER_INPUT_KEY = "modal_eval_broker"
#: Header carrying the broker's per-session token.
BROKER_TOKEN_HEADER = "X-Broker-Token"
#: What a worker tells of a phase (``POST /phase``), as :class:`phases.Relayed` takes it.
PHASE_EVENTS = ("began", "changed", "ended")


class Broker:
    """Controller side: answers workers' ``POST /endpoint``, ``/plan`` and ``/finished`` from
    :class:`Deployments`, ``/secrets`` by teaching ``redactor`` (the controller's), and
    ``/phase`` by telling this process's phase listeners."""

    def __init__(self, deployments: Deployments, redactor: Redactor) -> None:
        self.deployments = deployments
        self.redactor = redactor
        self.phases = phases.Relayed()
        self.token = secrets.token_hex(16)
        self.url = ""
        self._loop: Any = None  # the broker thread's asyncio loop
        self._thread: threading.Thread | None = None
        self._runner: Any = None

    def start(self) -> str:
        import asyncio  # here: only an xdist controller runs a broker

        from aiohttp import web

        ready = threading.Event()

        def authorised(request: web.Request) -> bool:
            given = request.headers.get(BROKER_TOKEN_HEADER, "")
            return secrets.compare_digest(given.encode(), self.token.encode())

        async def endpoint(request: web.Request) -> web.Response:
            if not authorised(request):
                return web.json_response({"error": "forbidden"}, status=403)
            payload = await request.json()
            try:
                info = await asyncio.to_thread(
                    self.deployments.endpoint_for,
                    ServerRequest(**payload["request"]),
                    payload.get("holder"),
                )
            except Exception as exc:
                return web.json_response({"error": str(exc)}, status=500)
            return web.json_response(info.to_json())

        async def plan(request: web.Request) -> web.Response:
            if not authorised(request):
                return web.json_response({"error": "forbidden"}, status=403)
            self.deployments.plan(await request.json())
            return web.json_response({})

        async def finished(request: web.Request) -> web.Response:
            if not authorised(request):
                return web.json_response({"error": "forbidden"}, status=403)
            payload = await request.json()
            await asyncio.to_thread(self.deployments.finished, str(payload["holder"]))
            return web.json_response({})

        async def learn(request: web.Request) -> web.Response:
            if not authorised(request):
                return web.json_response({"error": "forbidden"}, status=403)
            values = (await request.json()).get("values")
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                return web.json_response({"error": "values: a list of strings"}, status=400)
            self.redactor.learn(values)
            return web.json_response({})

        async def phase(request: web.Request) -> web.Response:
            if not authorised(request):
                return web.json_response({"error": "forbidden"}, status=403)
            payload = await request.json()
            event, key, text = (payload.get(k) for k in ("event", "key", "text"))
            if event not in PHASE_EVENTS or not isinstance(key, str) or not isinstance(text, str):
                return web.json_response(
                    {"error": f"event: one of {PHASE_EVENTS}; key, text: strings"}, status=400
                )
            if event == "began":
                self.phases.began(key, text)
            elif event == "changed":
                self.phases.changed(key, text)
            else:
                self.phases.ended(key)
            return web.json_response({})

        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/endpoint", endpoint)
            app.router.add_post("/plan", plan)
            app.router.add_post("/finished", finished)
            app.router.add_post("/secrets", learn)
            app.router.add_post("/phase", phase)
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
        self.phases.end_all()
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None


class BrokerClient:
    """Worker side: the same ``plan``, ``endpoint_for`` and ``finished`` as :class:`Deployments`,
    over HTTP.

    Nothing is cached: the controller may have stopped a server since the last answer.
    Requests go straight to 127.0.0.1, never through an ``HTTP_PROXY`` from the environment:
    the broker's token must not leave the machine.
    """

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token

    def _post(self, path: str, payload: Any) -> Any:
        import httpx

        # Deploys can take many minutes (cold starts, image builds): no short timeout.
        response = httpx.post(
            f"{self.url}{path}",
            json=payload,
            headers={BROKER_TOKEN_HEADER: self.token},
            timeout=None,
            trust_env=False,
        )
        if response.status_code != 200:
            raise ServerStartError(response.json().get("error", response.text))
        return response.json()

    def plan(self, needs: Mapping[str, str]) -> None:
        self._post("/plan", dict(needs))

    def finished(self, nodeid: str) -> None:
        self._post("/finished", {"holder": nodeid})

    def learn_secrets(self, values: list[str]) -> None:
        """Teach the controller's redactor ``values`` (see the module docstring)."""
        self._post("/secrets", {"values": values})

    def tell_phase(self, event: str, key: str, text: str) -> None:
        """Tell the controller of a phase of this process; a controller that does not hear it
        changes nothing here (the phase is only shown). Over the standard library's HTTP
        client: httpx would log every call at INFO, in the user's live log."""
        import http.client
        import json
        from urllib.parse import urlsplit

        where = urlsplit(self.url)
        body = json.dumps({"event": event, "key": key, "text": text})
        headers = {BROKER_TOKEN_HEADER: self.token, "Content-Type": "application/json"}
        connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
        with contextlib.suppress(OSError, http.client.HTTPException):
            connection.request("POST", "/phase", body=body, headers=headers)
            connection.getresponse().read()
        connection.close()

    def endpoint_for(self, request: ServerRequest, holder: str | None = None) -> EndpointInfo:
        if not backend(request.backend).starts_server:
            return endpoint_info_for_existing(request)
        data = self._post("/endpoint", {"request": asdict(request), "holder": holder})
        return EndpointInfo.from_json(data)


class PhaseForwarder:
    """Worker side: a :class:`phases.PhaseListener` that tells the controller each phase of
    this process, under keys unique to ``worker``."""

    def __init__(self, client: BrokerClient, worker: str) -> None:
        self.client, self.worker = client, worker

    def _key(self, phase: phases.Phase) -> str:
        return f"{self.worker}:{id(phase)}"

    def began(self, phase: phases.Phase) -> None:
        self.client.tell_phase("began", self._key(phase), phase.text)

    def changed(self, phase: phases.Phase, previous: str | None, seconds: float) -> None:
        self.client.tell_phase("changed", self._key(phase), phase.current or "")

    def ended(self, phase: phases.Phase, seconds: float) -> None:
        self.client.tell_phase("ended", self._key(phase), "")

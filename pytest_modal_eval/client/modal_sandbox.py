"""Harnesses in Modal sandboxes (verifiers' ``modal`` runtime), their model calls answered here.

verifiers 0.4's ``ModalRuntime`` runs a seat's harness in one Modal sandbox per rollout, and
the harness calls the model at the interception server's URL. That server is the plugin's
(:class:`~pytest_modal_eval.client.verifiers_v1.PluginInterception`, on this machine's
127.0.0.1), and nothing in a sandbox can open a connection to this machine. verifiers bridges
the gap with a public tunnel to this machine (a Prime login); the plugin instead keeps every
connection outgoing, over Modal's own ``Sandbox.exec`` stream:

- :class:`RelayedModalRuntime` is verifiers' ``ModalRuntime`` with a relay
  (:mod:`~pytest_modal_eval.client.sandbox_relay`) started in each sandbox. The relay is the
  harness's model endpoint inside the sandbox (``host_url`` points the harness at it); it
  hands each request up its stdout, this module sends it to the interception server on
  127.0.0.1 and writes the answer to the relay's stdin. The plugin's client (in-flight cap,
  answer journal, seeds, retries, redaction) answers every call, as with ``subprocess``.
- A sandbox ends with its rollout (verifiers' ``stop``, also on errors and Ctrl-C, and its
  exit-time backstop). When nothing on this machine can run any more (pytest SIGKILLed),
  the sandbox ends itself: its main command is a watchdog that exits when the relay's lease
  file has not been renewed for :attr:`SandboxLimits.lease` seconds (this module renews it
  through the relay), and Modal ends a sandbox whose main command exits. Modal's own
  ``idle_timeout`` and ``timeout`` are set too, and every sandbox is tagged
  (:data:`SESSION_TAGS`) with the session that made it.

verifiers internals used here, in this module only: ``ModalRuntime._create_sandbox`` (what the
sandbox is created with) and ``verifiers.v1.rollout.make_runtime`` (replaced while a run
lasts, :func:`relayed_modal_runtimes`); ``tests/test_verifiers_v1_modal_sandbox.py`` fails when
they change.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from verifiers.v1.errors import SandboxError
from verifiers.v1.runtimes import ModalConfig, ModalRuntime, RuntimeProcess
from verifiers.v1.runtimes.base import SERVICE_PORT, register

from pytest_modal_eval.client import sandbox_relay
from pytest_modal_eval.serving.forwarding import (
    ForwardRefused,
    forwarded_method,
    forwarded_target,
)
from pytest_modal_eval.serving.modal.sandboxes import session_tags

_logger = logging.getLogger(__name__)

#: verifiers' name of the runtime this module serves (``runtime: {type: modal}``).
RUNTIME = "modal"
#: Where the relay and its lease live in the sandbox; each runtime adds its own suffix
#: (:attr:`RelayedModalRuntime.relay_file`, :attr:`RelayedModalRuntime.lease_file`), so that
#: sandboxes sharing a filesystem (the tests' stand-in shares the host's) never renew each
#: other's lease or rewrite each other's relay.
RELAY_FILE = "/tmp/pytest-modal-eval-relay.py"
LEASE_FILE = "/tmp/pytest-modal-eval-lease"

#: Tags on every sandbox this process creates: ``Sandbox.list(tags=...)`` finds them, and
#: ``pytest-modal-eval stop --sandboxes`` ends them.
SESSION_TAGS = session_tags()

#: The sandbox's main command: exit once the lease file is older than the lease ($2 seconds).
WATCHDOG = (
    'L="$1"; N="$2"; touch "$L"; '
    "while sleep 1; do "
    '[ $(( $(date +%s) - $(date -r "$L" +%s) )) -le "$N" ] || exit 0; '
    "done"
)

_NOT_RELAYED = {"content-encoding", "content-length", "transfer-encoding", "connection"}
#: Request headers the sandbox's side may not set: httpx frames the body and names the host
#: itself (a sandbox's own framing could smuggle a second request).
_NOT_FORWARDED = {
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te",
    "trailer", "expect", "proxy-authorization", "proxy-connection",
}  # fmt: skip

LEASE_ENV = "MODAL_EVAL_SANDBOX_LEASE"
TIMEOUT_ENV = "MODAL_EVAL_SANDBOX_TIMEOUT"


@dataclass(frozen=True)
class SandboxLimits:
    """How long a sandbox outlives a silent host (``lease``, also Modal's ``idle_timeout``)
    and lives at most (``timeout``), in seconds; from :data:`LEASE_ENV` and
    :data:`TIMEOUT_ENV`, else 120 s and 4 h."""

    lease: int = 120
    timeout: int = 4 * 3600

    @classmethod
    def from_env(cls) -> SandboxLimits:
        values = {}
        for name, field, default in (
            (LEASE_ENV, "lease", cls.lease),
            (TIMEOUT_ENV, "timeout", cls.timeout),
        ):
            raw = os.environ.get(name, "").strip()
            if not raw:
                values[field] = default
                continue
            if not raw.isdigit() or int(raw) < 1:
                raise SandboxError(f"{name}={raw!r}: set it to a whole number of seconds >= 1")
            values[field] = int(raw)
        return cls(**values)


def runtime_problem(where: str) -> str | None:
    """Why a harness cannot run in a Modal sandbox from here (one line), or None."""
    try:
        import modal.config
    except ImportError:
        return f"{where} runtime 'modal': the Modal SDK is not installed; `pip install modal`"
    # The token serving on Modal uses (serving/modal/backend.py checks the same two keys).
    config = modal.config.config
    if not (config.get("token_id") and config.get("token_secret")):
        return (
            f"{where} runtime 'modal': no Modal token; run `modal token new` (or set "
            "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET), the same credentials as serving on Modal"
        )
    try:
        SandboxLimits.from_env()
    except SandboxError as exc:
        return f"{where} runtime 'modal': {exc}"
    return None


async def _lines(chunks: AsyncIterator[bytes | str]) -> AsyncIterator[str]:
    """Whole lines from a stream of chunks."""
    pending = ""
    async for chunk in chunks:
        pending += chunk.decode() if isinstance(chunk, bytes) else chunk
        *whole, pending = pending.split("\n")
        for line in whole:
            if line:
                yield line


class RelayedModalRuntime(ModalRuntime):  # type: ignore[misc]
    """verifiers' ``ModalRuntime`` whose harness reaches the host through the relay."""

    def __init__(self, config: ModalConfig, name: str | None = None) -> None:
        super().__init__(config, name)
        self.limits = SandboxLimits.from_env()
        self._relay: RuntimeProcess | None = None
        self._relay_port: int | None = None
        self._targets: set[int] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._write_lock = asyncio.Lock()
        self._http: httpx.AsyncClient | None = None
        suffix = uuid.uuid4().hex[:12]
        self.lease_file = f"{LEASE_FILE}-{suffix}"
        self.relay_file = f"{RELAY_FILE.removesuffix('.py')}-{suffix}.py"

    async def _create_sandbox(self, app: Any) -> None:
        """verifiers' sandbox, with the watchdog as its main command, the limits and tags."""
        import modal

        self._sandbox = await modal.Sandbox.create.aio(
            "sh",
            "-c",
            WATCHDOG,
            "pytest-modal-eval-watchdog",
            self.lease_file,
            str(self.limits.lease),
            app=app,
            name=self.name,
            tags=SESSION_TAGS,
            image=modal.Image.from_registry(self.config.image).entrypoint([]),
            workdir=self.config.workdir,
            env=self.env,
            cpu=self.config.cpu,
            memory=int(self.config.memory * 1024),
            gpu=self.config.gpu,
            region=self.config.region,
            block_network=not self.config.network_access,
            outbound_domain_allowlist=["*"] if self.network_restricted else None,
            outbound_cidr_allowlist=["0.0.0.0/0"] if self.network_restricted else None,
            timeout=self.limits.timeout,
            idle_timeout=self.limits.lease,
            encrypted_ports=[SERVICE_PORT],
            experimental_options={"vm_runtime": True} if self.config.vm else {},
        )

    async def start(self) -> None:
        await super().start()
        try:
            await self._start_relay()
        except Exception as exc:
            raise SandboxError(f"modal sandbox: the model relay did not start: {exc}") from exc

    async def _start_relay(self) -> None:
        await self.write(self.relay_file, Path(sandbox_relay.__file__).read_bytes())
        found = await self.run(["sh", "-c", "command -v python3"], {})
        if found.exit_code != 0:
            raise SandboxError(
                f"image {self.config.image!r} has no python3, which the model relay needs; "
                "set agent.runtime.image to an image with python3"
            )
        relay = await self.open_process(["python3", self.relay_file, self.lease_file], {})
        lines = _lines(relay.stdout)
        first = await asyncio.wait_for(anext(lines), timeout=60)
        self._relay_port = int(json.loads(first)["port"])
        self._relay = relay
        self._http = httpx.AsyncClient(trust_env=False, timeout=None)
        self._tasks = [
            asyncio.create_task(self._pump(lines)),
            asyncio.create_task(self._beat()),
        ]

    def host_url(self, url: str) -> str:
        """A URL on this machine's loopback, as the harness in the sandbox reaches it: the
        relay, with the port as the first path segment (only ports handed out here are
        relayed)."""
        parts = urlsplit(url)
        if self._relay_port is None or parts.hostname not in ("127.0.0.1", "localhost"):
            return url
        if parts.port is None:
            return url
        self._targets.add(parts.port)
        relay = f"127.0.0.1:{self._relay_port}"
        return urlunsplit(("http", relay, f"/{parts.port}{parts.path}", parts.query, ""))

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._relay is not None
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        async with self._write_lock:
            await self._relay.write(data)

    async def _beat(self) -> None:
        while True:
            await self._send({"beat": True})
            await asyncio.sleep(max(self.limits.lease / 4, 0.2))

    async def _pump(self, lines: AsyncIterator[str]) -> None:
        answering: set[asyncio.Task[None]] = set()
        try:
            async for line in lines:
                try:
                    request = json.loads(line)
                except ValueError:
                    request = None
                if not isinstance(request, dict):
                    # Anything in the sandbox can write to the relay's stdout.
                    _logger.warning(
                        "modal sandbox %s: ignored a relay line that is not a request: %s",
                        self.name,
                        ascii(line[:200]),
                    )
                    continue
                task = asyncio.create_task(self._answer(request))
                answering.add(task)
                task.add_done_callback(answering.discard)
        finally:
            for task in list(answering):
                task.cancel()

    def _forwarded(self, request: dict[str, Any]) -> tuple[str, httpx.URL, list[Any], bytes]:
        """The method, URL (built from its parts), headers and body to send on for a request
        the relay wrote; :class:`ForwardRefused` when it is anything but a plain request for
        one of the ports handed to this rollout. The relay's line is the sandbox's text:
        anything in the sandbox can write one."""
        port = request.get("port")
        if type(port) is not int or port not in self._targets:
            raise ForwardRefused(f"port {ascii(port)[:40]} was not handed to this rollout", 403)
        path, query = forwarded_target(request.get("path"))
        method = forwarded_method(request.get("method"))
        headers = request.get("headers")
        if not isinstance(headers, list) or not all(
            isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h)
            for h in headers
        ):
            raise ForwardRefused("headers: not a list of [name, value] pairs")
        try:
            body = base64.b64decode(request.get("body") or "", validate=True)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise ForwardRefused("body: not base64") from exc
        url = httpx.URL(scheme="http", host="127.0.0.1", port=port, path=path, query=query.encode())
        return method, url, [(k, v) for k, v in headers if k.lower() not in _NOT_FORWARDED], body

    async def _answer(self, request: dict[str, Any]) -> None:
        assert self._http is not None
        request_id = request.get("id")
        try:
            method, url, headers, body = self._forwarded(request)
        except ForwardRefused as exc:
            _logger.warning("modal sandbox %s: relay request refused: %s", self.name, exc)
            reply: dict[str, Any] = {
                "status": exc.status,
                "headers": [["content-type", "text/plain"]],
                "body": base64.b64encode(f"refused by the host: {exc}".encode()).decode(),
            }
        else:
            try:
                response = await self._http.request(method, url, headers=headers, content=body)
                reply = {
                    "status": response.status_code,
                    # httpx has decoded the body and the relay sets its own length.
                    "headers": [
                        [k, v]
                        for k, v in response.headers.multi_items()
                        if k.lower() not in _NOT_RELAYED
                    ],
                    "body": base64.b64encode(response.content).decode(),
                }
            except httpx.HTTPError as exc:
                reply = {
                    "status": 502,
                    "headers": [["content-type", "text/plain"]],
                    "body": base64.b64encode(str(exc).encode()).decode(),
                }
        if type(request_id) is int:
            await self._send({"id": request_id, **reply})

    async def teardown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        await super().teardown()


@contextlib.contextmanager
def relayed_modal_runtimes() -> Iterator[None]:
    """While open, every rollout verifiers provisions in the ``modal`` runtime gets a
    :class:`RelayedModalRuntime` (verifiers' rollouts make theirs with ``make_runtime``)."""
    import verifiers.v1.rollout as rollout

    original = rollout.make_runtime

    def make_runtime(config: Any, name: str | None = None) -> Any:
        if isinstance(config, ModalConfig):
            runtime = RelayedModalRuntime(config, name)
            register(runtime)
            return runtime
        return original(config, name)

    rollout.make_runtime = make_runtime
    try:
        yield
    finally:
        rollout.make_runtime = original

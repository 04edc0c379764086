"""Local HTTP proxy between an evaluation's OpenAI client and a (Modal-hosted) vLLM endpoint.

Modal answers a web request still running after 150 s with ``303`` to the same URL plus
``__modal_function_call_id=fc-...``; the client must GET that URL with no body, possibly many
times, and can fetch the result only once. OpenAI clients cannot do that (they re-POST and get
``400 modal-http: bad redirect method``), so this proxy does it for them. It also retries
transient failures, injects the auth headers (never logging them) and writes one log line per
request.

An evaluation running in the proxy's own process (no xdist, the usual case) does not talk to it
over HTTP: :class:`~pytest_modal_eval.client.direct_client.DirectOpenAI` finds the proxy with
:func:`in_process` and hands each rollout's request to :meth:`ModalProxy.forward`, the same
logic run from the evaluation's event loop and connections. The local HTTP hop cost ~0.5 ms of
CPU per request in the evaluation's process (README, Performance).

Standalone: ``python -m pytest_modal_eval.serving.modal.redirect_proxy --upstream URL`` (secrets
from the environment: ``MODAL_PROXY_TOKEN_ID``, ``MODAL_PROXY_TOKEN_SECRET``, ``VLLM_API_KEY``; an
HTTP proxy on the way to the upstream from ``HTTPS_PROXY`` & co.).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import hmac
import logging
import math
import os
import random
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.serving.env_proxy import aiohttp_options, env_proxy
from pytest_modal_eval.serving.forwarding import ForwardRefused, forwarded_target

__all__ = [
    "LOG_ROUTE_HEADER",
    "ModalProxy",
    "ProxySettings",
    "ProxyThread",
    "in_process",
    "settings_from_env",
]

_logger = logging.getLogger(__name__)

#: Request header naming the log file (absolute, named ``proxy.log``) for that request's line.
LOG_ROUTE_HEADER = "X-Modal-Eval-Log"
#: The per-session secret a client must send when :attr:`ProxySettings.client_token` is set: the
#: proxy adds the Modal proxy token and the vLLM key, so no other local process may use it.
CLIENT_TOKEN_HEADER = "X-Modal-Eval-Proxy-Token"
#: The standalone proxy's client token comes from this environment variable, never the CLI.
CLIENT_TOKEN_ENV = "MODAL_EVAL_PROXY_CLIENT_TOKEN"
#: Request header with the client's own request timeout in seconds: the proxy's deadline for
#: that request (its ``request_deadline_s`` applies when absent or unreadable).
DEADLINE_HEADER = "X-Modal-Eval-Deadline"
_LOG_NAME = "proxy.log"
_FLUSH_INTERVAL_S = 0.5

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# aiohttp sets Host and body framing for the upstream request itself; a forwarded Host would
# make Modal route to 127.0.0.1, and Expect would stall on a 100-continue nobody sends.
_ROUTE_KEY = LOG_ROUTE_HEADER.lower()
_DEADLINE_KEY = DEADLINE_HEADER.lower()
_CLIENT_TOKEN_KEY = CLIENT_TOKEN_HEADER.lower()
_DROP_FROM_CLIENT = _HOP_BY_HOP | {
    "host",
    "content-length",
    "expect",
    _ROUTE_KEY,
    _DEADLINE_KEY,
    _CLIENT_TOKEN_KEY,
}
# The redirect GET must carry no body (Modal rejects it), so no headers describing one either.
_BODY_HEADERS = ("Content-Type", "Content-Encoding", "Content-Length")

# Each Modal hop blocks ~150 s and a direct (non-Modal) vLLM may think for far longer before the
# first byte of a non-streamed answer, so there is no read timeout: the per-request deadline
# bounds everything. A quick connect timeout makes a dead host a retryable error instead.
_UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=30, sock_read=None)
_MAX_BODY = 256 * 1024**2  # aiohttp's default of 1 MiB is too small for long multimodal prompts

#: The proxies listening in this process, by base URL (``http://127.0.0.1:PORT``).
_IN_PROCESS: dict[str, ModalProxy] = {}


def in_process(url: str) -> ModalProxy | None:
    """The proxy running in this process that ``url`` (any path) would reach, or None."""
    return _IN_PROCESS.get(str(URL(url).origin()))


@dataclass(frozen=True, repr=False)
class ProxySettings:
    """Everything the proxy needs. ``inject_headers`` holds secrets and never appears in repr."""

    upstream: str
    inject_headers: Mapping[str, str] = field(default_factory=dict)
    request_deadline_s: float = 7200.0
    max_attempts: int = 5
    max_redirects: int = 30
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    log_path: Path | None = None
    upstream_proxy: str | None = None  # an http:// proxy to reach the upstream through
    # Clients over HTTP must send it (CLIENT_TOKEN_HEADER); None: any local client may.
    client_token: str | None = None
    # Routed log files (LOG_ROUTE_HEADER) must lie under it; None: every request logs to log_path.
    log_root: Path | None = None
    # Each log line passes through it (the session's redactor) before it is written.
    redact: Callable[[str], str] | None = None

    def __post_init__(self) -> None:
        url = URL(self.upstream)
        if url.scheme not in ("http", "https") or not url.host or url.query_string:
            raise ValueError(f"upstream must be an http(s) URL without a query: {self.upstream}")
        if not self.request_deadline_s > 0:
            raise ValueError("request_deadline_s must be > 0")
        if self.max_attempts < 1 or self.max_redirects < 0:
            raise ValueError("max_attempts must be >= 1 and max_redirects >= 0")
        if self.backoff_initial_s < 0 or self.backoff_max_s < 0:
            raise ValueError("backoff times must be >= 0")
        if self.upstream_proxy is not None and URL(self.upstream_proxy).scheme != "http":
            raise ValueError(f"upstream_proxy must be an http:// URL: {self._proxy_shown()}")
        # A read-only copy: the caller's dict must not change what a running proxy sends.
        object.__setattr__(self, "inject_headers", MappingProxyType(dict(self.inject_headers)))
        if self.log_path is not None:
            object.__setattr__(self, "log_path", Path(self.log_path))
        if self.log_root is not None:
            object.__setattr__(self, "log_root", Path(self.log_root).resolve())

    def __repr__(self) -> str:
        headers = {name: "<redacted>" for name in self.inject_headers}
        return (
            f"ProxySettings(upstream={self.upstream!r}, inject_headers={headers!r}, "
            f"request_deadline_s={self.request_deadline_s!r}, max_attempts={self.max_attempts!r}, "
            f"max_redirects={self.max_redirects!r}, backoff_initial_s={self.backoff_initial_s!r}, "
            f"backoff_max_s={self.backoff_max_s!r}, log_path={self.log_path!r}, "
            f"upstream_proxy={self._proxy_shown()!r}, "
            f"client_token={'<redacted>' if self.client_token else None!r}, "
            f"log_root={self.log_root!r})"
        )

    def _proxy_shown(self) -> str | None:
        """The upstream proxy without its credentials."""
        return (
            None if self.upstream_proxy is None else str(URL(self.upstream_proxy).with_user(None))
        )


def settings_from_env(upstream: str, **kw: Any) -> ProxySettings:
    """Settings whose injected headers come from the environment (unset or empty vars are skipped).

    ``MODAL_PROXY_TOKEN_ID`` -> ``Modal-Key``, ``MODAL_PROXY_TOKEN_SECRET`` -> ``Modal-Secret``,
    ``VLLM_API_KEY`` -> ``Authorization: Bearer ...``. An ``inject_headers`` keyword adds to or
    overrides these; other keywords go to :class:`ProxySettings`. The upstream proxy, unless
    given, is the one the environment names for the upstream (``HTTPS_PROXY`` & co.).
    """
    headers: dict[str, str] = {}
    for var, header, template in (
        ("MODAL_PROXY_TOKEN_ID", "Modal-Key", "{}"),
        ("MODAL_PROXY_TOKEN_SECRET", "Modal-Secret", "{}"),
        ("VLLM_API_KEY", "Authorization", "Bearer {}"),
    ):
        if value := os.environ.get(var, "").strip():
            headers[header] = template.format(value)
    headers.update(kw.pop("inject_headers", {}))
    kw.setdefault("upstream_proxy", env_proxy(upstream, os.environ))
    return ProxySettings(upstream, inject_headers=headers, **kw)


class _RequestLog:
    """Per-file buffered log lines; written from a worker thread so the event loop never waits."""

    def __init__(self, default: Path | None) -> None:
        self._default = default
        self._pending: dict[Path, list[str]] = {}
        self._pending_lock = threading.Lock()  # in-process callers add from their own thread
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def add(self, path: Path | None, line: str) -> None:
        target = path or self._default
        if target is not None:
            with self._pending_lock:
                self._pending.setdefault(target, []).append(line + "\n")

    async def close(self) -> None:
        # Let the writer do the final flush itself, so batches never race on one file.
        self._stopping.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), _FLUSH_INTERVAL_S)
            with self._pending_lock:
                batch, self._pending = self._pending, {}
            if batch:
                await asyncio.to_thread(self._write, batch)

    @staticmethod
    def _write(batch: dict[Path, list[str]]) -> None:
        for path, lines in batch.items():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as fh:
                    fh.write("".join(lines))
            except OSError as exc:  # a bad log path must not take requests down with it
                _logger.warning("proxy: cannot append to %s: %s", path, exc)


def _log_route(value: str | None, root: Path | None) -> Path | None:
    """The routed log file, or None (default log) for a missing or unacceptable header: only an
    absolute ``.../proxy.log`` under ``root`` (the output directory) is taken, so no client can
    make the proxy append to a file of its choosing."""
    if not value:
        return None
    path = Path(value)
    if (
        root is not None
        and path.is_absolute()
        and path.name == _LOG_NAME
        and ".." not in path.parts
        and path.resolve().is_relative_to(root)
    ):
        return path
    _logger.warning(
        "proxy: ignoring %s (want an absolute .../%s under %s): %r",
        LOG_ROUTE_HEADER,
        _LOG_NAME,
        root,
        value,
    )
    return None


def _error(status: int, kind: str, message: str) -> web.Response:
    """An OpenAI-shaped error body, so clients surface the message instead of a parse error."""
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status)


def _deadline_error(deadline_s: float, outcome: _Outcome) -> web.Response:
    response = _error(
        504,
        "proxy_deadline",
        f"no response from upstream within the request deadline of "
        f"{deadline_s:g} s ({outcome.hops} redirect hops, {outcome.attempts} attempts)",
    )
    # The deadline is the client's whole budget for the request: a retry would spend it again.
    response.headers["x-should-retry"] = "false"
    return response


def _deadline_of(s: ProxySettings, headers: Mapping[str, str]) -> float:
    """The client's deadline (``X-Modal-Eval-Deadline``), else the proxy's default."""
    raw = next((v for k, v in headers.items() if k.lower() == _DEADLINE_KEY), None)
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        value = math.nan
    return value if math.isfinite(value) and value > 0 else s.request_deadline_s


class _UpstreamHeaders(CIMultiDict[str]):
    """The headers sent upstream, secrets included: their repr shows names only, so a
    traceback with locals (``pytest -l``) cannot print them."""

    def __repr__(self) -> str:
        return f"<_UpstreamHeaders({', '.join(self.keys())}: values not shown)>"


@dataclass
class _Outcome:
    status: str = "cancelled"  # stays so if the client disconnects or the proxy stops
    hops: int = 0
    attempts: int = 1


class ModalProxy:
    """The proxy itself, for use inside a running asyncio event loop."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.url: str | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._log: _RequestLog | None = None
        self._via, self._via_headers = aiohttp_options(settings.upstream_proxy, settings.upstream)
        self.http_requests = 0  # requests that came over HTTP (not through forward())

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start listening; return the base URL (``http://127.0.0.1:PORT``)."""
        if self._runner is not None:
            raise RuntimeError("proxy already started")
        # One pooled session for all requests, with no connection cap: the evaluation's own
        # concurrency is the limit, not the proxy.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=_UPSTREAM_TIMEOUT,
            auto_decompress=False,  # pass bytes through untouched, Content-Encoding and all
            trust_env=False,
        )
        self._log = _RequestLog(self.settings.log_path)
        self._log.start()
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: stop chasing the upstream once the client has hung up.
        # shutdown_timeout: stop() must not wait minutes for in-flight long polls.
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=0.5,
        )
        try:
            await self._runner.setup()
            await web.TCPSite(self._runner, host, port).start()
        except BaseException:
            await self.stop()
            raise
        bound = self._runner.addresses[0][1]
        self.url = f"http://[{host}]:{bound}" if ":" in host else f"http://{host}:{bound}"
        _IN_PROCESS[self.url] = self
        return self.url

    async def stop(self) -> None:
        """Stop listening, cut in-flight requests (within ~1 s), close upstream connections and
        flush the log. Safe to call twice. Requests handed over with :meth:`forward` are not
        cut: they run on their caller's loop and end with it."""
        if self.url is not None and _IN_PROCESS.get(self.url) is self:
            del _IN_PROCESS[self.url]
        # In this order: handlers still running during cleanup need the session and the log.
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        log, self._log = self._log, None
        if log is not None:
            await log.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.http_requests += 1
        token = self.settings.client_token
        if token is not None and not hmac.compare_digest(
            request.headers.get(CLIENT_TOKEN_HEADER, "").encode(), token.encode()
        ):
            return _error(
                401,
                "proxy_auth",
                f"this proxy serves only its own session: send its {CLIENT_TOKEN_HEADER}",
            )
        route = request.headers.get(LOG_ROUTE_HEADER)
        with self._logged(request.method, request.rel_url.raw_path, route) as outcome:
            try:
                target = forwarded_target(request.raw_path)
            except ForwardRefused as exc:
                return self._refused(exc, outcome)
            return await self._proxy(request, target, outcome)

    @staticmethod
    def _refused(exc: ForwardRefused, outcome: _Outcome) -> web.Response:
        """The answer to a request whose path is not forwarded (see ``serving.forwarding``)."""
        _logger.warning("proxy: request refused: %s", exc)
        outcome.status = str(exc.status)
        return _error(exc.status, "proxy_refused", f"not forwarded: {exc}")

    async def forward(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path_qs: str,
        headers: Mapping[str, str],
        body: bytes,
    ) -> tuple[int, tuple[tuple[bytes, bytes], ...], bytes]:
        """One request as the proxy would relay it, sent on the caller's session from the
        caller's event loop (any thread): follows the 303s, retries, injects the secrets, keeps
        the deadline and logs the line. Returns the status, headers and whole body (read, not
        streamed). What the client would see over HTTP, it sees here: a transport error for a
        body cut short, a 5xx for the proxy's own failures.

        ``headers`` are the ones a client would send the proxy, log route included. The session
        must pass bodies through undecoded (``auto_decompress=False``), as the proxy's own does.
        A stopped proxy refuses, as its closed port would; requests already handed over are
        not cut by :meth:`stop` but end with their caller.
        """
        if self._runner is None:
            raise aiohttp.ClientConnectionError(f"the proxy at {self.url} has stopped")
        if session.auto_decompress:
            raise ValueError("ModalProxy.forward needs a session with auto_decompress=False")
        route = next((v for k, v in headers.items() if k.lower() == _ROUTE_KEY), None)
        try:
            target = forwarded_target(path_qs)
        except ForwardRefused as exc:
            shown = urllib.parse.quote(str(path_qs).partition("?")[0], safe="/%:@")
            with self._logged(method, shown, route) as outcome:
                made = self._refused(exc, outcome)
            assert isinstance(made.body, bytes)
            return made.status, _raw(made.headers), made.body
        url, upstream_headers = self._upstream_request(target, headers)
        deadline_s = _deadline_of(self.settings, headers)
        with self._logged(method, target[0], route) as outcome:
            deadline = asyncio.timeout(deadline_s)
            answered = False
            try:
                async with deadline:
                    upstream = await send_upstream(
                        session, self.settings, method, url, upstream_headers, body, outcome,
                        via=self._via,
                    )  # fmt: skip
                    if isinstance(upstream, web.Response):
                        made = upstream
                    else:
                        async with upstream:
                            outcome.status, answered = str(upstream.status), True
                            try:
                                content = await upstream.read()
                            except (aiohttp.ClientError, ConnectionError) as exc:
                                outcome.status += f"+{type(exc).__name__}"
                                raise
                        return upstream.status, _raw(_relay_headers(upstream)), content
            except TimeoutError:
                if not deadline.expired():
                    raise
                if answered:  # over HTTP the body would be cut: the same failure here
                    outcome.status += "+deadline"
                    raise aiohttp.ClientPayloadError(
                        f"the proxy's request deadline of {deadline_s:g} s "
                        "passed while the answer was being read"
                    ) from None
                made = _deadline_error(deadline_s, outcome)
            except (aiohttp.ClientError, ConnectionError):
                raise
            except Exception as exc:  # over HTTP, the proxy's server would answer 500
                _logger.exception("proxy: request failed")
                made = _error(500, "proxy_error", f"{type(exc).__name__}: {exc}")
            outcome.status = str(made.status)
            assert isinstance(made.body, bytes)
            return made.status, _raw(made.headers), made.body

    @contextlib.contextmanager
    def _logged(self, method: str, raw_path: str, route: str | None) -> Iterator[_Outcome]:
        """The request's outcome, written as one log line when the request is over."""
        started = time.perf_counter()
        outcome = _Outcome()
        try:
            yield outcome
        except asyncio.CancelledError:
            # The client hung up or the proxy is stopping; the bare status would hide that.
            if outcome.status != "cancelled":
                outcome.status += "+cancelled"
            raise
        finally:
            log = self._log  # once: stop() may clear it from another thread
            if log is not None:
                stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
                # raw_path keeps the path percent-encoded (one line, no spaces) and the query off.
                line = (
                    f"{stamp} {method} {raw_path} status={outcome.status}"
                    f" hops={outcome.hops} attempts={outcome.attempts}"
                    f" latency_ms={(time.perf_counter() - started) * 1000:.0f}"
                )
                redact = self.settings.redact
                log.add(
                    _log_route(route, self.settings.log_root),
                    line if redact is None else redact(line),
                )

    def _upstream_request(
        self, target: tuple[str, str], client_headers: Mapping[str, str]
    ) -> tuple[URL, _UpstreamHeaders]:
        """The upstream URL, built from its parts, and headers for a client's request to
        ``target`` (its path and query, checked by ``serving.forwarding``)."""
        s = self.settings
        headers = _UpstreamHeaders(
            (k, v) for k, v in client_headers.items() if k.lower() not in _DROP_FROM_CLIENT
        )
        headers.update(s.inject_headers)  # replaces the client's placeholder Authorization
        headers.update(self._via_headers)  # an upstream proxy's credentials, for plain http
        # Without this aiohttp asks for gzip, which we would pass on to a client that never did.
        headers.setdefault("Accept-Encoding", "identity")
        upstream = URL(s.upstream)
        path, query = target
        url = URL.build(
            scheme=upstream.scheme,
            authority=upstream.raw_authority,
            path=upstream.raw_path.rstrip("/") + path,
            query_string=query,
            encoded=True,
        )
        return url, headers

    async def _proxy(
        self, request: web.Request, target: tuple[str, str], outcome: _Outcome
    ) -> web.StreamResponse:
        s = self.settings
        body = await request.read()  # buffered: a retry must resend it
        url, headers = self._upstream_request(target, request.headers)
        assert self._session is not None
        deadline_s = _deadline_of(s, request.headers)
        deadline = asyncio.timeout(deadline_s)
        response: web.StreamResponse | None = None
        try:
            async with deadline:
                upstream = await send_upstream(
                    self._session, s, request.method, url, headers, body, outcome, via=self._via
                )
                if isinstance(upstream, web.Response):
                    outcome.status = str(upstream.status)
                    return upstream
                async with upstream:
                    outcome.status = str(upstream.status)
                    response = web.StreamResponse(
                        status=upstream.status,
                        reason=upstream.reason,
                        headers=_relay_headers(upstream),
                    )
                    await response.prepare(request)
                    # iter_any hands over whatever has arrived, so SSE events are not held back.
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                    await response.write_eof()
                    return response
        except TimeoutError:
            if not deadline.expired():
                raise
            if response is None:
                outcome.status = "504"
                return _deadline_error(deadline_s, outcome)
            outcome.status += "+deadline"
        except (aiohttp.ClientError, ConnectionError) as exc:
            if response is None:  # not from streaming, so not ours to handle
                raise
            outcome.status += f"+{type(exc).__name__}"
        # Headers are already sent, so no error status is possible. Drop the connection rather
        # than end the body cleanly: a truncated answer must look like a failure to the client.
        request.protocol.force_close()
        return response


async def send_upstream(
    session: aiohttp.ClientSession,
    s: ProxySettings,
    method: str,
    url: URL,
    headers: CIMultiDict[str],
    body: bytes,
    outcome: _Outcome,
    *,
    via: Mapping[str, Any],
) -> aiohttp.ClientResponse | web.Response:
    """Send, follow Modal's 303s and retry transient failures; ``via`` are the request options
    of an HTTP proxy on the way. Returns the response to relay (body unread) or an error the
    proxy made up."""
    # A failed fetch of a call's result, kept because Modal hands a result out only once:
    # if that failure *was* the result, the retry finds nothing and this is the real answer.
    failed_fetch: web.Response | None = None
    while True:
        retry_after: str | None = None
        try:
            resp = await session.request(
                method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                timeout=_UPSTREAM_TIMEOUT,
                **via,
            )
        except aiohttp.ClientConnectionError as exc:  # refused, reset, disconnected
            if outcome.attempts >= s.max_attempts:
                return _error(
                    502,
                    "proxy_upstream_unreachable",
                    f"upstream connection failed after {outcome.attempts} attempts: "
                    f"{type(exc).__name__}: {exc}",
                )
        except aiohttp.ClientError as exc:  # e.g. a malformed response: retrying won't help
            return _error(502, "proxy_upstream_error", f"{type(exc).__name__}: {exc}")
        else:
            try:
                target = _redirect_target(url, resp)
            except ValueError as exc:  # a Location that is not a URL
                resp.release()
                return _error(502, "proxy_upstream_error", f"bad redirect Location: {exc}")
            if target is not None:
                resp.release()
                outcome.hops += 1
                if outcome.hops > s.max_redirects:
                    return _error(
                        502,
                        "proxy_redirects",
                        f"upstream still redirecting after {s.max_redirects} hops",
                    )
                # Modal's protocol: GET the result URL with no body; a retry from here on
                # repeats this GET, never the original POST.
                method, url, body = "GET", target, b""
                headers = headers.copy()
                for name in _BODY_HEADERS:
                    headers.popall(name, None)
                failed_fetch = None
                continue
            if failed_fetch is not None and resp.status in (404, 410):
                resp.release()
                return failed_fetch
            if not (resp.status == 429 or resp.status >= 500):
                return resp
            if outcome.attempts >= s.max_attempts:
                return resp  # the client gets the upstream's own last answer
            retry_after = resp.headers.get("Retry-After")
            if outcome.hops:
                failed_fetch = web.Response(
                    status=resp.status,
                    reason=resp.reason,
                    body=await resp.read(),
                    headers=_relay_headers(resp, "content-length"),
                )
            resp.release()
        delay = _backoff(s, outcome.attempts, retry_after)
        outcome.attempts += 1
        await asyncio.sleep(delay)


def _relay_headers(resp: aiohttp.ClientResponse, *drop: str) -> CIMultiDict[str]:
    """The upstream's response headers that make sense to pass on to the client."""
    skip = _HOP_BY_HOP.union(drop)
    return CIMultiDict((k, v) for k, v in resp.headers.items() if k.lower() not in skip)


def _raw(headers: Mapping[str, str]) -> tuple[tuple[bytes, bytes], ...]:
    """Headers as aiohttp's ``raw_headers`` has them (it decodes them as UTF-8, keeping any
    other byte as a surrogate, so this gives back the bytes that came)."""
    return tuple(
        (k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape"))
        for k, v in headers.items()
    )


def _redirect_target(current: URL, resp: aiohttp.ClientResponse) -> URL | None:
    """Where to GET next, for a 303; None for an answer to relay as it is.

    A redirect (any 3xx) whose ``Location``, absolute or relative, leads off the upstream's
    origin or to a path that is not plain (``serving.forwarding``) is a ValueError: neither
    the injected secrets nor the client (OpenAI's clients follow redirects) may be sent to
    another host or port.
    """
    location = resp.headers.get("Location")
    if not 300 <= resp.status < 400 or not location:
        return None
    target = current.join(URL(location, encoded=True))
    if target.origin() != current.origin():
        raise ValueError(f"{ascii(location)[:200]} leads off the upstream's origin")
    forwarded_target(target.raw_path_qs)
    return target if resp.status == 303 else None


def _backoff(s: ProxySettings, attempt: int, retry_after: str | None) -> float:
    """Seconds before retry number ``attempt``: Retry-After (in seconds) if given, else
    exponential with jitter, so a crowd of failed requests does not return in lockstep."""
    if retry_after is not None:
        with contextlib.suppress(ValueError):
            seconds = float(retry_after)
            if math.isfinite(seconds) and seconds >= 0:
                return min(seconds, s.backoff_max_s)
    ceiling = min(s.backoff_max_s, s.backoff_initial_s * 2 ** (attempt - 1))
    return random.uniform(ceiling / 2, ceiling)


class ProxyThread:
    """A :class:`ModalProxy` in a daemon thread with its own event loop, for synchronous code."""

    def __init__(self, settings: ProxySettings, host: str = "127.0.0.1", port: int = 0) -> None:
        self.settings = settings
        self.url: str | None = None
        self._host, self._port = host, port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._lock = threading.Lock()
        self.proxy: ModalProxy | None = None  # once started

    def start(self) -> str:
        """Start the proxy; block until it accepts connections and return its URL. Startup
        errors (e.g. the port is taken) are raised here."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("ProxyThread can be started only once")
            ready: concurrent.futures.Future[str] = concurrent.futures.Future()
            self._thread = threading.Thread(
                target=asyncio.run, args=(self._main(ready),), name="modal-eval-proxy", daemon=True
            )
            self._thread.start()
        self.url = ready.result()
        return self.url

    def stop(self) -> None:
        """Stop the proxy (in-flight requests are cut within ~1 s), flush its log and join the
        thread. Idempotent, and a no-op if never started."""
        with self._lock:
            thread, loop, event = self._thread, self._loop, self._stop_event
            if thread is None:
                return
            if loop is not None and event is not None:
                with contextlib.suppress(RuntimeError):  # the loop is already closed
                    loop.call_soon_threadsafe(event.set)
        thread.join()

    def __enter__(self) -> ProxyThread:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def _main(self, ready: concurrent.futures.Future[str]) -> None:
        proxy = self.proxy = ModalProxy(self.settings)
        try:
            url = await proxy.start(self._host, self._port)
        except Exception as exc:
            ready.set_exception(exc)
            return
        self._stop_event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        ready.set_result(url)
        try:
            await self._stop_event.wait()
        finally:
            await proxy.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_modal_eval.serving.modal.redirect_proxy",
        description="Local proxy that follows Modal's 303 protocol and injects auth headers. "
        "Secrets come only from MODAL_PROXY_TOKEN_ID, MODAL_PROXY_TOKEN_SECRET and VLLM_API_KEY; "
        f"with {CLIENT_TOKEN_ENV} set, clients must send it as {CLIENT_TOKEN_HEADER}.",
    )
    parser.add_argument("--upstream", required=True, metavar="URL", help="endpoint base URL")
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        metavar="N",
        help="port on 127.0.0.1 (default: 0, any free port)",
    )
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        metavar="FILE",
        help="default request log file (default: none)",
    )
    parser.add_argument(
        "--log-root",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"accept {LOG_ROUTE_HEADER} routes to .../proxy.log files under DIR only "
        "(default: none, every line goes to --log)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=7200.0,
        metavar="S",
        help="per-request deadline in seconds (default: 7200)",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=5,
        metavar="N",
        help="attempts per request, first one included (default: 5)",
    )
    args = parser.parse_args(argv)
    try:
        settings = settings_from_env(
            args.upstream,
            log_path=args.log,
            log_root=args.log_root,
            client_token=os.environ.get(CLIENT_TOKEN_ENV) or None,
            request_deadline_s=args.deadline,
            max_attempts=args.max_attempts,
            redact=Redactor.from_environ().text,
        )
    except ValueError as exc:
        parser.error(str(exc))
    return asyncio.run(_serve(settings, args.port))


async def _serve(settings: ProxySettings, port: int) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    proxy = ModalProxy(settings)
    url = await proxy.start(port=port)
    try:
        # The URL line is the readiness signal for whoever started us.
        print(f"pytest-modal-eval proxy listening on {url}", flush=True)
        await stop.wait()
    finally:
        await proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

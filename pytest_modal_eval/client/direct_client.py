"""The one request verifiers makes per rollout, sent straight over aiohttp.

verifiers' chat client (``OpenAIChatCompletionsClient``) sends each rollout's request with
``AsyncOpenAI.post(path, body=..., cast_to=httpx.Response, options={"headers": ...})`` and
reads the raw bytes back. Through the SDK that call builds options and an httpx request, merges
headers, parses the URL and hands the request to aiohttp through a transport adapter: ~0.8 ms
of CPU per request, as much as everything else verifiers does for a single-turn rollout, and at
64 requests in flight that CPU is what held a run below the server's pace (see README,
Performance). :class:`DirectOpenAI` takes that call's place and sends the request on one
aiohttp session itself; everything else it is asked for goes to the real ``AsyncOpenAI``.

What stays as the SDK does it, so verifiers sees no difference (tests/test_direct_client.py
checks each against the SDK on the same server): the headers (the SDK's own default and auth
headers plus the call's), the JSON body bytes, the answer's decoding (httpx reads its
``Content-Encoding``), the timeouts (5 s to connect, the request timeout
between reads), which answers are retried (connection failures, timeouts, 408, 409, 429, 5xx,
or as ``x-should-retry`` says), the wait before a retry (``retry-after-ms``/``Retry-After`` up to
two minutes, else 0.5 s doubling to 8 s, less up to 25 % jitter), and the error raised at the end
(openai's own ``BadRequestError``, ``AuthenticationError``, ... with the same message and body,
``APITimeoutError``, ``APIConnectionError``), which verifiers' error handling depends on, and
the HTTP proxy the environment names for the endpoint (as httpx reads ``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY``; read from the SDK's own client).
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import json
import math
import os
import random
import sys
import time
from collections.abc import Mapping
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import aiohttp
from yarl import URL

from pytest_modal_eval.client.answer_journal import (
    Answer,
    AnswerJournal,
    RawHeaders,
    current_example,
    request_key,
)
from pytest_modal_eval.client.observe import current_observer, current_rollout
from pytest_modal_eval.client.send_order import SendsFirst, trace_config
from pytest_modal_eval.exceptions import DirectClientError
from pytest_modal_eval.serving.env_proxy import ProxyOptions, aiohttp_options, env_proxy

if TYPE_CHECKING:
    from pytest_modal_eval.client.workers import Intake
    from pytest_modal_eval.serving.modal.redirect_proxy import ModalProxy

#: Seconds to open a connection (the SDK's and verifiers' default).
CONNECT_TIMEOUT_S = 5.0
#: The SDK's backoff: 0.5 s doubling to at most 8 s; a server may ask for up to two minutes.
INITIAL_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0
MAX_RETRY_AFTER_S = 120.0
RETRY_STATUSES = frozenset({408, 409, 429})

#: Where the current rollout's requests add the seconds they waited for a free request slot
#: (set around each model call by the adapter's client).
slot_waits: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "pytest_modal_eval_slot_waits", default=None
)


class DirectOpenAI:
    """Stands in for the ``AsyncOpenAI`` verifiers' chat client posts through.

    ``post`` with a raw-response ``cast_to`` and at most per-call headers is sent here; any
    other call, and every attribute verifiers might read, is the wrapped SDK client's.
    """

    def __init__(
        self,
        sdk: Any,
        *,
        request_timeout: float,
        max_connections: int,
        http: Any,
        max_in_flight: int | None = None,
        journal: AnswerJournal | None = None,
        base_url: str | None = None,
        max_retries: int | None = None,
        headers: Mapping[str, str] | None = None,
        intake: Intake | None = None,
    ) -> None:
        """``max_in_flight`` caps the requests waiting for an answer (default: the connections);
        with a ``journal``, answers are recorded as they arrive and replayed after a resume;
        an ``intake`` is asked before each request is written whether its example may send.

        Without an SDK client (``sdk`` None: the bundled environments' own runner, which
        imports no SDK) ``base_url``, ``max_retries`` and ``headers`` say what the SDK would
        have held, and the proxy is the environment's (:func:`~.env_proxy.env_proxy`)."""
        self._sdk = sdk
        self._intake = intake
        self._in_flight = asyncio.Semaphore(max_in_flight or max_connections)
        self._order = SendsFirst()
        self._journal = journal
        self._http = http  # the httpx flavour the SDK is built on (for its Request/Response)
        self._base = str(sdk.base_url if sdk is not None else base_url).rstrip("/") + "/"
        self._max_retries: int = sdk.max_retries if sdk is not None else (max_retries or 0)
        self._raw_types = _raw_response_types(http)
        given = {**sdk.default_headers, **sdk.auth_headers} if sdk is not None else headers or {}
        self._headers = {
            name: value
            for name, value in given.items()
            if isinstance(value, str)  # the SDK's Omit() markers mean "send no such header"
        }
        self._timeout = aiohttp.ClientTimeout(
            sock_connect=CONNECT_TIMEOUT_S, sock_read=request_timeout, connect=request_timeout
        )
        self._max_connections = max_connections
        self._request_timeout = request_timeout
        # The proxy the SDK would use (HTTP(S)_PROXY, ALL_PROXY, NO_PROXY); None: unknown, so
        # the SDK sends everything itself.
        if sdk is None:
            found: ProxyOptions | None = aiohttp_options(
                env_proxy(self._base, os.environ), self._base
            )
        else:
            found = sdk_proxy(sdk, self._base, http)
        if found is None:
            # Sending through the SDK instead would skip the in-flight cap and the answer
            # journal without a word: refuse, and say what to change.
            raise DirectClientError(
                f"cannot send requests to {self._base} the way the openai client would: it "
                "goes through an HTTP proxy from the environment (HTTP_PROXY, HTTPS_PROXY, "
                "ALL_PROXY) that only openai's aiohttp transport reveals. Install it "
                "(`pip install 'openai[aiohttp]'`), or exempt the endpoint with NO_PROXY."
            )
        self._env_proxy = found[0]
        self._headers.update(found[1])
        self._session: aiohttp.ClientSession | None = None
        # A proxy running in this process is handed the request itself (its logic, not its
        # port). Without its module loaded, no proxy runs here.
        proxy_module = sys.modules.get("pytest_modal_eval.serving.modal.redirect_proxy")
        self._proxy: ModalProxy | None = None
        if proxy_module is not None:
            self._proxy = proxy_module.in_process(self._base)
        self._base_path = URL(self._base).raw_path  # "/v1/": what the proxy is asked for
        # Who watches each request (traces), as the run that opened this client says.
        self._observer = current_observer.get()

    def __getattr__(self, name: str) -> Any:
        if name == "_sdk" or self._sdk is None:
            raise AttributeError(name)
        return getattr(self._sdk, name)

    async def post(
        self,
        path: str,
        *,
        body: Any = None,
        cast_to: Any,
        options: Mapping[str, Any] | None = None,
        **rest: Any,
    ) -> Any:
        options = options or {}
        if rest or cast_to not in self._raw_types or set(options) - {"headers"}:
            if path.rstrip("/").endswith("/chat/completions"):
                # A rollout's request in a shape this client does not send (another verifiers
                # version): through the SDK it would bypass the in-flight cap and the journal.
                raise DirectClientError(
                    f"verifiers posted {path} with cast_to={getattr(cast_to, '__name__', cast_to)}"
                    f", options {sorted(options)} and {sorted(rest)}: not the raw request "
                    "pytest-modal-eval sends itself. This verifiers version is not supported; "
                    "install the version pyproject.toml pins."
                )
            if self._sdk is None:
                raise DirectClientError(f"{path}: only raw JSON posts are sent without an SDK")
            return await self._sdk.post(path, body=body, cast_to=cast_to, options=options, **rest)
        headers = self._headers
        if extra := options.get("headers"):
            headers = {**headers, **extra}
            headers = {name: value for name, value in headers.items() if isinstance(value, str)}
        url, data = self._base + path.lstrip("/"), dumps(body)
        if self._observer is None:
            return (await self._answer(path, url, headers, data))[0]
        watch = self._observer.model_request(url, body, current_rollout.get())
        try:
            answer, replayed = await self._answer(path, url, headers, data)
        except BaseException as exc:
            watch.failed(exc)
            raise
        watch.answered(answer.status_code, answer.content, replayed)
        return answer

    async def _answer(
        self, path: str, url: str, headers: dict[str, str], data: bytes
    ) -> tuple[Any, bool]:
        """The answer to a request, and whether it was replayed from the journal."""
        example = current_example.get()
        if self._journal is None:
            return await self._send(url, headers, data, example), False
        # The path, not the URL: a resumed run may reach the same server on another port.
        key = request_key(path, data)
        stored = self._journal.replay(example, key)
        if stored is not None:  # answered before the run was interrupted: not sent again
            replayed = self._http.Response(
                stored.status, headers=list(stored.raw_headers), content=stored.content
            )
            return replayed, True
        return await self._send(url, headers, data, example, (example, key)), False

    async def post_json(self, path: str, body: Any) -> Any:
        """``body`` posted to ``path`` (relative to the base URL), as verifiers' chat client
        posts a rollout's request: the answer as the HTTP library's ``Response``."""
        return await self.post(path, body=body, cast_to=self._http.Response, options={})

    async def _send(
        self,
        url: str,
        headers: dict[str, str],
        data: bytes,
        example: int | None,
        journal_entry: tuple[int | None, str] | None = None,
    ) -> Any:
        session = self._session or self._open()
        retries_taken = 0
        while True:
            try:
                queued = time.monotonic()
                async with self._in_flight:
                    if self._intake is not None and not self._intake.may_send(example):
                        # The run needs no more examples and this one sent nothing: its
                        # worker is being cancelled; end the request unsent.
                        raise asyncio.CancelledError
                    if (waits := slot_waits.get()) is not None:
                        waits.append(time.monotonic() - queued)
                    with self._order.sending():
                        exchange = self._exchange(session, url, headers, data)
                        status, raw_headers, content = await exchange
                ok = 200 <= status < 300
                if ok and self._journal is not None and journal_entry is not None:
                    # Recorded as it arrives, before it waits for its turn (see below).
                    self._record(journal_entry, status, raw_headers, content)
                # The requests waiting for the slot this answer freed go out first.
                await self._order.answered()
            except (aiohttp.ClientError, TimeoutError) as exc:
                if retries_taken < self._max_retries:
                    await asyncio.sleep(retry_delay(retries_taken, None))
                    retries_taken += 1
                    continue
                raise self._transport_error(url, exc) from exc
            if ok:
                return self._http.Response(status, headers=raw_headers, content=content)
            response = self._http.Response(
                status, headers=raw_headers, content=content, request=self._request(url)
            )
            if retries_taken < self._max_retries and should_retry(status, response.headers):
                await asyncio.sleep(retry_delay(retries_taken, response.headers))
                retries_taken += 1
                continue
            raise status_error(response)

    def _record(
        self, entry: tuple[int | None, str], status: int, raw_headers: RawHeaders, content: bytes
    ) -> None:
        """Journal an answer, decoded as the client reads it (the journal redacts its text)."""
        assert self._journal is not None
        if any(name.lower() == b"content-encoding" for name, _ in raw_headers):
            try:
                content = self._http.Response(status, headers=raw_headers, content=content).content
            except self._http.DecodingError:
                return  # not journaled; the caller gets the error as the answer is read
        self._journal.record(*entry, Answer(status, raw_headers, content))

    async def _exchange(
        self, session: aiohttp.ClientSession, url: str, headers: dict[str, str], data: bytes
    ) -> tuple[int, RawHeaders, bytes]:
        """One attempt: the answer's status, raw headers and body."""
        if self._proxy is not None:
            # The request timeout bounds the whole exchange: over HTTP, the proxy sends nothing
            # back before the upstream's final answer (rollout requests are not streamed).
            async with asyncio.timeout(self._request_timeout):
                path_qs = self._base_path + url[len(self._base) :]
                return await self._proxy.forward(session, "POST", path_qs, headers, data)
        async with session.post(
            url,
            data=data,
            headers=headers,
            timeout=self._timeout,
            allow_redirects=False,
            **(self._env_proxy or {}),
        ) as answer:
            return answer.status, answer.raw_headers, await answer.read()

    def _open(self) -> aiohttp.ClientSession:
        # Opened on first use, inside the event loop that runs the requests. The body is kept
        # as sent: the httpx Response it becomes decodes Content-Encoding, as the SDK's does.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._max_connections),
            auto_decompress=False,
            trace_configs=[trace_config()],
        )
        return self._session

    def _request(self, url: str) -> Any:
        return self._http.Request("POST", url)

    def _transport_error(self, url: str, exc: BaseException) -> Exception:
        import openai

        if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
            return openai.APITimeoutError(request=self._request(url))
        return openai.APIConnectionError(request=self._request(url))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._sdk is not None:
            await self._sdk.close()


def open_direct_client(
    base_url: str,
    *,
    api_key: str | None,
    headers: Mapping[str, str],
    request_timeout: float,
    max_retries: int,
    max_connections: int,
    max_in_flight: int | None = None,
    journal: AnswerJournal | None = None,
    intake: Intake | None = None,
) -> DirectOpenAI:
    """An ``AsyncOpenAI`` for ``base_url`` (:func:`open_sdk_client`) and the
    :class:`DirectOpenAI` that sends its requests.

    :class:`DirectOpenAI` sends each rollout's request with exactly the SDK client's key,
    headers, retries and timeouts and passes every other call to it.
    """
    return DirectOpenAI(
        open_sdk_client(
            base_url,
            api_key=api_key,
            headers=headers,
            request_timeout=request_timeout,
            max_retries=max_retries,
            max_connections=max_connections,
        ),
        request_timeout=request_timeout,
        max_connections=max_connections,
        http=sdk_http(),
        max_in_flight=max_in_flight,
        journal=journal,
        intake=intake,
    )


def open_plain_client(
    base_url: str,
    *,
    api_key: str | None,
    headers: Mapping[str, str],
    request_timeout: float,
    max_retries: int,
    max_connections: int,
    max_in_flight: int | None = None,
    journal: AnswerJournal | None = None,
    intake: Intake | None = None,
) -> DirectOpenAI:
    """A :class:`DirectOpenAI` with no SDK client behind it: the same sending, retries,
    in-flight cap, journal and errors (openai's exceptions, imported when one is raised), with
    the headers a plain JSON client sends (``Authorization: Bearer`` the key, or ``EMPTY`` as
    verifiers sends without one)."""
    from importlib.metadata import version

    return DirectOpenAI(
        None,
        request_timeout=request_timeout,
        max_connections=max_connections,
        http=sdk_http(),
        max_in_flight=max_in_flight,
        journal=journal,
        intake=intake,
        base_url=base_url,
        max_retries=max_retries,
        headers={
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": f"pytest-modal-eval/{version('pytest-modal-eval')}",
            "Authorization": f"Bearer {api_key or 'EMPTY'}",
            **headers,
        },
    )


def open_sdk_client(
    base_url: str,
    *,
    api_key: str | None,
    headers: Mapping[str, str],
    request_timeout: float,
    max_retries: int,
    max_connections: int,
    sdk_class: Any = None,
) -> Any:
    """An ``AsyncOpenAI`` (or ``sdk_class``, a subclass) for ``base_url`` with the plugin's
    timeouts (5 s to connect, ``request_timeout`` between reads), ``max_retries`` and proxy
    rule (the environment's HTTP(S)_PROXY, never for a loopback address).

    Built on openai's aiohttp transport where it is installed (httpx's connection pool scans
    every connection for every request, which capped a run at ~90 requests/s).
    """
    import openai

    from pytest_modal_eval.serving.endpoint_check import on_loopback

    http = sdk_http()
    http_options: dict[str, Any] = {
        "timeout": http.Timeout(request_timeout, connect=CONNECT_TIMEOUT_S),
        "limits": http.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        "follow_redirects": False,  # as verifiers' client: a redirect is an answer, not a hop
        # HTTP(S)_PROXY from the environment, as the SDK reads it; never for 127.0.0.1 & co.
        "trust_env": not on_loopback(base_url),
    }
    try:
        http_client = openai.DefaultAioHttpClient(**http_options)
    except RuntimeError:  # an openai without its aiohttp transport: fall back to httpx
        http_client = openai.DefaultAsyncHttpxClient(**http_options)
    return (sdk_class or openai.AsyncOpenAI)(
        api_key=api_key or "EMPTY",
        base_url=base_url,
        max_retries=max_retries,
        default_headers=dict(headers),
        http_client=http_client,
    )


def sdk_http() -> Any:
    """The HTTP library openai is built on: httpx2 from openai 3 on, httpx before.

    Read from openai's version, not from what is importable: verifiers 0.4 installs httpx2
    beside openai 2.x, which is built on httpx.
    """
    from importlib.metadata import version

    if int(version("openai").split(".")[0]) < 3:
        import httpx

        return httpx
    import httpx2

    return httpx2


def sdk_proxy(sdk: Any, url: str, http: Any) -> ProxyOptions | None:
    """The proxy the SDK's HTTP client would send ``url``'s requests through, as httpx reads the
    environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), as request
    options (see :func:`http_proxy.aiohttp_options`), or None if the client is not one whose
    choice can be read."""
    client = getattr(sdk, "_client", None)
    pick = getattr(client, "_transport_for_url", None)
    if pick is None:
        return None
    transport = pick(http.URL(url))
    if transport is getattr(client, "_transport", None):
        return {}, {}  # no proxy for this URL
    proxy = getattr(transport, "proxy", None)  # openai's aiohttp transport keeps it here
    if proxy is None:
        return None
    return aiohttp_options(
        str(proxy.url), url, auth=tuple(proxy.auth) if proxy.auth else None, headers=proxy.headers
    )


def dumps(body: Any) -> bytes:
    """JSON as the SDK sends it: compact, UTF-8, no NaN; dates and pydantic models allowed."""
    return json.dumps(
        body, default=_json_default, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode()


def _json_default(value: Any) -> Any:
    import pydantic

    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(exclude_unset=True, mode="json", by_alias=True)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait a server asks for (``retry-after-ms``, then ``Retry-After`` in seconds or as a
    date), or None."""
    for name, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        if delay == math.inf and value.strip().lower() not in ("inf", "+inf", "infinity"):
            return MAX_RETRY_AFTER_S + 1  # an overflowing number: too long, not malformed
        return delay / divisor
    when = email.utils.parsedate_tz(headers.get("retry-after") or "")
    if when is None:
        return None
    try:
        return float(email.utils.mktime_tz(when) - time.time())
    except (OverflowError, ValueError, OSError):
        return None


def should_retry(status: int, headers: Mapping[str, str]) -> bool:
    asked = retry_after_s(headers)
    if asked is not None and math.isfinite(asked) and asked > MAX_RETRY_AFTER_S:
        return False
    explicit = headers.get("x-should-retry")
    if explicit in ("true", "false"):
        return explicit == "true"
    return status in RETRY_STATUSES or status >= 500


def retry_delay(retries_taken: int, headers: Mapping[str, str] | None) -> float:
    asked = retry_after_s(headers) if headers is not None else None
    if asked is not None and math.isfinite(asked) and 0 < asked <= MAX_RETRY_AFTER_S:
        return asked
    backoff = min(INITIAL_RETRY_DELAY_S * 2.0 ** min(retries_taken, 1000), MAX_RETRY_DELAY_S)
    return backoff * (1 - 0.25 * random.random())


def status_error(response: Any) -> Exception:
    """openai's exception for an error answer, with the message and body the SDK gives it."""
    import openai

    message = f"Error code: {response.status_code}"
    body: Any = response.text.strip()
    try:
        body = json.loads(body)
    except ValueError:
        pass
    else:
        details = body.get("error", body) if isinstance(body, Mapping) else None
        detail = details.get("message") if isinstance(details, Mapping) else None
        if isinstance(detail, str) and detail:
            message += f" - {detail}"
    kind = {
        400: openai.BadRequestError,
        401: openai.AuthenticationError,
        403: openai.PermissionDeniedError,
        404: openai.NotFoundError,
        409: openai.ConflictError,
        422: openai.UnprocessableEntityError,
        429: openai.RateLimitError,
    }.get(response.status_code)
    if kind is None:
        kind = openai.InternalServerError if response.status_code >= 500 else openai.APIStatusError
    # The exception carries the "error" object when the body has one, as the SDK's does.
    data = body.get("error", body) if isinstance(body, Mapping) else body
    return kind(message, response=response, body=data)


def _raw_response_types(http: Any) -> tuple[type, ...]:
    """The ``cast_to`` values that ask for the raw HTTP response (httpx's and its successor's)."""
    types: list[type] = [http.Response]
    try:
        import httpx

        types.append(httpx.Response)
    except ImportError:  # pragma: no cover - httpx comes with verifiers
        pass
    return tuple(types)

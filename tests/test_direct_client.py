"""DirectOpenAI against the SDK it stands in for, on a real scripted server on 127.0.0.1.

Each scenario is played twice from the same script: once through ``AsyncOpenAI.post`` (what
verifiers called before) and once through :class:`DirectOpenAI`. The server records every
request; the two runs must send the same requests (headers, body bytes, number of attempts) and
end the same way (the same bytes back, or the same openai exception with the same message,
status and body). A drift after an openai upgrade fails here, not in a user's evaluation.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import random
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web
from verifiers.clients import OpenAIChatCompletionsClient
from verifiers.errors import OverlongPromptError

from pytest_modal_eval.client import direct_client, send_order, verifiers_classic
from pytest_modal_eval.client.direct_client import (
    DirectOpenAI,
    dumps,
    retry_after_s,
    retry_delay,
    sdk_http,
    sdk_proxy,
    should_retry,
)
from pytest_modal_eval.exceptions import DirectClientError
from pytest_modal_eval.serving.endpoint import Endpoint
from pytest_modal_eval.serving.endpoint_check import EndpointChecker, on_loopback
from tests.support.forward_proxy import ForwardProxy, clear_proxy_env
from tests.support.threaded_app import ThreadedApp

PATH = "/chat/completions"
BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "Grüße — what is 2 + 2? ✓"}],
    "max_completion_tokens": 8,
    "temperature": 0.0,
}
COMPLETION = {
    "id": "c-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}
OVERLONG = {
    "object": "error",
    "message": "This model's maximum context length is 2048 tokens. However, you requested 4000.",
    "type": "BadRequestError",
    "code": 400,
}
# Headers that belong to one transport or one attempt, not to what the caller asked to send.
PER_TRANSPORT = {"host", "content-length", "accept-encoding", "connection", "user-agent"}


@dataclass
class Answer:
    status: int = 200
    body: Any = field(default_factory=lambda: COMPLETION)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drop: bool = False  # close the connection without answering
    gzip: bool = False  # Content-Encoding: gzip, as a compressing gateway sends it


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


class ScriptedServer:
    """Answers requests in order from a script (the last answer repeats) and records them."""

    def __init__(self, script: list[Answer]) -> None:
        self.script = list(script)
        self.seen: list[Seen] = []
        self.in_flight = self.peak_in_flight = 0
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(Seen(request.path, dict(request.headers), await request.read()))
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if answer.delay_s:
                await asyncio.sleep(answer.delay_s)
        finally:
            self.in_flight -= 1
        if answer.drop:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        text = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
        content_type = "text/plain" if isinstance(answer.body, str) else "application/json"
        response = web.Response(
            status=answer.status, text=text, content_type=content_type, headers=answer.headers
        )
        if answer.gzip:
            response.enable_compression(web.ContentCoding.gzip)
        return response


def sdk_client(base_url: str, *, max_retries: int, timeout: float = 30.0) -> openai.AsyncOpenAI:
    http = direct_client.sdk_http()
    return openai.AsyncOpenAI(
        api_key="sk-test-0123",
        base_url=base_url,
        max_retries=max_retries,
        default_headers={"X-Route": "eval-7"},
        http_client=openai.DefaultAioHttpClient(
            timeout=http.Timeout(timeout, connect=5.0), follow_redirects=False
        ),
    )


def direct(sdk: openai.AsyncOpenAI, timeout: float = 30.0, **options: Any) -> DirectOpenAI:
    return DirectOpenAI(
        sdk, request_timeout=timeout, max_connections=8, http=direct_client.sdk_http(), **options
    )


@dataclass
class Outcome:
    content: bytes | None
    error: BaseException | None
    seen: list[Seen]


Post = Callable[[Any], Awaitable[Any]]


def play(
    script: list[Answer],
    *,
    use_direct: bool,
    max_retries: int = 0,
    timeout: float = 30.0,
    options: dict[str, Any] | None = None,
    base_url: str | None = None,
) -> Outcome:
    async def scenario() -> Outcome:
        server = ScriptedServer(script)
        url = await server.__aenter__()
        sdk = sdk_client(base_url or url, max_retries=max_retries, timeout=timeout)
        client: Any = direct(sdk, timeout) if use_direct else sdk
        content, error = None, None
        try:
            response = await client.post(
                PATH, body=BODY, cast_to=httpx.Response, options=options or {}
            )
            content = response.content
        except openai.APIError as exc:
            error = exc
        finally:
            await client.close()
            await server.__aexit__()
        return Outcome(content, error, server.seen)

    random.seed(0)
    return asyncio.run(scenario())


def caller_headers(seen: Seen) -> dict[str, str]:
    lowered = {name.lower(): value for name, value in seen.headers.items()}
    return {
        name: value
        for name, value in lowered.items()
        if name not in PER_TRANSPORT and not name.startswith("x-stainless-")
    }


def assert_same(sdk: Outcome, ours: Outcome) -> None:
    assert len(ours.seen) == len(sdk.seen)
    for a, b in zip(sdk.seen, ours.seen, strict=True):
        assert (b.path, b.body) == (a.path, a.body)
        assert caller_headers(b) == caller_headers(a)
    assert ours.content == sdk.content
    assert type(ours.error) is type(sdk.error)
    if sdk.error is not None:
        assert str(ours.error) == str(sdk.error)
        assert getattr(ours.error, "status_code", None) == getattr(sdk.error, "status_code", None)
        assert getattr(ours.error, "body", None) == getattr(sdk.error, "body", None)


FAST = {"retry-after-ms": "10"}  # the SDK honours it, so retry scenarios take milliseconds

SCENARIOS: dict[str, tuple[list[Answer], int]] = {
    "ok": ([Answer()], 2),
    "ok, gzip-encoded": ([Answer(gzip=True)], 2),
    "error, gzip-encoded": ([Answer(400, OVERLONG, gzip=True)], 2),
    "overlong prompt (400)": ([Answer(400, OVERLONG)], 2),
    "bad key (401)": ([Answer(401, {"error": {"message": "bad key"}})], 2),
    "forbidden (403)": ([Answer(403, {"error": {"message": "no"}})], 2),
    "unknown model (404)": (
        [Answer(404, {"error": {"message": "The model `m` does not exist."}})],
        2,
    ),
    "unprocessable (422)": ([Answer(422, {"detail": "bad field"})], 2),
    "5xx then ok": ([Answer(500, {"error": "x"}, FAST), Answer(503, "busy", FAST), Answer()], 2),
    "5xx until the budget is spent": ([Answer(502, "bad gateway", FAST)], 2),
    "429 then ok": ([Answer(429, {"error": {"message": "slow"}}, FAST), Answer()], 1),
    "408 and 409 are retried": ([Answer(408, "", FAST), Answer(409, "", FAST), Answer()], 3),
    "x-should-retry false": ([Answer(500, "no", {"x-should-retry": "false"})], 3),
    "x-should-retry true on a 400": (
        [Answer(400, "again", {"x-should-retry": "true", **FAST}), Answer()],
        1,
    ),
    "Retry-After over two minutes": ([Answer(503, "later", {"retry-after": "600"})], 2),
    "redirect is an answer": ([Answer(302, "", {"Location": "/elsewhere"})], 2),
    "no retries allowed": ([Answer(500, {"message": "boom"})], 0),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_same_requests_and_outcome_as_the_sdk(name: str) -> None:
    script, retries = SCENARIOS[name]
    sdk = play(script, use_direct=False, max_retries=retries)
    ours = play(script, use_direct=True, max_retries=retries)
    assert_same(sdk, ours)
    assert ours.seen, "the server saw no request"


def test_sends_key_and_call_headers() -> None:
    ours = play([Answer()], use_direct=True, options={"headers": {"X-Call": "1"}})
    sdk = play([Answer()], use_direct=False, options={"headers": {"X-Call": "1"}})
    assert_same(sdk, ours)
    sent = caller_headers(ours.seen[0])
    assert sent["authorization"] == "Bearer sk-test-0123"
    assert (sent["x-route"], sent["x-call"]) == ("eval-7", "1")
    assert sent["content-type"] == "application/json"
    assert json.loads(ours.seen[0].body) == BODY


def test_read_timeout_is_an_api_timeout_error_after_the_retries() -> None:
    script = [Answer(delay_s=1.0)]
    sdk = play(script, use_direct=False, max_retries=1, timeout=0.2)
    ours = play(script, use_direct=True, max_retries=1, timeout=0.2)
    assert isinstance(ours.error, openai.APITimeoutError)
    assert_same(sdk, ours)


def unused_port() -> int:
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_connection_is_an_api_connection_error() -> None:
    closed = f"http://127.0.0.1:{unused_port()}/v1"
    sdk = play([Answer()], use_direct=False, max_retries=0, base_url=closed)
    ours = play([Answer()], use_direct=True, max_retries=0, base_url=closed)
    assert type(ours.error) is openai.APIConnectionError
    assert str(ours.error) == "Connection error."
    # The SDK's aiohttp transport maps every aiohttp connection error to a connect *timeout*;
    # a refused connection is not one. verifiers makes both a ModelError for the rollout.
    assert isinstance(sdk.error, openai.APIConnectionError)


def test_dropped_connection_is_retried_then_succeeds() -> None:
    ours = play([Answer(drop=True), Answer()], use_direct=True, max_retries=1)
    assert ours.error is None and json.loads(ours.content or b"") == COMPLETION
    assert len(ours.seen) == 2


def test_dropped_connection_without_retries_is_a_connection_error() -> None:
    # (The SDK's aiohttp transport reports a dropped connection as a timeout; a connection
    # error is the truth, and verifiers treats both the same: a ModelError for the rollout.)
    ours = play([Answer(drop=True)], use_direct=True, max_retries=0)
    assert type(ours.error) is openai.APIConnectionError
    assert len(ours.seen) == 1


# openai's own aiohttp transport (the SDK side of the comparison) still uses BasicAuth.
@pytest.mark.filterwarnings("ignore:BasicAuth is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The 'proxy_auth' parameter is deprecated:DeprecationWarning")
@pytest.mark.parametrize("bypassed", [False, True], ids=["proxied", "no_proxy"])
def test_the_environment_proxy_is_used_as_the_sdk_uses_it(
    monkeypatch: pytest.MonkeyPatch, bypassed: bool
) -> None:
    clear_proxy_env(monkeypatch)

    async def scenario(use_direct: bool) -> tuple[Outcome, ForwardProxy]:
        forward = ForwardProxy()
        proxy_url = forward.start()
        server = ScriptedServer([Answer()])
        url = await server.__aenter__()
        monkeypatch.setenv("HTTP_PROXY", proxy_url.replace("//", "//agent:pw@"))
        monkeypatch.setenv("NO_PROXY", "127.0.0.1" if bypassed else "")
        sdk = sdk_client(url, max_retries=0)  # httpx reads the environment here
        client: Any = direct(sdk) if use_direct else sdk
        try:
            response = await client.post(PATH, body=BODY, cast_to=httpx.Response)
            return Outcome(response.content, None, server.seen), forward
        finally:
            await client.close()
            await server.__aexit__()
            forward.stop()

    sdk, sdk_forward = asyncio.run(scenario(use_direct=False))
    ours, our_forward = asyncio.run(scenario(use_direct=True))

    assert json.loads(ours.content or b"") == json.loads(sdk.content or b"") == COMPLETION
    assert [m for m, _ in our_forward.relayed] == [m for m, _ in sdk_forward.relayed]
    assert len(our_forward.relayed) == (0 if bypassed else 1)
    assert [url.endswith(PATH) for _, url in our_forward.relayed] == [True] * (not bypassed)
    expected_auth = [] if bypassed else ["Basic " + base64.b64encode(b"agent:pw").decode()]
    assert our_forward.proxy_auth == sdk_forward.proxy_auth == expected_auth


def test_a_proxy_the_client_cannot_read_leaves_requests_to_the_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    http = direct_client.sdk_http()
    url = "https://api.example.test/v1/"

    async def options(http_client: Any) -> Any:
        sdk = openai.AsyncOpenAI(api_key="k", base_url=url, http_client=http_client)
        try:
            return sdk_proxy(sdk, url, http)
        finally:
            await sdk.close()

    # openai's aiohttp transport: read, and sent on the CONNECT for an https endpoint.
    assert asyncio.run(options(openai.DefaultAioHttpClient())) == (
        {"proxy": "http://127.0.0.1:3128", "proxy_headers": {}},
        {},
    )
    # httpx's own proxy transport does not say where it goes: DirectOpenAI steps aside.
    assert asyncio.run(options(openai.DefaultAsyncHttpxClient())) is None
    monkeypatch.setenv("NO_PROXY", "api.example.test")
    assert asyncio.run(options(openai.DefaultAioHttpClient())) == ({}, {})


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://127.8.0.1/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://10.0.0.7:8000/v1", False),
        ("https://api.example.test/v1", False),
        ("http://127.0.0.1.nip.io/v1", False),
    ],
)
def test_on_loopback(url: str, loopback: bool) -> None:
    assert on_loopback(url) is loopback


def test_loopback_endpoints_never_go_through_the_environment_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{unused_port()}")  # nothing listens

    async def scenario() -> tuple[Any, Any, list[Seen]]:
        server = ScriptedServer([Answer()])
        url = await server.__aenter__()
        endpoint = Endpoint(url, "m", None)
        client = verifiers_classic.chat_client(
            endpoint, request_timeout=5, max_retries=0, max_connections=4
        ).client
        try:
            # (a thread: the check is synchronous, and the server runs on this loop)
            await asyncio.to_thread(EndpointChecker().check, endpoint)  # raises if unreached
            answer = await client.post(PATH, body=BODY, cast_to=httpx.Response)
            models = await client.get("/models", cast_to=httpx.Response)  # the SDK's own path
            return answer, models, server.seen
        finally:
            await client.close()
            await server.__aexit__()

    answer, models, seen = asyncio.run(scenario())
    assert json.loads(answer.content) == COMPLETION
    assert models.status_code == 200
    assert [s.path for s in seen] == ["/v1/models", f"/v1{PATH}", "/v1/models"]


def test_other_calls_go_to_the_sdk() -> None:
    async def scenario() -> tuple[Any, list[Seen]]:
        server = ScriptedServer([Answer()])
        url = await server.__aenter__()
        client = direct(sdk_client(url, max_retries=0))
        try:
            parsed = await client.post(
                "/other", body=BODY, cast_to=openai.types.chat.ChatCompletion, options={}
            )
            assert client.max_retries == 0 and str(client.base_url) == url + "/"
        finally:
            await client.close()
            await server.__aexit__()
        return parsed, server.seen

    parsed, seen = asyncio.run(scenario())
    assert isinstance(parsed, openai.types.chat.ChatCompletion)
    assert parsed.choices[0].message.content == "4" and len(seen) == 1


def test_a_rollout_request_it_cannot_send_itself_is_refused_not_left_to_the_sdk() -> None:
    """Through the SDK a rollout's request would bypass the in-flight cap and the journal."""

    async def scenario() -> tuple[BaseException | None, list[Seen]]:
        server = ScriptedServer([Answer()])
        url = await server.__aenter__()
        client = direct(sdk_client(url, max_retries=0))
        try:
            await client.post(PATH, body=BODY, cast_to=openai.types.chat.ChatCompletion)
        except DirectClientError as exc:
            return exc, server.seen
        finally:
            await client.close()
            await server.__aexit__()
        return None, server.seen

    error, seen = asyncio.run(scenario())
    assert error is not None and "not the raw request" in str(error)
    assert seen == []


def test_a_proxy_it_cannot_read_fails_clearly_instead_of_taking_the_sdk_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    url = "https://api.example.test/v1"

    async def scenario() -> None:
        sdk = openai.AsyncOpenAI(
            api_key="k", base_url=url, http_client=openai.DefaultAsyncHttpxClient()
        )
        try:
            DirectOpenAI(sdk, request_timeout=5, max_connections=4, http=sdk_http())
        finally:
            await sdk.close()

    with pytest.raises(DirectClientError, match="openai\\[aiohttp\\]"):
        asyncio.run(scenario())


def test_verifiers_sees_an_overlong_prompt_through_the_direct_client() -> None:
    async def scenario() -> BaseException | None:
        server = ScriptedServer([Answer(400, OVERLONG)])
        url = await server.__aenter__()
        client = OpenAIChatCompletionsClient(direct(sdk_client(url, max_retries=2)))
        try:
            await client.get_native_response(BODY["messages"], "m", {"max_tokens": 8})
        except Exception as exc:
            return exc
        finally:
            await client.close()
            await server.__aexit__()
        return None

    error = asyncio.run(scenario())
    assert isinstance(error, OverlongPromptError)
    assert isinstance(error.__cause__, openai.BadRequestError)


def test_body_bytes_match_the_sdk_encoder() -> None:
    from datetime import UTC, datetime

    from openai.types.chat import ChatCompletionMessage

    body = {
        "messages": [ChatCompletionMessage(role="assistant", content="é")],
        "when": datetime(2026, 11, 26, tzinfo=UTC),
        "n": [1, 2.5, None, True],
    }
    from openai._utils._json import openapi_dumps  # the SDK's encoder, to compare against

    assert dumps(body) == openapi_dumps(body)
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})


RETRY_HEADERS = [
    {},
    {"retry-after-ms": "250"},
    {"retry-after": "3"},
    {"retry-after": "0"},
    {"retry-after": "121"},
    {"retry-after": "1e999"},
    {"retry-after": "soon"},
    {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"},
    {"retry-after": "<a date 30 s from now>"},
    {"x-should-retry": "true"},
    {"x-should-retry": "false"},
]


@pytest.mark.parametrize("headers", RETRY_HEADERS, ids=lambda h: repr(h) if h else "none")
@pytest.mark.parametrize("status", [400, 408, 409, 429, 500, 503])
def test_retry_decision_matches_the_sdk(headers: dict[str, str], status: int) -> None:
    if headers.get("retry-after", "").startswith("<a date"):
        headers = {"retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)}
    http = direct_client.sdk_http()
    sdk = openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=4)
    response = http.Response(status, headers=headers, request=http.Request("POST", "http://x"))
    assert should_retry(status, response.headers) == sdk._should_retry(response)
    slack = 1.0 if "GMT" in str(headers) else 0.0  # a date is read against the clock, twice
    expected = sdk._parse_retry_after_header(response.headers)
    assert retry_after_s(response.headers) == pytest.approx(expected, abs=slack)
    for taken in range(4):
        random.seed(taken)
        ours = retry_delay(taken, response.headers)
        random.seed(taken)
        options = openai._models.FinalRequestOptions.construct(method="post", url="/x")
        theirs = sdk._calculate_retry_timeout(4 - taken, options, response.headers)
        assert ours == pytest.approx(theirs, abs=slack)


def test_requests_in_flight_are_capped_however_many_callers_wait() -> None:
    async def scenario() -> tuple[int, int]:
        server = ScriptedServer([Answer(delay_s=0.05)])
        url = await server.__aenter__()
        client = direct(sdk_client(url, max_retries=0), max_in_flight=3)
        try:
            await asyncio.gather(
                *(client.post(PATH, body=BODY, cast_to=httpx.Response) for _ in range(12))
            )
        finally:
            await client.close()
            await server.__aexit__()
        return server.peak_in_flight, len(server.seen)

    peak, sent = asyncio.run(scenario())
    assert (peak, sent) == (3, 12)


class BatchServer(ThreadedApp):
    """Holds the first ``batch`` requests until all have arrived, then answers them together
    (as vLLM finishes one batch's requests in the same step); later requests are answered at
    once. Serves from its own thread and notes when each request arrived."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch = batch
        self.arrived: list[float] = []
        self._full = asyncio.Event()  # bound to the server's loop when first awaited there

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.arrived.append(time.monotonic())
        if len(self.arrived) == self.batch:
            self._full.set()
        if len(self.arrived) <= self.batch:
            await self._full.wait()
        return web.json_response(COMPLETION)


def test_waiting_requests_go_out_before_answers_are_processed() -> None:
    """A batch of answers frees its slots together: the requests waiting for those slots go
    out before the callers' processing of the answers, not after it (see
    pytest_modal_eval.client.send_order)."""
    slots, processing_s = 4, 0.2
    processed: list[float] = []

    async def caller(client: DirectOpenAI) -> None:
        await client.post(PATH, body=BODY, cast_to=httpx.Response)
        time.sleep(processing_s)  # parsing, scoring, recording: CPU work that blocks the loop
        processed.append(time.monotonic())

    async def scenario(url: str) -> None:
        client = direct(sdk_client(url, max_retries=0), max_in_flight=slots)
        try:
            await asyncio.gather(*(caller(client) for _ in range(2 * slots)))
        finally:
            await client.close()

    server = BatchServer(slots)
    url = server.start()
    try:
        asyncio.run(scenario(f"{url}/v1"))
    finally:
        server.stop()
    assert len(server.arrived) == 2 * slots
    # Answers reach the client one after another, so an answer may be processed before a
    # later one is even read; still every request of the second batch went out before the
    # third answer's processing was over. Without the ordering the first went out after three
    # processings and the last after all four (0.6-0.8 s).
    assert max(server.arrived) < sorted(processed)[2], (server.arrived, processed)
    # The first answer was not held back until the grace ran out: its request was seen written.
    first_back = min(processed) - processing_s - min(server.arrived)
    assert first_back < send_order.WRITE_GRACE_S / 2, first_back

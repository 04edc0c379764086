"""The local proxy, against a real local server that speaks Modal's 303 protocol."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import openai
import pytest

import pytest_modal_eval.serving.modal.redirect_proxy as proxy_module
from pytest_modal_eval.client.direct_client import DirectOpenAI, sdk_http
from pytest_modal_eval.serving.env_proxy import env_proxy
from pytest_modal_eval.serving.modal.redirect_proxy import (
    CLIENT_TOKEN_HEADER,
    DEADLINE_HEADER,
    LOG_ROUTE_HEADER,
    ModalProxy,
    ProxySettings,
    ProxyThread,
    settings_from_env,
)
from tests.support.forward_proxy import ForwardProxy, clear_proxy_env
from tests.support.modal_server import CALL_PARAM, CHAT_PATH, ModalLikeServer

SECRETS = {
    "Modal-Key": "wk-KEY0secret0a1b2c",
    "Modal-Secret": "ws-SECRET0d3e4f5",
    "Authorization": "Bearer sk-VLLM0secret0g6h7",
}
SECRET_VALUES = ["wk-KEY0secret0a1b2c", "ws-SECRET0d3e4f5", "sk-VLLM0secret0g6h7"]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\S+ (?P<method>[A-Z]+) (?P<path>/\S*) status=(?P<status>\S+)"
    r" hops=(?P<hops>\d+) attempts=(?P<attempts>\d+) latency_ms=\d+$"
)

MakeProxy = Callable[..., ProxyThread]


@pytest.fixture
def upstream() -> Iterator[ModalLikeServer]:
    server = ModalLikeServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "default" / "proxy.log"


@pytest.fixture
def make_proxy(upstream: ModalLikeServer, log_path: Path) -> Iterator[MakeProxy]:
    started: list[ProxyThread] = []

    def make(**overrides: Any) -> ProxyThread:
        # Tiny backoff so retry tests take milliseconds; Retry-After tests raise the cap.
        kw: dict[str, Any] = {
            "inject_headers": SECRETS,
            "log_path": log_path,
            "log_root": log_path.parent.parent,  # the test's tmp_path: routes stay inside it
            "backoff_initial_s": 0.01,
            "backoff_max_s": 0.05,
        } | overrides
        proxy = ProxyThread(ProxySettings(upstream.url, **kw))
        started.append(proxy)
        proxy.start()
        return proxy

    yield make
    for proxy in started:
        proxy.stop()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=15, trust_env=False) as c:
        yield c


def chat(
    client: httpx.Client, proxy: ProxyThread, headers: dict[str, str] | None = None
) -> httpx.Response:
    return client.post(f"{proxy.url}{CHAT_PATH}", json=CHAT, headers=headers)


def parsed_log(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    return [m.groupdict() for m in matches if m]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the 303 protocol ----------------------------------------------------------------------------
@pytest.mark.parametrize("hops", [0, 3, 25])
def test_follows_redirect_chain_with_bodyless_gets(
    hops: int,
    make_proxy: MakeProxy,
    upstream: ModalLikeServer,
    client: httpx.Client,
    log_path: Path,
) -> None:
    proxy = make_proxy()
    response = chat(client, proxy, {"X-Test-Hops": str(hops)})

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "ok"
    first, *rest = upstream.seen
    assert (first.method, json.loads(first.body)) == ("POST", CHAT)
    assert [(s.method, s.path_qs, s.body) for s in rest] == [
        ("GET", f"{CHAT_PATH}?{CALL_PARAM}=fc-1", b"")
    ] * hops
    assert all("Content-Type" not in s.headers for s in rest)
    proxy.stop()
    assert parsed_log(log_path) == [
        {"method": "POST", "path": CHAT_PATH, "status": "200", "hops": str(hops), "attempts": "1"}
    ]


def test_gives_up_after_max_redirects(
    make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client
) -> None:
    proxy = make_proxy(max_redirects=5)
    response = chat(client, proxy, {"X-Test-Hops": "100"})

    assert response.status_code == 502
    assert response.json()["error"]["type"] == "proxy_redirects"
    assert [s.method for s in upstream.seen] == ["POST"] + ["GET"] * 5


def test_streams_chunks_as_they_arrive(
    make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client
) -> None:
    proxy = make_proxy()
    body = CHAT | {"stream": True}
    headers = {"X-Test-Hops": "2", "X-Test-Gate": "1"}
    with client.stream("POST", f"{proxy.url}{CHAT_PATH}", json=body, headers=headers) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks = r.iter_raw()
        received = b""
        while received.count(b"data: ") < 3:
            received += next(chunks)
        # The upstream holds its last event until the gate opens: had the proxy buffered the
        # body, nothing would have arrived yet (and then a "gate timed out" event would).
        assert b"[DONE]" not in received
        upstream.open_gate()
        for chunk in chunks:
            received += chunk
    assert b"gate" not in received
    assert received.endswith(b'"end"}}]}\n\ndata: [DONE]\n\n')


# -- retries -------------------------------------------------------------------------------------
def test_429_waits_for_retry_after_then_succeeds(
    make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client
) -> None:
    proxy = make_proxy(backoff_max_s=5.0)
    upstream.fail_next("429:1")
    started = time.monotonic()
    response = chat(client, proxy)

    assert response.status_code == 200
    assert time.monotonic() - started >= 0.9  # the 10 ms backoff alone would be far quicker
    assert [s.method for s in upstream.seen] == ["POST", "POST"]


def test_retry_after_is_capped(
    make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client
) -> None:
    proxy = make_proxy(backoff_max_s=0.2)
    upstream.fail_next("429:3600")
    started = time.monotonic()
    assert chat(client, proxy).status_code == 200
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("hops", "fault_on", "expected"),
    [
        (0, "POST", ["POST", "POST"]),
        # A failure after a 303 repeats the GET of the call URL; re-POSTing would start over.
        (2, "GET", ["POST", "GET", "GET", "GET"]),
    ],
)
def test_503_then_success(
    hops: int,
    fault_on: str,
    expected: list[str],
    make_proxy: MakeProxy,
    upstream: ModalLikeServer,
    client: httpx.Client,
    log_path: Path,
) -> None:
    proxy = make_proxy()
    upstream.fail_next("503", method=fault_on)
    response = chat(client, proxy, {"X-Test-Hops": str(hops)})

    assert response.status_code == 200
    assert [s.method for s in upstream.seen] == expected
    assert all(CALL_PARAM in s.path_qs for s in upstream.seen if s.method == "GET")
    proxy.stop()
    [line] = parsed_log(log_path)
    assert (line["hops"], line["attempts"]) == (str(hops), "2")


def test_retry_budget_exhausted_returns_last_upstream_answer(
    make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client
) -> None:
    proxy = make_proxy(max_attempts=3)
    upstream.fail_next(*["503"] * 10)
    response = chat(client, proxy)

    assert response.status_code == 503
    assert response.json()["error"]["message"] == "injected 503"
    assert len(upstream.seen) == 3


def test_failed_result_fetch_is_returned_not_the_refetch_404(
    make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client
) -> None:
    proxy = make_proxy()
    response = chat(client, proxy, {"X-Test-Hops": "1", "X-Test-Result-Status": "500"})

    # The 500 was the call's result; the retried GET found it gone (404), so the proxy answers
    # with the 500 it already had rather than a confusing "not found".
    assert [(s.method, CALL_PARAM in s.path_qs) for s in upstream.seen] == [
        ("POST", False),
        ("GET", True),
        ("GET", True),
    ]
    assert response.status_code == 500
    assert response.json()["error"]["message"] == "result status 500"


@pytest.mark.parametrize("drop", ["reset", "close"])
def test_dropped_connection_then_success(
    drop: str, make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client
) -> None:
    proxy = make_proxy()
    upstream.fail_next(drop)
    response = chat(client, proxy)

    assert response.status_code == 200
    assert [s.method for s in upstream.seen] == ["POST", "POST"]


def test_unreachable_upstream_gives_502_after_max_attempts(client: httpx.Client) -> None:
    settings = ProxySettings(
        f"http://127.0.0.1:{free_port()}",
        max_attempts=3,
        backoff_initial_s=0.01,
        inject_headers=SECRETS,
    )
    with ProxyThread(settings) as proxy:
        response = client.post(f"{proxy.url}{CHAT_PATH}", json=CHAT)

    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "proxy_upstream_unreachable"
    assert "after 3 attempts" in error["message"]
    assert not any(secret in response.text for secret in SECRET_VALUES)


# -- the deadline --------------------------------------------------------------------------------
def test_deadline_ends_a_straggler_with_504(
    make_proxy: MakeProxy, client: httpx.Client, log_path: Path
) -> None:
    proxy = make_proxy(request_deadline_s=0.5)
    started = time.monotonic()
    response = chat(client, proxy, {"X-Test-Hops": "1000", "X-Test-Hop-Delay": "0.1"})

    assert 0.4 < time.monotonic() - started < 3
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["type"] == "proxy_deadline"
    assert "0.5 s" in error["message"]
    proxy.stop()
    [line] = parsed_log(log_path)
    assert line["status"] == "504"
    assert int(line["hops"]) >= 2


def test_deadline_during_a_stream_truncates_it_visibly(
    make_proxy: MakeProxy, client: httpx.Client, log_path: Path
) -> None:
    proxy = make_proxy(request_deadline_s=1.0)
    body = CHAT | {"stream": True}
    url = f"{proxy.url}{CHAT_PATH}"
    received = b""
    with client.stream("POST", url, json=body, headers={"X-Test-Gate": "1"}) as r:
        assert r.status_code == 200  # headers went out before the deadline
        with pytest.raises(httpx.RemoteProtocolError):
            for chunk in r.iter_raw():
                received += chunk
    assert received.count(b"data: ") == 3  # the events sent before the upstream stalled
    proxy.stop()
    [line] = parsed_log(log_path)
    assert line["status"] == "200+deadline"


# -- headers, secrets and the log ----------------------------------------------------------------
def test_injected_headers_reach_upstream_on_every_hop(
    make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client, tmp_path: Path
) -> None:
    proxy = make_proxy()
    response = chat(
        client,
        proxy,
        {
            "Authorization": "Bearer EMPTY",  # what OpenAI clients send without a real key
            "X-Test-Hops": "2",
            LOG_ROUTE_HEADER: str(tmp_path / "logs" / "proxy.log"),
        },
    )

    assert response.status_code == 200
    assert len(upstream.seen) == 3
    host = upstream.url.removeprefix("http://")
    for seen in upstream.seen:
        for name, value in SECRETS.items():
            assert seen.headers.getall(name) == [value]
        assert LOG_ROUTE_HEADER not in seen.headers
        assert seen.headers["Host"] == host


def test_log_lines_routing_and_no_secrets(
    make_proxy: MakeProxy,
    upstream: ModalLikeServer,
    client: httpx.Client,
    tmp_path: Path,
    log_path: Path,
) -> None:
    routed = tmp_path / "run" / "logs" / "proxy.log"
    rejected = tmp_path / "elsewhere.log"
    # A proxy.log outside the log root (the output directory) is not written either.
    outside = tmp_path.parent / f"{tmp_path.name}-outside" / "proxy.log"
    proxy = make_proxy()

    response = client.post(
        f"{proxy.url}{CHAT_PATH}?trace=1",
        json=CHAT,
        headers={"X-Test-Hops": "3", LOG_ROUTE_HEADER: str(routed)},
    )
    assert response.status_code == 200
    assert upstream.seen[0].path_qs == f"{CHAT_PATH}?trace=1"  # the query is forwarded...
    for bad in [
        "relative/proxy.log",
        str(rejected),
        str(tmp_path / "a" / ".." / "proxy.log"),
        str(outside),
    ]:
        assert client.get(f"{proxy.url}/health", headers={LOG_ROUTE_HEADER: bad}).text == "ok"
    # Lines are flushed within a second or so, without waiting for stop().
    deadline = time.monotonic() + 3
    while not routed.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert routed.exists()
    proxy.stop()

    assert parsed_log(routed) == [  # ...but not logged
        {"method": "POST", "path": CHAT_PATH, "status": "200", "hops": "3", "attempts": "1"}
    ]
    assert [(d["method"], d["path"], d["status"]) for d in parsed_log(log_path)] == [
        ("GET", "/health", "200")
    ] * 4
    assert not rejected.exists() and not outside.exists()
    text = routed.read_text() + log_path.read_text()
    assert not any(secret in text for secret in SECRET_VALUES)


def test_settings_from_env_and_redacted_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODAL_PROXY_TOKEN_ID", SECRET_VALUES[0])
    monkeypatch.setenv("MODAL_PROXY_TOKEN_SECRET", SECRET_VALUES[1])
    monkeypatch.setenv("VLLM_API_KEY", SECRET_VALUES[2])
    settings = settings_from_env("http://127.0.0.1:1", max_attempts=2)

    assert dict(settings.inject_headers) == SECRETS
    assert settings.max_attempts == 2
    for text in (repr(settings), str(settings), repr([settings])):
        assert "Modal-Key" in text
        assert not any(secret in text for secret in SECRET_VALUES)

    monkeypatch.delenv("VLLM_API_KEY")
    monkeypatch.setenv("MODAL_PROXY_TOKEN_SECRET", "")
    assert dict(settings_from_env("http://h", inject_headers={"X-A": "b"}).inject_headers) == {
        "Modal-Key": SECRET_VALUES[0],
        "X-A": "b",
    }


def test_upstream_proxy_from_env_with_credentials_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://agent:pw-SECRET@corp-proxy:3128")
    settings = settings_from_env("https://ws--app-serve.modal.run")
    assert settings.upstream_proxy == "http://agent:pw-SECRET@corp-proxy:3128"
    assert "upstream_proxy='http://corp-proxy:3128'" in repr(settings)
    assert "pw-SECRET" not in repr(settings)
    assert settings_from_env("http://127.0.0.1:1").upstream_proxy is None  # loopback
    monkeypatch.setenv("NO_PROXY", ".modal.run")
    assert settings_from_env("https://ws--app-serve.modal.run").upstream_proxy is None
    with pytest.raises(ValueError, match=r"http:// URL: https://corp-proxy:3128$"):
        ProxySettings("https://h", upstream_proxy="https://agent:pw-SECRET@corp-proxy:3128")


@pytest.mark.parametrize(
    ("environ", "url", "expected"),
    [
        ({"HTTPS_PROXY": "http://p:1"}, "https://a.test/v1", "http://p:1"),
        ({"HTTPS_PROXY": "http://p:1"}, "http://a.test/v1", None),
        (
            {"http_proxy": "http://low:1", "HTTP_PROXY": "http://up:1"},
            "http://a.test",
            "http://low:1",
        ),
        ({"ALL_PROXY": "http://all:1"}, "https://a.test", "http://all:1"),
        ({"ALL_PROXY": "http://all:1", "NO_PROXY": "a.test"}, "https://x.a.test", None),
        ({"ALL_PROXY": "http://all:1", "no_proxy": "*"}, "https://a.test", None),
        ({"ALL_PROXY": "http://all:1", "NO_PROXY": "b.test"}, "https://a.test", "http://all:1"),
        ({"ALL_PROXY": "http://all:1"}, "http://localhost:8000/v1", None),
        ({"HTTPS_PROXY": "https://tls-proxy:1"}, "https://a.test", None),  # aiohttp cannot
    ],
)
def test_env_proxy(environ: dict[str, str], url: str, expected: str | None) -> None:
    assert env_proxy(url, environ) == expected


@pytest.mark.parametrize("upstream_url", ["127.0.0.1:8000", "ftp://h", "http://h/?q=1"])
def test_settings_reject_bad_upstream(upstream_url: str) -> None:
    with pytest.raises(ValueError, match="upstream"):
        ProxySettings(upstream_url)


# -- an evaluation in the proxy's own process ----------------------------------------------------
# DirectOpenAI hands its requests to a proxy running in its process (ModalProxy.forward) instead
# of sending them to its port. Each case runs both ways and must look the same to the client and
# in the log (the upstream sees the same requests, but for Accept-Encoding, which the client
# leg over HTTP adds); only the count of requests that came over HTTP differs.
VIAS = ["in-process", "http"]


def direct_client(
    proxy: ProxyThread, via: str, monkeypatch: pytest.MonkeyPatch, *, timeout: float = 15.0
) -> DirectOpenAI:
    sdk = openai.AsyncOpenAI(api_key="EMPTY", base_url=f"{proxy.url}/v1", max_retries=0)
    with monkeypatch.context() as patch:  # the lookup happens when the client is made
        if via == "http":  # as in an xdist worker, where the proxy runs in another process
            patch.setattr(proxy_module, "_IN_PROCESS", {})
        return DirectOpenAI(sdk, request_timeout=timeout, max_connections=8, http=sdk_http())


def post_chat(client: DirectOpenAI, headers: dict[str, str], body: Any = CHAT) -> Any:
    """The answer verifiers would get (an httpx Response), or the exception it would see."""

    async def go() -> Any:
        try:
            return await client.post(
                "/chat/completions",
                body=body,
                cast_to=sdk_http().Response,
                options={"headers": headers},
            )
        except openai.OpenAIError as exc:
            return exc
        finally:
            await client.close()

    return asyncio.run(go())


def exchange(
    make_proxy: MakeProxy,
    monkeypatch: pytest.MonkeyPatch,
    via: str,
    headers: dict[str, str],
    *,
    body: Any = CHAT,
    timeout: float = 15.0,
    **settings: Any,
) -> Any:
    """One rollout request through a new proxy (``settings``), handed over or over HTTP; the
    proxy is stopped, its log flushed, before the answer or error is returned."""
    proxy = make_proxy(**settings)
    answer = post_chat(direct_client(proxy, via, monkeypatch, timeout=timeout), headers, body)
    proxy.stop()
    return answer


def answered_over_http(proxy: ProxyThread) -> int:
    assert proxy.proxy is not None
    return proxy.proxy.http_requests


@pytest.mark.parametrize("via", VIAS)
def test_in_process_client_speaks_the_protocol_without_the_http_hop(
    make_proxy: MakeProxy,
    upstream: ModalLikeServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    via: str,
) -> None:
    routed = tmp_path / "run" / "logs" / "proxy.log"
    proxy = make_proxy()
    upstream.fail_next("503", method="GET")  # retried by the proxy, on the redirect's GET
    client = direct_client(proxy, via, monkeypatch)

    answer = post_chat(client, {"X-Test-Hops": "3", LOG_ROUTE_HEADER: str(routed)})
    proxy.stop()

    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "ok"
    assert answered_over_http(proxy) == (via == "http")
    assert [(s.method, bool(s.body)) for s in upstream.seen] == [("POST", True)] + [
        ("GET", False)
    ] * 4
    host = upstream.url.removeprefix("http://")
    for seen in upstream.seen:
        for name, value in SECRETS.items():  # the client's "Bearer EMPTY" replaced
            assert seen.headers.getall(name) == [value]
        assert LOG_ROUTE_HEADER not in seen.headers
        assert seen.headers["Host"] == host
    assert parsed_log(routed) == [
        {"method": "POST", "path": CHAT_PATH, "status": "200", "hops": "3", "attempts": "2"}
    ]
    assert not any(secret in routed.read_text() for secret in SECRET_VALUES)


@pytest.mark.parametrize("via", VIAS)
def test_in_process_client_gets_the_deadline_504(
    make_proxy: MakeProxy, log_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    hops = {"X-Test-Hops": "5", "X-Test-Hop-Delay": "0.2"}
    error = exchange(make_proxy, monkeypatch, via, hops, request_deadline_s=0.3)

    assert isinstance(error, openai.InternalServerError)
    assert error.status_code == 504
    assert "request deadline of 0.3 s" in str(error)
    assert [(d["status"], d["hops"]) for d in parsed_log(log_path)] == [("504", "1")]


@pytest.mark.parametrize("via", VIAS)
def test_in_process_client_keeps_its_request_timeout(
    make_proxy: MakeProxy, log_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    hops = {"X-Test-Hops": "2", "X-Test-Hop-Delay": "1"}
    error = exchange(make_proxy, monkeypatch, via, hops, timeout=0.3)

    assert isinstance(error, openai.APITimeoutError)
    # The proxy gives up on the upstream when its client does.
    assert [d["status"] for d in parsed_log(log_path)] == ["cancelled"]


@pytest.mark.parametrize("via", VIAS)
def test_in_process_client_gets_header_bytes_as_they_came(
    make_proxy: MakeProxy, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    answer = exchange(make_proxy, monkeypatch, via, {"X-Test-Note": "1"})
    assert answer.status_code == 200
    assert answer.headers.raw[[k.lower() for k, _ in answer.headers.raw].index(b"x-note")] == (
        b"X-Note",
        "café ✓".encode(),
    )


@pytest.mark.parametrize("via", VIAS)
def test_in_process_client_gets_a_502_for_a_bad_location(
    make_proxy: MakeProxy, log_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    hops = {"X-Test-Hops": "2", "X-Test-Bad-Location": "1"}
    error = exchange(make_proxy, monkeypatch, via, hops)
    assert isinstance(error, openai.InternalServerError)
    assert error.status_code == 502
    assert "bad redirect Location" in str(error)
    assert [d["status"] for d in parsed_log(log_path)] == ["502"]


@pytest.mark.parametrize("via", VIAS)
def test_in_process_client_sees_a_deadline_mid_answer_as_a_cut_answer(
    make_proxy: MakeProxy, log_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    # A streamed answer whose last event waits for a gate nobody opens (for 5 s).
    gated, streamed = {"X-Test-Gate": "1"}, {**CHAT, "stream": True}
    error = exchange(make_proxy, monkeypatch, via, gated, body=streamed, request_deadline_s=0.5)
    assert isinstance(error, openai.APIConnectionError)
    assert [d["status"] for d in parsed_log(log_path)] == ["200+deadline"]


def test_upstream_headers_do_not_show_their_values() -> None:
    proxy = ModalProxy(ProxySettings("http://127.0.0.1:1", inject_headers=SECRETS))
    _, headers = proxy._upstream_request(("/v1/models", ""), {"Accept": "application/json"})
    for shown in (repr(headers), str(headers), repr(headers.copy())):
        assert "Modal-Secret" in shown
        assert not any(secret in shown for secret in SECRET_VALUES)


def test_in_process_client_of_a_stopped_proxy_is_refused(
    make_proxy: MakeProxy, upstream: ModalLikeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = make_proxy()
    assert proxy.url is not None
    client = direct_client(proxy, "in-process", monkeypatch)
    proxy.stop()

    assert proxy_module.in_process(proxy.url) is None
    assert isinstance(post_chat(client, {}), openai.APIConnectionError)
    assert upstream.seen == []


@pytest.mark.parametrize("via", VIAS)
def test_upstream_proxy_carries_every_hop(
    make_proxy: MakeProxy,
    upstream: ModalLikeServer,
    monkeypatch: pytest.MonkeyPatch,
    via: str,
) -> None:
    forward = ForwardProxy()
    forward_url = forward.start()
    try:
        proxy = make_proxy(upstream_proxy=forward_url.replace("//", "//agent:pw@"))
        client = direct_client(proxy, via, monkeypatch)
        answer = post_chat(client, {"X-Test-Hops": "2"})
        proxy.stop()
    finally:
        forward.stop()

    assert answer.status_code == 200
    assert [(method, url.startswith(upstream.url)) for method, url in forward.relayed] == [
        ("POST", True),
        ("GET", True),
        ("GET", True),
    ]
    assert forward.proxy_auth == ["Basic " + base64.b64encode(b"agent:pw").decode()] * 3
    for seen in upstream.seen:  # the secrets still reach the upstream, the proxy's own do not
        assert seen.headers["Modal-Key"] == SECRETS["Modal-Key"]
        assert "Proxy-Authorization" not in seen.headers


# -- lifecycle -----------------------------------------------------------------------------------
def test_proxy_thread_lifecycle(upstream: ModalLikeServer, client: httpx.Client) -> None:
    proxy = ProxyThread(ProxySettings(upstream.url))
    proxy.stop()  # never started: nothing to do
    url = proxy.start()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
    assert client.get(f"{url}/health").text == "ok"

    taken = ProxyThread(ProxySettings(upstream.url), port=int(url.rsplit(":", 1)[1]))
    with pytest.raises(OSError):
        taken.start()
    taken.stop()

    proxy.stop()
    proxy.stop()
    with pytest.raises(httpx.ConnectError):
        client.get(f"{url}/health")


def test_stop_cuts_in_flight_requests_and_logs_them(
    make_proxy: MakeProxy, upstream: ModalLikeServer, log_path: Path
) -> None:
    proxy = make_proxy()
    errors: list[Exception] = []

    def long_poll() -> None:
        with httpx.Client(timeout=15, trust_env=False) as c:
            try:
                chat(c, proxy, {"X-Test-Hops": "1000", "X-Test-Hop-Delay": "0.1"})
            except httpx.TransportError as exc:
                errors.append(exc)

    thread = threading.Thread(target=long_poll)
    thread.start()
    deadline = time.monotonic() + 5
    while len(upstream.seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    proxy.stop()
    assert time.monotonic() - started < 3
    thread.join(timeout=5)

    assert [type(e) for e in errors] == [httpx.RemoteProtocolError]  # a disconnect, not a hang
    [line] = parsed_log(log_path)
    assert line["status"] == "cancelled"
    assert int(line["hops"]) >= 1


def test_256_concurrent_requests(upstream: ModalLikeServer, log_path: Path) -> None:
    async def run() -> list[tuple[int, str]]:
        proxy = ModalProxy(ProxySettings(upstream.url, log_path=log_path))
        url = await proxy.start()
        try:
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:

                async def one(i: int) -> tuple[int, str]:
                    headers = {"X-Test-Hops": str(i % 3)}
                    async with session.post(f"{url}{CHAT_PATH}", json=CHAT, headers=headers) as r:
                        return r.status, (await r.json())["choices"][0]["message"]["content"]

                return await asyncio.gather(*(one(i) for i in range(256)))
        finally:
            await proxy.stop()

    started = time.monotonic()
    results = asyncio.run(run())
    assert time.monotonic() - started < 10
    assert results == [(200, "ok")] * 256
    assert len(parsed_log(log_path)) == 256


# -- the standalone command ----------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_prints_url_forwards_and_exits_cleanly(
    sig: signal.Signals, upstream: ModalLikeServer, client: httpx.Client, log_path: Path
) -> None:
    env = os.environ | {
        "MODAL_PROXY_TOKEN_ID": SECRET_VALUES[0],
        "MODAL_PROXY_TOKEN_SECRET": SECRET_VALUES[1],
        "VLLM_API_KEY": SECRET_VALUES[2],
    }
    command = [
        sys.executable,
        "-m",
        "pytest_modal_eval.serving.modal.redirect_proxy",
        "--upstream",
        upstream.url,
        "--log",
        str(log_path),
        "--max-attempts",
        "2",
    ]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=20), "the proxy printed nothing"
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert match, line
        response = client.post(f"{match[0]}{CHAT_PATH}", json=CHAT, headers={"X-Test-Hops": "2"})
        assert response.status_code == 200
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == 0, err
    assert upstream.seen[0].headers["Modal-Secret"] == SECRET_VALUES[1]
    everything = line + out + err + log_path.read_text()
    assert "POST /v1/chat/completions status=200 hops=2" in everything
    assert not any(secret in everything for secret in SECRET_VALUES)


@pytest.mark.parametrize("via", VIAS)
def test_the_deadline_is_the_clients_and_its_504_is_not_retried(
    make_proxy: MakeProxy,
    upstream: ModalLikeServer,
    log_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    via: str,
) -> None:
    """eval.request_timeout travels with each request (X-Modal-Eval-Deadline): the proxy's
    own default (2 h here) does not apply, and a client that retries 3 times does not spend
    the deadline again."""
    proxy = make_proxy()  # default request_deadline_s
    sdk = openai.AsyncOpenAI(api_key="EMPTY", base_url=f"{proxy.url}/v1", max_retries=3)
    with monkeypatch.context() as patch:
        if via == "http":
            patch.setattr(proxy_module, "_IN_PROCESS", {})
        client = DirectOpenAI(sdk, request_timeout=30, max_connections=8, http=sdk_http())
    started = time.monotonic()
    hops = {"X-Test-Hops": "50", "X-Test-Hop-Delay": "0.2", DEADLINE_HEADER: "0.5"}
    error = post_chat(client, hops)
    took = time.monotonic() - started
    proxy.stop()

    assert isinstance(error, openai.InternalServerError) and error.status_code == 504
    assert "request deadline of 0.5 s" in str(error)
    assert [s.method for s in upstream.seen].count("POST") == 1
    assert took < 5, f"took {took:.1f}s"
    assert [d["status"] for d in parsed_log(log_path)] == ["504"]


def test_a_proxy_with_a_client_token_serves_only_clients_that_send_it(
    make_proxy: MakeProxy, upstream: ModalLikeServer, client: httpx.Client
) -> None:
    token = "session-token-7d1f0a"
    proxy = make_proxy(client_token=token)
    refused = client.post(f"{proxy.url}{CHAT_PATH}", json=CHAT)
    wrong = client.post(f"{proxy.url}{CHAT_PATH}", json=CHAT, headers={CLIENT_TOKEN_HEADER: "x"})
    assert refused.status_code == wrong.status_code == 401
    assert CLIENT_TOKEN_HEADER in refused.json()["error"]["message"]
    assert upstream.seen == []  # refused before anything (or any secret) went upstream
    ok = client.post(f"{proxy.url}{CHAT_PATH}", json=CHAT, headers={CLIENT_TOKEN_HEADER: token})
    assert ok.status_code == 200
    assert CLIENT_TOKEN_HEADER not in upstream.seen[0].headers  # the token stays local
    assert token not in repr(proxy.settings)


def test_the_modal_server_sends_its_session_token(tmp_path: Path) -> None:
    from pytest_modal_eval.config.schema import InfraConfig, VllmConfig
    from pytest_modal_eval.serving.endpoint import ServerProfile
    from pytest_modal_eval.serving.modal.backend import ModalServer

    profile = ServerProfile(
        "modal", "org/m", InfraConfig.model_validate({}), VllmConfig.model_validate({}), None
    )
    one = ModalServer(profile, logs_dir=tmp_path, log_root=tmp_path)
    two = ModalServer(profile, logs_dir=tmp_path, log_root=tmp_path)
    [(name, value)] = one.client_headers
    assert name == CLIENT_TOKEN_HEADER and len(value) >= 32
    assert one.client_headers != two.client_headers  # one secret per server (per session)


# -- what the proxy forwards: nowhere but the upstream -------------------------------------------
#: ``Location`` headers a hostile upstream could answer with, to send the proxy (and the
#: injected secrets) or its client elsewhere: ``{other}`` is a private service's port,
#: ``{up}`` the upstream's.
LOCATIONS = [
    "http://127.0.0.1:{other}/x",
    "//127.0.0.1:{other}/x",
    "/\\127.0.0.1:{other}/x",
    "\\\\127.0.0.1:{other}/x",
    "http://127.0.0.1:{up}@127.0.0.1:{other}/x",
    "@127.0.0.1:{other}/x",
    "http://[::1]:{other}/x",
    "http://localhost.:{other}/x",
    "http://127.1:{other}/x",
    "http://0x7f.1:{other}/x",
    "/v1/%2F%2F127.0.0.1:{other}/x",
]


@pytest.fixture
def private() -> Iterator[ModalLikeServer]:
    """A service on another local port that nothing relayed may reach."""
    server = ModalLikeServer()
    server.start()
    yield server
    server.stop()
    assert server.seen == []


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_a_tricky_request_target_is_refused_over_http_and_handed_over(
    make_proxy: MakeProxy,
    upstream: ModalLikeServer,
    private: ModalLikeServer,
    log_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.test_forwarding import TRICKS

    proxy = make_proxy()
    assert proxy.url is not None and proxy.proxy is not None
    targets = [trick.format(other=_port(private.url)) for trick in TRICKS]
    statuses = []
    for target in targets:
        # As written on the request line, byte for byte (no client normalises it first).
        with socket.create_connection(("127.0.0.1", _port(proxy.url)), timeout=10) as sock:
            sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        statuses.append(int(answer.split(b" ", 2)[1]))

    async def handed_over() -> list[int]:
        assert proxy.proxy is not None
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            return [
                (await proxy.proxy.forward(session, "POST", target, {}, b"{}"))[0]
                for target in targets
            ]

    forwarded = asyncio.run(handed_over())
    proxy.stop()
    assert upstream.seen == [] and private.seen == []
    assert set(statuses) <= {400} and set(forwarded) == {400}
    assert len([r for r in caplog.records if "proxy: request refused" in r.getMessage()]) >= len(
        targets
    )
    logged = log_path.read_text().splitlines()
    # aiohttp's own parser refuses some before the proxy sees them; the rest are logged.
    assert len(forwarded) <= len(logged) <= len(forwarded) + len(statuses)
    assert all(" status=400 " in line for line in logged)


@pytest.mark.parametrize("status", [303, 302, 307])
@pytest.mark.parametrize("location", LOCATIONS)
def test_a_redirect_off_the_upstream_is_followed_by_nobody(
    make_proxy: MakeProxy,
    upstream: ModalLikeServer,
    private: ModalLikeServer,
    client: httpx.Client,
    location: str,
    status: int,
) -> None:
    """The proxy does not follow it, and its client (which follows redirects, as OpenAI's
    does) gets a 502 instead of the redirect."""
    proxy = make_proxy()
    given = location.format(other=_port(private.url), up=_port(upstream.url))
    headers = {"X-Test-Location": given, "X-Test-Redirect-Status": str(status)}
    with httpx.Client(timeout=15, trust_env=False, follow_redirects=True) as following:
        answer = following.post(f"{proxy.url}{CHAT_PATH}", json=CHAT, headers=headers)
    assert private.seen == []
    assert answer.status_code == 502
    assert "bad redirect Location" in answer.json()["error"]["message"]
    assert [s.path_qs for s in upstream.seen] == [CHAT_PATH]

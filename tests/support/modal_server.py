"""A real aiohttp server on 127.0.0.1 that speaks Modal's 150 s web-endpoint protocol.

``POST /v1/chat/completions`` with header ``X-Test-Hops: N`` (N > 0) is answered with 303 to a
relative ``?__modal_function_call_id=fc-K``; each GET of that URL 303s again (alternating the
relative and the absolute-path Location forms) until N hops are done, then returns the result
once (a second GET is 404). A POST to a call URL, or a GET with a body, gets
``400 modal-http: bad redirect method``, as Modal does. Other controls, all request headers:

- ``X-Test-Hop-Delay: S``: each redirect is sent after S seconds (a long poll in miniature).
- ``X-Test-Result-Status: N``: the result itself is an error with status N (still fetchable
  only once, so a retried fetch gets 404).
- ``X-Test-Gate: 1``: a streamed answer waits for :meth:`ModalLikeServer.open_gate` before
  its last event, so a test can prove the first events arrived before the stream ended.
- ``X-Test-Bad-Location: 1``: the first redirect's Location is not a URL.
- ``X-Test-Note: 1``: the result carries ``X-Note`` with non-ASCII text (UTF-8 bytes).
- ``X-Test-Location: L`` (and ``X-Test-Redirect-Status: N``, default 303): the answer is that
  redirect to ``L`` as given, a hostile upstream's.

A JSON body with ``"stream": true`` is answered with SSE ``text/event-stream`` chunks.
:meth:`ModalLikeServer.fail_next` queues faults for the next requests: ``"429"`` or
``"429:SECONDS"`` (with Retry-After), ``"503"``, ``"reset"`` (TCP RST without an answer) and
``"close"`` (FIN without an answer). Every request is recorded in ``seen``.

Runs in a daemon thread with its own event loop: ``start()`` returns the base URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from tests.support.threaded_app import ThreadedApp

CALL_PARAM = "__modal_function_call_id"
CHAT_PATH = "/v1/chat/completions"
GATE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Seen:
    method: str
    path_qs: str
    headers: CIMultiDict[str]
    body: bytes


@dataclass
class _Call:
    hops_left: int
    delay: float
    stream: bool
    gate: bool
    status: int
    bad_location: bool = False
    note: bool = False


class ModalLikeServer(ThreadedApp):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Seen] = []
        self._faults: list[tuple[str | None, str]] = []
        self._calls: dict[str, _Call] = {}
        self._ids = itertools.count(1)
        self._gate = threading.Event()
        self._lock = threading.Lock()

    # -- control, from the test's thread -------------------------------------------------------
    def fail_next(self, *faults: str, method: str | None = None) -> None:
        """Queue faults for the next requests (only those with ``method``, if given)."""
        with self._lock:
            self._faults.extend((method, fault) for fault in faults)

    def open_gate(self) -> None:
        self._gate.set()

    def stop(self) -> None:
        self._gate.set()  # release a gated stream so shutdown is quick
        super().stop()

    # -- the protocol ---------------------------------------------------------------------------
    def _take_fault(self, method: str) -> str | None:
        with self._lock:
            for i, (wanted, fault) in enumerate(self._faults):
                if wanted in (None, method):
                    del self._faults[i]
                    return fault
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path_qs, CIMultiDict(request.headers), body))
        fault = self._take_fault(request.method)
        if fault is not None:
            return await self._fault(request, fault)
        if request.path == "/health":
            return web.Response(text="ok")
        if "X-Test-Location" in request.headers:
            status = int(request.headers.get("X-Test-Redirect-Status", "303"))
            return web.Response(
                status=status, headers={"Location": request.headers["X-Test-Location"]}
            )
        if request.path != CHAT_PATH:
            return web.json_response({"error": {"message": "not found"}}, status=404)

        call_id = request.query.get(CALL_PARAM)
        if call_id is not None:
            if request.method != "GET" or body:
                return web.Response(status=400, text="modal-http: bad redirect method")
            call = self._calls.get(call_id)
            if call is None:
                return web.Response(status=404, text="modal-http: function call not found")
            if call.hops_left > 0:
                call.hops_left -= 1
                return await self._redirect(call_id, call, absolute=call.hops_left % 2 == 0)
            del self._calls[call_id]  # the result can be fetched only once
            return await self._result(request, call)

        if request.method != "POST":
            return web.Response(status=405)
        payload: dict[str, Any] = json.loads(body or b"{}")
        call = _Call(
            hops_left=int(request.headers.get("X-Test-Hops", "0")),
            delay=float(request.headers.get("X-Test-Hop-Delay", "0")),
            stream=bool(payload.get("stream")),
            gate=request.headers.get("X-Test-Gate") == "1",
            status=int(request.headers.get("X-Test-Result-Status", "200")),
            bad_location=request.headers.get("X-Test-Bad-Location") == "1",
            note=request.headers.get("X-Test-Note") == "1",
        )
        if call.hops_left == 0:
            return await self._result(request, call)
        call.hops_left -= 1
        call_id = f"fc-{next(self._ids)}"
        self._calls[call_id] = call
        return await self._redirect(call_id, call, absolute=False)

    async def _redirect(self, call_id: str, call: _Call, *, absolute: bool) -> web.Response:
        if call.delay:
            await asyncio.sleep(call.delay)
        location = f"{CHAT_PATH if absolute else ''}?{CALL_PARAM}={call_id}"
        if call.bad_location:
            location = "http://[::1/broken"
        return web.Response(status=303, headers={"Location": location})

    async def _result(self, request: web.Request, call: _Call) -> web.StreamResponse:
        if call.status != 200:
            error = {"message": f"result status {call.status}", "type": "result"}
            return web.json_response({"error": error}, status=call.status)
        if not call.stream:
            return web.json_response(
                {
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                },
                headers={"X-Note": "café ✓"} if call.note else None,
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        # The proxy may hang up mid-stream (deadline tests); that is not an error here.
        with contextlib.suppress(ConnectionError):
            for i in range(3):
                await response.write(_event({"choices": [{"delta": {"content": f"part{i} "}}]}))
            if call.gate:
                opened = await asyncio.to_thread(self._gate.wait, GATE_TIMEOUT_S)
                if not opened:
                    await response.write(_event({"gate": "timed out"}))
            await response.write(_event({"choices": [{"delta": {"content": "end"}}]}))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        return response

    async def _fault(self, request: web.Request, fault: str) -> web.Response:
        status, _, retry_after = fault.partition(":")
        if status in ("reset", "close"):
            assert request.transport is not None
            if status == "reset":
                request.transport.abort()  # RST: the client sees "connection reset by peer"
            else:
                request.transport.close()  # FIN: the client sees "server disconnected"
            # aiohttp's attempt to send this fails quietly on the closed transport.
            return web.Response(status=500)
        headers = {"Retry-After": retry_after} if retry_after else {}
        return web.json_response(
            {"error": {"message": f"injected {status}", "type": "injected"}},
            status=int(status),
            headers=headers,
        )


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()

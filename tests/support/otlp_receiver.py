"""A light OTLP/HTTP trace receiver on 127.0.0.1: what a collector (Langfuse, Phoenix, the
OpenTelemetry Collector) is to the exporter, keeping every request and its spans, decoded
with ``opentelemetry-proto``.

:class:`BlackHole` is a collector that accepts connections and never answers.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.threaded_app import ThreadedApp


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    attributes: dict[str, Any]
    status: str  # "UNSET", "OK", "ERROR"
    status_message: str
    events: list[dict[str, Any]]
    resource: dict[str, Any]
    start_ns: int
    end_ns: int


def _value(value: dict[str, Any]) -> Any:
    """An OTLP AnyValue (as JSON) as a plain value."""
    if "arrayValue" in value:
        return [_value(v) for v in value["arrayValue"].get("values", [])]
    if "intValue" in value:
        return int(value["intValue"])
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    return None


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value", {})) for item in items}


class OtlpReceiver(ThreadedApp):
    """Serves ``POST /v1/traces`` (protobuf, as the HTTP exporter sends it)."""

    def __init__(self, keep: bool = True) -> None:
        """``keep=False``: count the spans, keep nothing (a benchmark's collector)."""
        super().__init__()
        self.keep = keep
        self.count = 0
        self.lock = threading.Lock()
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.spans: list[ReceivedSpan] = []

    @property
    def endpoint(self) -> str:
        return self.url

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST" or request.path != "/v1/traces":
            return web.Response(status=404)
        body = await request.read()
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        if not self.keep:
            with self.lock:
                self.count += sum(
                    len(scope.spans) for rs in message.resource_spans for scope in rs.scope_spans
                )
            return web.Response(content_type="application/x-protobuf")
        decoded = MessageToDict(message)
        found: list[ReceivedSpan] = []
        for resource_spans in decoded.get("resourceSpans", []):
            resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
            for scope in resource_spans.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    status = span.get("status", {})
                    found.append(
                        ReceivedSpan(
                            name=span["name"],
                            trace_id=span["traceId"],
                            span_id=span["spanId"],
                            parent_id=span.get("parentSpanId", ""),
                            kind=span.get("kind", ""),
                            attributes=_attributes(span.get("attributes", [])),
                            status=status.get("code", "STATUS_CODE_UNSET").removeprefix(
                                "STATUS_CODE_"
                            ),
                            status_message=status.get("message", ""),
                            events=[
                                {"name": e["name"], **_attributes(e.get("attributes", []))}
                                for e in span.get("events", [])
                            ],
                            resource=resource,
                            start_ns=int(span.get("startTimeUnixNano", 0)),
                            end_ns=int(span.get("endTimeUnixNano", 0)),
                        )
                    )
        with self.lock:
            self.requests.append((dict(request.headers), body))
            self.spans.extend(found)
            self.count += len(found)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def named(self, prefix: str) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.name.startswith(prefix)]

    def by_id(self) -> dict[str, ReceivedSpan]:
        with self.lock:
            return {s.span_id: s for s in self.spans}


class BlackHole:
    """A collector that accepts every connection and never answers (nor closes it)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.sock.close()


def closed_port_url() -> str:
    """The URL of a port nothing listens on (a connection is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"

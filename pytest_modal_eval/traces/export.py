"""One process's span pipeline: the SDK's tracer provider, a batch processor that exports from
its own thread, and an OTLP/HTTP exporter that gives up on a collector that failed once.

A collector that is down or never answers must cost a session one warning and little time:

- spans are batched and exported from the processor's thread, never where requests are sent;
- after one failed export (refused, timed out, an error status) nothing more is sent: every
  later batch is dropped at once, so a black-holed collector holds no thread again;
- the SDK's own shutdown can block for the exporter's timeout and then for up to 30 s; it runs
  here in a daemon thread that the session waits for at most :data:`SHUTDOWN_BUDGET_S`
  seconds, and the provider registers no ``atexit`` shutdown (``shutdown_on_exit=False``);
- the SDK's own log lines about the failure are kept from the terminal; the session says one
  line instead, with the reason taken from them (:class:`ExportReport`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.traces.settings import TraceSettings

#: Seconds a process waits at its end for its last spans to be exported.
SHUTDOWN_BUDGET_S = 1.0
#: Seconds one export may take, unless OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT says otherwise
#: (the SDK's default is 10).
EXPORT_TIMEOUT_S = 5.0
#: Milliseconds between exports, unless OTEL_BSP_SCHEDULE_DELAY says otherwise: spans show in
#: the collector while the run goes (the SDK's default is 5000).
SCHEDULE_DELAY_MS = 1000
#: The SDK's loggers whose lines about a failed export are kept from the terminal.
QUIET_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk")
SERVICE_NAME = "pytest-modal-eval"


@dataclass
class ExportReport:
    """What became of a process's spans: JSON-able, so a worker hands it to the controller."""

    endpoint: str
    ended: int = 0
    exported: int = 0
    failed: bool = False
    reason: str | None = None  # why the collector was given up on
    late: bool = False  # the last export had not ended when the process stopped waiting
    troubled: bool = False  # an export is being retried (not handed across processes)

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "ended": self.ended,
            "exported": self.exported,
            "failed": self.failed,
            "reason": self.reason,
            "late": self.late,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExportReport:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class GivingUpExporter(SpanExporter):
    """The OTLP/HTTP exporter, given up after its first failure (see the module docstring)."""

    def __init__(self, inner: SpanExporter, report: ExportReport) -> None:
        self.inner = inner
        self.report = report
        self.closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.report.failed:
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # the SDK catches its own; anything else ends exporting too
            self.report.reason = self.report.reason or f"{type(exc).__name__}: {exc}"
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.report.exported += len(spans)
        else:
            self.report.failed = True
        return result

    def shutdown(self) -> None:
        if not self.closed:
            self.closed = True
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _Ended(SpanProcessor):
    """Counts the spans this process ended, for the report."""

    def __init__(self, report: ExportReport) -> None:
        self.report = report

    def on_end(self, span: ReadableSpan) -> None:
        self.report.ended += 1


class _Reason(logging.Handler):
    """Keeps the first thing the SDK's loggers say at WARNING or above, redacted."""

    def __init__(
        self, report: ExportReport, redactor: Redactor, on_trouble: Callable[[], None]
    ) -> None:
        super().__init__(logging.WARNING)
        self.report = report
        self.redactor = redactor
        self.on_trouble = on_trouble

    def emit(self, record: logging.LogRecord) -> None:
        if self.report.failed and self.report.reason is not None:
            return  # given up already: what follows is about giving up
        # A failure, or a retry coming (a transient error): the collector is in trouble.
        self.report.troubled = True
        self.on_trouble()
        if self.report.reason is None:
            try:
                message = record.getMessage()
            except Exception:
                message = str(record.msg)
            self.report.reason = self.redactor.text(short_reason(message))


#: What the SDK's messages about a failed export say, in a few words.
_REASONS = (
    (re.compile(r"Connection refused|ConnectionRefused", re.I), "connection refused"),
    (re.compile(r"timed out|Timeout", re.I), "no answer in time"),
    (re.compile(r"Name or service not known|getaddrinfo|NameResolution", re.I), "unknown host"),
    (re.compile(r"code:? (\d{3}),? reason:? ([^,]*)", re.I), r"HTTP \1 \2"),
    (re.compile(r"SSL|certificate", re.I), "TLS error"),
)


def short_reason(message: str) -> str:
    """A few words for a failed export, from the SDK's message about it."""
    for pattern, words in _REASONS:
        found = pattern.search(message)
        if found is not None:
            return found.expand(words).strip()
    return " ".join(message.split())[:160]


class Pipeline:
    """The provider and the report of one process (see the module docstring)."""

    def __init__(self, settings: TraceSettings, redactor: Redactor, version: str) -> None:
        self.report = ExportReport(settings.endpoint)
        self._closing = self._given_up = False
        self._lock = threading.Lock()
        self._quiet(redactor)
        timeout = None if _env_timeout() else EXPORT_TIMEOUT_S
        self.exporter = exporter = GivingUpExporter(
            OTLPSpanExporter(endpoint=settings.endpoint, timeout=timeout), self.report
        )
        delay = None if os.environ.get("OTEL_BSP_SCHEDULE_DELAY") else SCHEDULE_DELAY_MS
        self.provider = TracerProvider(resource=_resource(version), shutdown_on_exit=False)
        self.provider.add_span_processor(_Ended(self.report))
        self.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=delay))
        self.tracer = self.provider.get_tracer("pytest_modal_eval", version)

    def _trouble(self) -> None:
        """The SDK said an export failed or will be retried: at the end, give up at once."""
        if self._closing:
            self._give_up()

    def _give_up(self) -> None:
        """Stop an export's retries (the SDK's shutdown would first wait for them) and every
        later export: the collector is down."""
        with self._lock:
            if self._given_up:
                return
            self._given_up = True
        self.report.failed = True
        self.exporter.shutdown()

    def _quiet(self, redactor: Redactor) -> None:
        # Handlers of their own and no propagation: the lines never reach pytest's capture nor,
        # after the session (an export abandoned at the end may still fail), Python's
        # last-resort handler on stderr.
        self._handler = _Reason(self.report, redactor, self._trouble)
        for name in QUIET_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
                logger.addHandler(logging.NullHandler())
            logger.addHandler(self._handler)
            logger.propagate = False

    def shutdown(self, budget_s: float = SHUTDOWN_BUDGET_S, drop: bool = False) -> ExportReport:
        """Export what is left (nothing with ``drop``: the collector is known to be down),
        waiting at most ``budget_s`` seconds."""
        if drop:
            self.report.failed = True
        self._closing = True
        done = threading.Event()

        def shut() -> None:
            try:
                if self.report.failed or self.report.troubled:
                    self._give_up()
                self.provider.shutdown()
            finally:
                done.set()

        threading.Thread(target=shut, name="modal-eval-traces-shutdown", daemon=True).start()
        if not done.wait(budget_s):
            self.report.late = True
        for name in QUIET_LOGGERS:
            logging.getLogger(name).removeHandler(self._handler)
        return self.report


def _resource(version: str) -> Resource:
    """The process's resource: ``OTEL_RESOURCE_ATTRIBUTES`` (e.g. Phoenix's project,
    ``openinference.project.name=evals``) and ``OTEL_SERVICE_NAME`` as the SDK reads them,
    the plugin's name where they name no service."""
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    ours = (
        {"service.version": version}
        if named
        else {"service.name": SERVICE_NAME, "service.version": version}
    )
    return Resource.create(ours)


def _env_timeout() -> bool:
    return any(
        os.environ.get(name)
        for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
    )


def describe(reports: Sequence[ExportReport]) -> str | None:
    """One line when spans were lost, else None."""
    lost = [r for r in reports if r.failed or r.late or r.exported < r.ended]
    if not lost:
        return None
    ended = sum(r.ended for r in reports)
    exported = sum(r.exported for r in reports)
    reason = next((r.reason for r in lost if r.reason), None)
    if reason is None and any(r.late for r in lost):
        reason = f"no answer within {SHUTDOWN_BUDGET_S:g} s at the session's end"
    return (
        f"traces: {ended - exported} of {ended} spans not exported to {reports[0].endpoint} "
        f"({reason or 'the collector refused them'})"
    )

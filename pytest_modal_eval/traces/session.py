"""One process's traces: the session's span (on the controller, or the only process), a span
per benchmark item run here, the run's spans below it (:mod:`.spans`), and the end.

Under xdist each worker exports its own spans, under the controller's session span: the
controller hands its W3C ``traceparent`` to each worker (``workerinput``), and each worker
hands back what became of its spans (``workeroutput``), so that the controller says in one
line what was lost. A detached run (the same pytest command in a container) is one more
process of the same kind: with the same ``OTEL_*`` variables, it exports its own trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.traces import attributes as attrs
from pytest_modal_eval.traces.export import ExportReport, Pipeline, describe
from pytest_modal_eval.traces.settings import REPORT_KEY, TraceSettings
from pytest_modal_eval.traces.spans import RunSpans, fail


class TraceSession:
    """This process's traces; ``traceparent`` (a worker's) puts them under another process's
    session span, else this process starts the session span."""

    def __init__(
        self,
        settings: TraceSettings,
        redactor: Redactor,
        *,
        session_id: str,
        version: str,
        traceparent: str | None = None,
    ) -> None:
        self.redactor = redactor
        self.pipeline = Pipeline(settings, redactor, version)
        self.tracer = self.pipeline.tracer
        self.session_span: Span | None = None
        if traceparent:
            self.root = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
        else:
            self.session_span = self.tracer.start_span(
                "pytest-modal-eval session", attributes={"modal_eval.session.id": session_id}
            )
            self.root = trace.set_span_in_context(self.session_span)
        self.benchmark: Span | None = None
        self._benchmark_context: Context | None = None
        self.spans = RunSpans(self.tracer, redactor, settings.capture_content, self._parent)
        self.reports: list[ExportReport] = []
        self.line: str | None = None

    @property
    def observer(self) -> RunSpans:
        """What the evaluation tells (the ``EvalObserver`` of ``client/observe.py``)."""
        return self.spans

    def _parent(self) -> Context:
        return self._benchmark_context or self.root

    def traceparent(self) -> str:
        """The session span's W3C trace context, for a worker."""
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, context=self.root)
        return carrier.get("traceparent", "")

    @contextlib.contextmanager
    def benchmark_item(self, nodeid: str, name: str, model: str, env_id: str) -> Iterator[None]:
        """Around one benchmark item run in this process (setup, call, teardown)."""
        span = self.tracer.start_span(
            self.redactor.text(f"benchmark {name}"),
            context=self.root,
            attributes=attrs.cleaned(
                self.redactor,
                {
                    "modal_eval.benchmark": name,
                    "modal_eval.model": model,
                    "modal_eval.env_id": env_id,
                    "modal_eval.test_id": nodeid,
                    attrs.AGENT_NAME: env_id,
                },
            ),
        )
        self.benchmark, self._benchmark_context = span, trace.set_span_in_context(span)
        try:
            yield
        finally:
            self.spans.abandon("the benchmark's run stopped before this example finished")
            self.benchmark = self._benchmark_context = None
            span.end()

    def finished(self, outcome: Any, verdict: Any) -> None:
        """The running benchmark's outcome (``runs.outcome.RunOutcome``) and gate verdict
        (``gate.verdict.Verdict``), as ``pytest_modal_eval_finished`` gives them."""
        span = self.benchmark
        if span is None:
            return
        summary = outcome.summary
        found: dict[str, Any] = {
            "modal_eval.run_id": outcome.run_id,
            "modal_eval.run_dir": str(outcome.run_dir),
            "modal_eval.rollouts": outcome.rollouts,
            "modal_eval.examples.selected": outcome.n_selected,
            "modal_eval.examples.errored": len(outcome.errored),
            "modal_eval.verdict": "pass" if verdict.passed else "fail",
            "modal_eval.verdict.reasons": list(verdict.reasons),
            "modal_eval.gate.min_avg_reward": verdict.threshold,
        }
        if summary is not None:
            found.update(
                {
                    attrs.REWARD: summary.mean,
                    "modal_eval.stderr": summary.stderr,
                    "modal_eval.ci_low": summary.ci_low,
                    "modal_eval.ci_high": summary.ci_high,
                    "modal_eval.ci_method": summary.interval,
                    "modal_eval.examples.evaluated": summary.n_examples,
                }
            )
            span.add_event(
                attrs.EVALUATION_EVENT,
                {
                    "gen_ai.evaluation.name": "mean reward",
                    "gen_ai.evaluation.score.value": summary.mean,
                    "gen_ai.evaluation.score.label": "pass" if verdict.passed else "fail",
                },
            )
        for name, value in (outcome.metric_means or {}).items():
            found[f"{attrs.METRIC_PREFIX}{name}"] = value
        span.set_attributes(attrs.cleaned(self.redactor, found))
        if not verdict.passed:
            fail(span, self.redactor, "GateFailed", "; ".join(verdict.reasons))

    def item_failed(self, when: str, message: str) -> None:
        """The running benchmark item failed in ``when`` (setup, call, teardown) for another
        reason than its gate, with ``message`` (already redacted as the report is)."""
        span = self.benchmark
        if span is not None and span.is_recording():
            fail(span, self.redactor, f"{when} error", message.splitlines()[-1] if message else "")

    def finish_worker(self, workeroutput: dict[str, Any] | None) -> None:
        """At an xdist worker's end: export what is left and hand the controller the
        report. Nothing on the process that owns the session span (see
        :meth:`finish_session`)."""
        if self.session_span is not None or workeroutput is None:
            return
        workeroutput[REPORT_KEY] = self.pipeline.shutdown().to_json()

    def worker_finished(self, workeroutput: Mapping[str, Any] | None) -> None:
        """On the controller: a worker's report."""
        data = (workeroutput or {}).get(REPORT_KEY)
        if isinstance(data, dict):
            self.reports.append(ExportReport.from_json(data))

    def finish_session(self, exitstatus: int) -> None:
        """At the session's end, on the process that owns its span: the span ends with the
        exit status, the last spans are exported (not tried again when a worker found the
        collector down) and :attr:`line` says what was lost."""
        span = self.session_span
        if span is None:
            return
        span.set_attribute("modal_eval.exit_status", int(exitstatus))
        if int(exitstatus) != 0:
            span.set_status(Status(StatusCode.ERROR, f"exit status {int(exitstatus)}"))
        span.end()
        down = any(r.failed or r.late for r in self.reports)
        self.reports.append(self.pipeline.shutdown(drop=down))
        self.line = describe(self.reports)

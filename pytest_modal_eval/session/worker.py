"""The hooks every process has: an xdist worker's, the controller's and the only process's.

Each hook is a few lines that call a plain object: secrets out of reports, log records,
warnings and internal errors (:class:`~pytest_modal_eval.report.redaction.RedactedOutput`),
the words ``-v`` prints for examples and the passed examples' reports pytest need not keep
(:mod:`pytest_modal_eval.collect.example_reports`), and collection's server plan
(:class:`~pytest_modal_eval.collect.server_plan.ServerPlan`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_modal_eval.collect.example_reports import ExampleStatusWords, PassedExampleReports
from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.collect.server_plan import ENDPOINT_FIXTURE, ServerPlan
from pytest_modal_eval.model_names import model_label
from pytest_modal_eval.report.redaction import RedactedOutput

if TYPE_CHECKING:
    from pytest_modal_eval.runs.identity import ModelIdentities
    from pytest_modal_eval.traces.session import TraceSession

#: The name :class:`WorkerSession` is registered under.
WORKER_PLUGIN = "modal_eval_worker"


class WorkerSession:
    """Registered in every process by ``plugin.pytest_configure``."""

    def __init__(
        self,
        config: pytest.Config,
        models: tuple[str, ...],
        redaction: RedactedOutput,
        plan: ServerPlan,
        identities: ModelIdentities,
        tracing: TraceSession | None = None,
    ) -> None:
        self.config = config
        self.models = models
        self.redaction = redaction
        self.plan = plan
        # Which weights answer each model, found once in this process: the benchmark items
        # (through plugin.DeferredRunner) and eval_endpoint ask it.
        self.identities = identities
        self.status_words = ExampleStatusWords()
        # This process's OpenTelemetry traces, when a collector is named (traces/session.py).
        self.tracing = tracing
        self.passed_reports = PassedExampleReports(config)

    def pytest_configure(self, config: pytest.Config) -> None:
        """Runs as this object is registered, in every process: log records are redacted
        from now on."""
        self.redaction.install()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Runs at the end of every process: the previous log record factory comes back."""
        self.redaction.uninstall()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Runs after collection in every collecting process, after other plugins' reordering:
        items of one server profile become neighbours."""
        self.plan.order(items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Runs in every collecting process once the selection is final: the server owner
        learns which item needs which server."""
        self.plan.send(session.items)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Runs at collection in every collecting process: with several ``--model``, a test
        that uses ``eval_endpoint`` runs once per model (``test_x[org--name]``, named as the
        benchmark items' model suffix)."""
        if ENDPOINT_FIXTURE in metafunc.fixturenames and len(self.models) > 1:
            labels = [model_label(model) for model in self.models]
            metafunc.parametrize(ENDPOINT_FIXTURE, self.models, indirect=True, ids=labels)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, Any]:
        """Runs around each item in the process running it: the plan knows which item holds
        the servers it asks for."""
        traced = (
            self.tracing.benchmark_item(
                item.nodeid, item.benchmark.name, item.model or "", item.benchmark.config.env_id
            )
            if self.tracing is not None and isinstance(item, BenchmarkItem)
            else contextlib.nullcontext()
        )
        with self.plan.running(item), traced:
            return (yield)

    def pytest_modal_eval_finished(self, item: pytest.Item, outcome: Any, verdict: Any) -> None:
        """Runs on the process that ran a benchmark, once its gate is judged: its span gets
        the run's figures and the verdict."""
        if self.tracing is not None:
            self.tracing.finished(outcome, verdict)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Runs at the end of every process, after the other implementations (before xdist
        sends a worker's output): an xdist worker's last spans are exported."""
        if self.tracing is not None:
            self.tracing.finish_worker(getattr(self.config, "workeroutput", None))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, Any, Any]:
        """Runs around the other implementations in every process that logs reports: the
        report is redacted before they read it (the terminal, JUnit XML, xdist's channel), and
        a passed example's report is not kept by pytest after they have."""
        self.redaction.redact_report(report)
        if self.tracing is not None and report.failed and not hasattr(report, "context"):
            self.tracing.item_failed(report.when, report.longreprtext)
        result = yield
        self.passed_reports.forget(report)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> Generator[None, Any, Any]:
        """Runs in every process before the other implementations: redacts the report."""
        self.redaction.redact_report(report)
        return (yield)

    @pytest.hookimpl(tryfirst=True)
    def pytest_internalerror(self, excrepr: object) -> None:
        """Runs in every process on an internal error, before the terminal prints it and an
        xdist worker sends it to the controller: redacts the traceback in place."""
        self.redaction.redact_internal_error(excrepr)

    @pytest.hookimpl(tryfirst=True)
    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        """Runs in every process as a warning is recorded, before the warnings summary or an
        xdist worker's channel reads it: redacts its message in place."""
        self.redaction.redact_warning(warning_message)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str | tuple[str, dict[str, bool]]] | None:
        """Runs wherever a report is shown (the controller under xdist), before pytest's
        subtests plugin: an example's word (SOLVED, PARTIAL, MISSED, ERRORED)."""
        return self.status_words.status(report, config)

"""The hooks only the controller has (under xdist), or the only process without it.

Each hook is a few lines that call a plain object: live progress
(:class:`~pytest_modal_eval.report.progress.LiveProgress`), the evaluation summary
(:class:`~pytest_modal_eval.report.terminal.SummaryCollector`), the HTML report
(:class:`~pytest_modal_eval.report.session_report.SessionReport`), sharing to the Hub and
MLflow (:class:`~pytest_modal_eval.share.controller.SessionShare`), the Ctrl-C notice
(:class:`~pytest_modal_eval.report.interrupted.InterruptNotice`), the servers this process
owns (:class:`~pytest_modal_eval.collect.server_plan.FinishedItems`) and, under xdist, the
broker that hands the workers their endpoints and the reference results of a crashed worker's
item.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_modal_eval.collect.context import EvalContext
from pytest_modal_eval.collect.plans import BenchmarkPlans
from pytest_modal_eval.collect.server_plan import FinishedItems
from pytest_modal_eval.report.interrupted import InterruptNotice
from pytest_modal_eval.report.progress import LiveProgress
from pytest_modal_eval.report.session_report import SessionReport
from pytest_modal_eval.report.terminal import SummaryCollector
from pytest_modal_eval.serving.broker import BROKER_INPUT_KEY, Broker
from pytest_modal_eval.serving.deployments import Deployments
from pytest_modal_eval.share.controller import SessionShare
from pytest_modal_eval.traces.settings import TRACEPARENT_KEY

if TYPE_CHECKING:
    from pytest_modal_eval.traces.session import TraceSession

#: The name :class:`ControllerSession` is registered under.
CONTROLLER_PLUGIN = "modal_eval_controller"
#: The name that turns live progress off: ``-p no:modal_eval_progress``.
PROGRESS_OPT_OUT = "modal_eval_progress"
#: The workerinput key of the directory where reference results are handed between items.
REFERENCES_INPUT_KEY = "modal_eval_references"


class ControllerSession:
    """Registered by ``plugin.pytest_configure`` on the controller, or the only process, beside
    its :class:`~pytest_modal_eval.session.worker.WorkerSession`."""

    def __init__(
        self,
        config: pytest.Config,
        session: EvalContext,
        deployments: Deployments,
        share: SessionShare | None,
        tracing: TraceSession | None = None,
    ) -> None:
        self.config = config
        self.session = session
        self.deployments = deployments
        self.finished = FinishedItems(deployments)
        self.summary = SummaryCollector(config.rootpath)
        self.notice = InterruptNotice(config, session.interrupted, session.redactor)
        blocked = config.pluginmanager.is_blocked(PROGRESS_OPT_OUT)
        self.progress = None if blocked else LiveProgress(config, session.redactor.text)
        report = session.settings.report
        self.report = (
            SessionReport(report, session.redactor, session.interrupted_runs)
            if report is not None
            else None
        )
        self.share = share
        self.broker: Broker | None = None
        self.tracing = tracing
        self.plans = BenchmarkPlans(session)
        self.collection_errors = 0  # benchmarks' collection errors workers reported (xdist)

    def _keepers(self) -> list[SummaryCollector | SessionReport | SessionShare | FinishedItems]:
        """The objects that keep something of each report."""
        return [k for k in (self.summary, self.report, self.share, self.finished) if k is not None]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Runs on the controller once the terminal reporter is there: progress decides
        terminal or plain lines, or none."""
        if self.progress is not None:
            self.progress.start(self.config.get_verbosity(pytest.Config.VERBOSITY_SUBTESTS))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, Any, Any]:
        """Runs on the controller around every other implementation (the terminal's line
        included): progress is erased before and drawn after; the summary, the report, sharing
        and the server owner keep what the report says."""
        with self.progress.reporting(report) if self.progress else nullcontext():
            result = yield
            for keeper in self._keepers():
                keeper.add(report)
            if str(report.when) == "???":  # xdist's phase for the item of a crashed worker
                self._crashed(report.nodeid)
            return result

    def _crashed(self, nodeid: str) -> None:
        """A crashed worker's item leaves no reference results: say so for it, or a challenger
        on another worker would wait for them forever."""
        from pytest_modal_eval.gate.reference import ReferenceBoard  # only after a crash

        if self.session.references_dir is not None:
            ReferenceBoard(self.session.references_dir).post_failure(
                nodeid, f"{nodeid} crashed its worker"
            )

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logstart(self) -> Generator[None, Any, Any]:
        """Runs on the controller around the terminal reporter's writing of a test's path."""
        with self.progress.writing() if self.progress else nullcontext():
            return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logfinish(self) -> Generator[None, Any, Any]:
        """Runs on the controller around the end of a test's reporting."""
        with self.progress.test_finishing() if self.progress else nullcontext():
            return (yield)

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self) -> None:
        """Runs on the controller at Ctrl-C, before pytest reports it."""
        if self.progress is not None:
            self.progress.erase()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(
        self, session: pytest.Session, exitstatus: int
    ) -> Generator[None, Any, Any]:
        """Runs on the controller around the other implementations: before them, the runs are
        shared (a failed share fails the session) and the HTML report written; after the
        terminal reporter's own, an interrupted session's kept examples are told."""
        if self.progress is not None:
            self.progress.finish()
        shared = self.share.share() if self.share is not None else True
        if not shared and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.report is not None:
            self.report.write()
        if self.tracing is not None:
            self.tracing.finish_session(session.exitstatus)
        result = yield
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if exitstatus == pytest.ExitCode.INTERRUPTED and reporter is not None:
            self.notice.write(reporter, workers=self.broker is not None)
        return result

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Runs on the controller once the selection is final: under ``--collect-only -v``,
        the benchmarks to plan (printed with the summary)."""
        if self.config.option.collectonly and self.config.get_verbosity() > 0:
            self.plans.add(session.items)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Runs on the controller: what was shared, where the report is, the summary table;
        under ``--collect-only -v``, each selected benchmark's plan."""
        if self.share is not None:
            self.share.write(terminalreporter)
        if self.report is not None:
            self.report.say_where(terminalreporter)
        self.summary.write(terminalreporter)
        if self.tracing is not None and self.tracing.line is not None:
            terminalreporter.write_line(self.tracing.line, yellow=True)
        self.plans.write(terminalreporter)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Under xdist, a benchmark's collection error reaches the controller from a worker,
        and xdist would run the items that did collect: the session stops instead, before any
        item asks for a server, as pytest stops on a collection error without xdist (unless
        ``--continue-on-collection-errors``)."""
        if not report.failed or self.config.option.continue_on_collection_errors:
            return
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is None or Path(report.nodeid.split("::")[0]).suffix not in (".yaml", ".yml"):
            return  # without xdist pytest stops; another kind of file is xdist's business
        self.collection_errors += 1
        count = self.collection_errors
        dsession.shouldstop = f"{count} error{'s' * (count != 1)} during collection"

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Runs on the controller for each xdist worker: hands it the broker's address (where it
        also tells the controller every secret it knows) and the reference results'
        directory."""
        if self.broker is None:
            self.broker = Broker(self.deployments, self.session.redactor)
            self.broker.start()
        node.workerinput[BROKER_INPUT_KEY] = [self.broker.url, self.broker.token]
        node.workerinput[REFERENCES_INPUT_KEY] = str(self.session.references_dir)
        if self.tracing is not None:
            node.workerinput[TRACEPARENT_KEY] = self.tracing.traceparent()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Runs on the controller as each xdist worker ends: what became of its spans."""
        if self.tracing is not None:
            self.tracing.worker_finished(getattr(node, "workeroutput", None))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Runs at the controller's end: stops the broker and the servers it owns, and removes
        the reference results' directory."""
        if self.broker is not None:
            self.broker.stop()
        self.deployments.stop_all()
        if self.session.references_dir:
            shutil.rmtree(Path(self.session.references_dir), ignore_errors=True)

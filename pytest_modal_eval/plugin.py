"""Entry point (``pytest11``): options, plugin objects, collection hook. Little else."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval import fixtures
from pytest_modal_eval.collect.example_reports import ExampleStatusWords, PassedExampleReports
from pytest_modal_eval.collect.items import (
    RUNNER_KEY,
    BenchmarkFile,
    BenchmarkItem,
    ItemRunner,
    is_benchmark_file,
)
from pytest_modal_eval.collect.server_plan import PLAN_KEY, ServerPlan
from pytest_modal_eval.collect.session import SESSION_KEY, EvalSession
from pytest_modal_eval.config.options import add_options, resolve_settings
from pytest_modal_eval.report.progress import LiveProgress
from pytest_modal_eval.report.session_report import SessionReport
from pytest_modal_eval.report.terminal import SummaryCollector
from pytest_modal_eval.serving.deployments import (
    BROKER_INPUT_KEY,
    DEPLOYMENTS_KEY,
    SOURCE_KEY,
    Broker,
    BrokerClient,
    Deployments,
)
from pytest_modal_eval.share import controller as share


def pytest_addoption(parser: pytest.Parser) -> None:
    """Registers the plugin's option group and ini keys (every process)."""
    add_options(parser)
    share.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Adds the plugin's own hook specifications."""
    from pytest_modal_eval import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    """Builds the per-process plugin objects; on a worker, connects to the controller's broker."""
    settings = resolve_settings(config)
    _check_path_options(config)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    references = (workerinput or {}).get(REFERENCES_INPUT_KEY) or _new_references_dir()
    config.stash[SESSION_KEY] = EvalSession(config, settings, references_dir=Path(references))
    config.pluginmanager.register(config.stash[SESSION_KEY], "modal_eval_session")
    config.stash[RUNNER_KEY] = DeferredRunner(config.stash[SESSION_KEY])
    config.pluginmanager.register(PassedExampleReports(config), "modal_eval_passed_reports")
    config.pluginmanager.register(ExampleStatusWords(), "modal_eval_example_status")
    config.pluginmanager.register(fixtures, "modal_eval_fixtures")
    config.stash[PLAN_KEY] = ServerPlan(config, settings)
    config.pluginmanager.register(config.stash[PLAN_KEY], "modal_eval_server_plan")
    if workerinput is not None and BROKER_INPUT_KEY in workerinput:
        url, token = workerinput[BROKER_INPUT_KEY]
        config.stash[SOURCE_KEY] = BrokerClient(url, token)
    else:
        deployments = Deployments(settings, settings.output_dir / "logs")
        config.stash[DEPLOYMENTS_KEY] = deployments
        config.stash[SOURCE_KEY] = deployments
        # Its teardown-report hook stops each server once the plan no longer needs it.
        config.pluginmanager.register(deployments, "modal_eval_deployments")
    if workerinput is None:
        if settings.backend == "modal" and settings.model and not config.option.collectonly:
            _check_modal_credentials()
        config.pluginmanager.register(SummaryCollector(config.rootpath), "modal_eval_summary")
        # Opt out with -p no:modal_eval_progress (registering a blocked name does nothing).
        config.pluginmanager.register(LiveProgress(config), "modal_eval_progress")
        if settings.report is not None:
            config.pluginmanager.register(SessionReport(settings.report), "modal_eval_report")
        share.configure(config, settings.output_dir)
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(XdistController(config), "modal_eval_xdist")


class DeferredRunner:
    """This process's :class:`ItemRunner`: the evaluation (verifiers, numpy, scipy, syrupy) is
    imported when the first benchmark item runs, so a pytest session without one -- any test
    suite in an environment where the plugin is installed -- never pays for it."""

    def __init__(self, session: EvalSession) -> None:
        self.session = session
        self._runner: ItemRunner | None = None

    def _get(self) -> ItemRunner:
        if self._runner is None:
            from pytest_modal_eval.collect.item_run import BenchmarkRunner

            self._runner = BenchmarkRunner(self.session)
        return self._runner

    def prepare(self, item: BenchmarkItem) -> None:
        self._get().prepare(item)

    def evaluate(self, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
        self._get().evaluate(item, subtests, snapshot)

    def release(self, item: BenchmarkItem) -> None:
        self._get().release(item)


REFERENCES_INPUT_KEY = "modal_eval_references"


def _new_references_dir() -> str:
    # Named now, created only when a reference model posts results (most sessions never do).
    return str(Path(tempfile.gettempdir()) / f"pytest-modal-eval-{uuid.uuid4().hex[:12]}")


def _check_path_options(config: pytest.Config) -> None:
    """Catch ``--model /abs/dir`` written with a space: pytest took the path as a test path.

    pytest picks its rootdir (and ini file) from the command line's paths before plugins
    register their options, so a path value given as a separate word moves the rootdir away
    from the project and nothing is collected. ``--model=/abs/dir`` is unambiguous.
    """
    args = list(config.invocation_params.args)
    here = Path(config.invocation_params.dir)
    for flag in ("--model", "--vllm-python", "--eval-output-dir"):
        if flag not in args[:-1]:
            continue
        value = Path(args[args.index(flag) + 1]).expanduser()
        if value.is_absolute() and value.exists() and not value.is_relative_to(here):
            raise pytest.UsageError(
                f"{flag} {value}: pytest also reads a path given as a separate word as a test "
                f"path, and chooses its rootdir from it (now {config.rootpath}). Write "
                f"{flag}={value} instead."
            )


def _check_modal_credentials() -> None:
    """Fail before collection, without network, when Modal cannot be used from here."""
    import os

    from pytest_modal_eval.exceptions import ServingError
    from pytest_modal_eval.serving.modal.backend import check_modal_token, upstream_headers

    try:
        check_modal_token()
        upstream_headers(os.environ)
    except ServingError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stops the servers this process owns (the controller's, or the in-process ones)."""
    deployments = config.stash.get(DEPLOYMENTS_KEY, None)
    if deployments is not None:
        deployments.stop_all()
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and session.references_dir and not hasattr(config, "workerinput"):
        shutil.rmtree(session.references_dir, ignore_errors=True)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A benchmark YAML (matching ini ``modal_eval_files``, or named explicitly) -> collector."""
    explicit = parent.session.isinitpath(file_path)
    if is_benchmark_file(file_path, parent.config, explicit):
        return BenchmarkFile.from_parent(parent, path=file_path)
    return None


class XdistController:
    """Registered on the controller only when xdist is present: owns the broker."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.broker: Broker | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Runs on the controller for each worker: hands it the broker's address."""
        if self.broker is None:
            self.broker = Broker(self.config.stash[DEPLOYMENTS_KEY])
            self.broker.start()
        node.workerinput[BROKER_INPUT_KEY] = [self.broker.url, self.broker.token]
        node.workerinput[REFERENCES_INPUT_KEY] = str(self.config.stash[SESSION_KEY].references_dir)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Runs on the controller: a crashed worker's item ("???") leaves no reference results,
        so say so for it, or a challenger on another worker would wait for them forever."""
        if str(report.when) == "???":  # xdist's phase for the item of a crashed worker
            from pytest_modal_eval.judge.reference import ReferenceBoard  # only after a crash

            session = self.config.stash[SESSION_KEY]
            if session.references_dir is not None:
                ReferenceBoard(session.references_dir).post_failure(
                    report.nodeid, f"{report.nodeid} crashed its worker"
                )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.broker is not None:
            self.broker.stop()

"""Entry point (``pytest11``): options, the session objects that hold the hooks, collection.
Little else."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_modal_eval import fixtures, phases
from pytest_modal_eval.collect.context import (
    CONTEXT_KEY,
    DEPLOYMENTS_KEY,
    SOURCE_KEY,
    EvalContext,
    served_model,
    session_redactor,
)
from pytest_modal_eval.collect.items import (
    RUNNER_KEY,
    BenchmarkFile,
    BenchmarkItem,
    is_benchmark_file,
)
from pytest_modal_eval.collect.server_plan import PLAN_KEY, ServerPlan
from pytest_modal_eval.config.backends import backend
from pytest_modal_eval.config.locations import session_logs_dir
from pytest_modal_eval.config.options import add_options, resolve_settings
from pytest_modal_eval.detach.commit_signal import CommitSignal
from pytest_modal_eval.exceptions import OptionError, ShareError
from pytest_modal_eval.report.redaction import RedactedOutput
from pytest_modal_eval.runs.identity import ModelIdentities
from pytest_modal_eval.serving.broker import BROKER_INPUT_KEY, BrokerClient, PhaseForwarder
from pytest_modal_eval.serving.deployments import Deployments
from pytest_modal_eval.session.controller import (
    CONTROLLER_PLUGIN,
    REFERENCES_INPUT_KEY,
    ControllerSession,
)
from pytest_modal_eval.session.worker import WORKER_PLUGIN, WorkerSession
from pytest_modal_eval.share import controller as share
from pytest_modal_eval.traces import settings as trace_settings

if TYPE_CHECKING:
    from pytest_modal_eval.traces.session import TraceSession


def pytest_addoption(parser: pytest.Parser) -> None:
    """Registers the plugin's option group and ini keys (every process)."""
    add_options(parser)
    share.add_options(parser)
    trace_settings.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Adds the plugin's own hook specifications."""
    from pytest_modal_eval import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Any:
    """Runs first, in the process pytest was started in: with ``--detach``, xdist starts no
    workers here (``-n`` travels with the arguments to the container, which runs them)."""
    if getattr(config.option, "modal_eval_detach", False) and hasattr(config.option, "dist"):
        config.option.numprocesses = 0
        config.option.distload = False
        config.option.dist = "no"
    return (yield)


def pytest_configure(config: pytest.Config) -> None:
    """Builds this process's state and registers its session objects, which hold every other
    hook: a :class:`WorkerSession` in every process, and on the controller (or the only
    process) a :class:`ControllerSession` beside it. On a worker, endpoints come from the
    controller's broker."""
    try:
        settings = resolve_settings(config)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_path_options(config)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    references = (workerinput or {}).get(REFERENCES_INPUT_KEY) or _new_references_dir()
    redactor = session_redactor(settings)
    session = config.stash[CONTEXT_KEY] = EvalContext(
        config,
        settings,
        references_dir=Path(references),
        redactor=redactor,
        # Workers share the controller's session id, so a run's lock names "this session".
        session_id=str((workerinput or {}).get("testrunuid") or uuid.uuid4().hex),
        worker=(workerinput or {}).get("workerid"),
    )
    tracing = _traces(config, session, workerinput)
    identities = ModelIdentities(served_model(session), getattr(config, "cache", None))
    config.stash[RUNNER_KEY] = DeferredRunner(session, identities)
    config.stash[PLAN_KEY] = plan = ServerPlan(config, settings)
    config.pluginmanager.register(fixtures, "modal_eval_fixtures")
    # Every process, xdist workers included: reports and log records are redacted where made.
    worker = WorkerSession(
        config, settings.models, RedactedOutput(redactor), plan, identities, tracing
    )
    config.pluginmanager.register(worker, WORKER_PLUGIN)
    if workerinput is not None:
        url, token = workerinput[BROKER_INPUT_KEY]
        config.stash[SOURCE_KEY] = broker = BrokerClient(url, token)
        # The controller writes the servers' logs, the report and what is shared: it learns
        # every secret this worker knows (a benchmark's env_args, as it is collected) before
        # the worker goes on.
        redactor.tell(broker.learn_secrets)
        # Its set-up phases (an environment loading) are shown on the controller's terminal.
        config.add_cleanup(
            phases.listen(PhaseForwarder(broker, str(workerinput.get("workerid", "worker"))))
        )
        return
    deployments = Deployments(settings, session_logs_dir(settings.output_dir), redactor)
    config.stash[DEPLOYMENTS_KEY] = config.stash[SOURCE_KEY] = deployments
    spec = backend(settings.backend)
    if spec.on_modal and settings.model and not config.option.collectonly:
        _check_modal_credentials()
    if settings.detach is not None:
        _register_detached(config, session, spec.runs_here)
        return
    # A server started on this machine reads a local --model directory itself (checked under
    # --collect-only too: it needs no request).
    if spec.runs_here:
        _check_local_models(settings.models)
    try:
        sharing = share.configure(config, settings.output_dir, redactor)
    except ShareError as exc:
        raise pytest.UsageError(str(exc)) from None
    controller = ControllerSession(config, session, deployments, sharing, tracing)
    config.pluginmanager.register(controller, CONTROLLER_PLUGIN)
    signal = CommitSignal.from_env()
    if signal is not None:  # in a detached runner's container: commit as examples finish
        from pytest_modal_eval.session.container import CONTAINER_PLUGIN, ContainerSession

        config.pluginmanager.register(ContainerSession(signal), CONTAINER_PLUGIN)


def _register_detached(config: pytest.Config, session: EvalContext, runs_here: bool) -> None:
    """``--detach``: the session is handed to Modal after collection, not run here."""
    from pytest_modal_eval.session.detached import DETACHED_PLUGIN, DetachedSession

    if runs_here:
        raise pytest.UsageError(
            "--detach runs the session in a CPU container on Modal, which cannot run vLLM "
            "itself: serve the model with --backend modal, or give --base-url of an endpoint "
            "Modal can reach"
        )
    if getattr(config.option, "update_snapshots", False) or getattr(
        config.option, "update_new_snapshots_only", False
    ):
        raise pytest.UsageError(
            "--snapshot-update with --detach would store baselines in the container's copy of "
            "the project: run the session detached, `pytest-modal-eval pull RUN`, then "
            "`pytest ... --snapshot-update` here (it finds the run finished and asks nothing)"
        )
    config.pluginmanager.register(DetachedSession(config, session), DETACHED_PLUGIN)


def _traces(
    config: pytest.Config, session: EvalContext, workerinput: dict[str, Any] | None
) -> TraceSession | None:
    """This process's traces when the OTLP variables or ``--otel-endpoint`` name a collector
    (OpenTelemetry is imported only then); the evaluation's observer is theirs."""
    try:
        found = trace_settings.resolve(
            config.getoption(trace_settings.ENDPOINT_DEST),
            config.getini(trace_settings.ENDPOINT_INI),
        )
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    if found is None or config.option.collectonly:
        return None
    # The headers' values (an Authorization) are secrets: never in anything written or shown.
    session.redactor.learn(trace_settings.header_values())
    if session.settings.detach is not None:
        return None  # traced where it runs (its container), not where it was typed
    from importlib.metadata import version

    from pytest_modal_eval.traces.session import TraceSession

    tracing = TraceSession(
        found,
        session.redactor,
        session_id=session.session_id,
        version=version("pytest-modal-eval"),
        traceparent=(workerinput or {}).get(trace_settings.TRACEPARENT_KEY),
    )
    session.observer = tracing.observer
    return tracing


class DeferredRunner:
    """This process's :class:`ItemRunner`: each call goes to :mod:`.collect.item_run`, which
    (with verifiers, numpy, scipy and syrupy) is imported when the first benchmark item runs,
    so a pytest session without one -- any test suite in an environment where the plugin is
    installed -- never pays for it."""

    def __init__(self, session: EvalContext, identities: ModelIdentities) -> None:
        self.session = session
        self.identities = identities

    def prepare(self, item: BenchmarkItem) -> None:
        from pytest_modal_eval.collect import item_run

        item_run.freeze_imported()
        item_run.prepare(self.session, item, self.identities)

    def evaluate(self, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
        from pytest_modal_eval.collect import item_run

        item_run.evaluate(self.session, item, subtests, snapshot)

    def release(self, item: BenchmarkItem) -> None:
        from pytest_modal_eval.collect import item_run

        item_run.release(self.session, item)


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


def _check_local_models(models: tuple[str, ...]) -> None:
    """``--backend local``: a ``--model`` directory must exist and hold a model, checked
    before anything is collected or started."""
    from pytest_modal_eval.serving.preflight import model_dir_problem

    for model in models:
        problem = model_dir_problem(model)
        if problem is not None:
            raise pytest.UsageError(problem)


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


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A benchmark YAML (matching ini ``modal_eval_files``, or named explicitly) -> collector."""
    explicit = parent.session.isinitpath(file_path)
    if is_benchmark_file(file_path, parent.config, explicit):
        return BenchmarkFile.from_parent(parent, path=file_path)
    return None

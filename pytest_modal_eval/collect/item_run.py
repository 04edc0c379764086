"""The work of one benchmark item: prepare its endpoint, evaluate it, decide its gate
(its comparisons are in :mod:`.comparisons`, the verdict's record in ``gate/record.py``).

Imported only when a benchmark item runs, so installing the plugin costs an unrelated test
suite nothing at start-up (this module pulls in verifiers, scipy and syrupy).
"""

from __future__ import annotations

import contextlib
import gc
import logging
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_modal_eval import phases
from pytest_modal_eval.client import verifiers_adapter
from pytest_modal_eval.collect import framework
from pytest_modal_eval.collect.comparisons import (
    baseline_comparison,
    is_reference,
    reference_board,
    reference_comparison,
    results_of,
)
from pytest_modal_eval.collect.context import EvalContext, endpoint_source
from pytest_modal_eval.collect.early_comparisons import early_comparisons
from pytest_modal_eval.collect.example_reports import STATUS_KEY, PassedExampleLog
from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.collect.precheck import env_args_source
from pytest_modal_eval.config.backends import backend
from pytest_modal_eval.exceptions import (
    DirectClientError,
    EndpointError,
    EnvironmentLoadError,
    EvalProblem,
    RunAborted,
    RunLockError,
    ServerStartError,
)
from pytest_modal_eval.gate.baseline import (
    StoredBaseline,
    read_stored,
)
from pytest_modal_eval.gate.record import record_verdict
from pytest_modal_eval.gate.verdict import VS_REFERENCE, decide
from pytest_modal_eval.report.interrupted import kept_line
from pytest_modal_eval.report.junit import PROPERTY_PREFIX, record_properties
from pytest_modal_eval.report.progress import example_fields
from pytest_modal_eval.runs import heap
from pytest_modal_eval.runs.early_stop import describe as describe_early_stop
from pytest_modal_eval.runs.evaluation import BenchmarkRun
from pytest_modal_eval.runs.example_status import example_status
from pytest_modal_eval.runs.identity import (
    ModelIdentities,
    ModelIdentity,
    pin_revision,
    served_revision_problem,
)
from pytest_modal_eval.runs.locate import runs_in
from pytest_modal_eval.runs.outcome import ExampleResult, RunOutcome
from pytest_modal_eval.runs.paths import model_run_dir
from pytest_modal_eval.runs.request import RunRequest
from pytest_modal_eval.runs.writer_lock import WriterSpec
from pytest_modal_eval.serving.endpoint import EndpointInfo, ServerRequest
from pytest_modal_eval.stats.format import describe_comparison, describe_score
from pytest_modal_eval.terminal_text import escape


@dataclass(frozen=True)
class Prepared:
    """What setup hands to the call."""

    run: BenchmarkRun
    endpoint: EndpointInfo | None  # None: every selected example is finished, no server started
    stored: StoredBaseline


PREPARED_KEY = pytest.StashKey[Prepared]()

log = logging.getLogger("pytest_modal_eval")


def prepare(session: EvalContext, item: BenchmarkItem, identities: ModelIdentities) -> None:
    """Runs in the item's setup (on the process running it): checks, the environment, the
    model's identity (``identities``, the process's), then the endpoint, unless every selected
    example is already finished (then no server is started)."""
    settings = session.settings
    if not item.model:
        raise EvalProblem(
            f"{item.benchmark.name}: no model given. Pass --model ORG/NAME (a Hugging Face "
            "id or a local directory); deselect evaluations with -m 'not eval'."
        )
    config = item.benchmark.config
    # First, while the process is small (see read_stored).
    snapshot: Any = item.funcargs["snapshot"]
    stored = read_stored(snapshot)
    request = item.server_request
    paired, comparison_open = (
        early_comparisons(session, item, stored) if config.gate.early_stop else ((), None)
    )
    try:
        identity = identities.of(request)
    except EndpointError as exc:  # the endpoint serves another model: nothing to reuse either
        raise EvalProblem(f"{item.benchmark.name}: {exc}") from None
    # (The environment is installed and a bundled one's data files are there: collection
    # checked, collect/precheck.py.) The framework, if it needs one: beside the server's
    # start-up when there is no run to continue (collect/framework.py).
    early: EndpointInfo | None = None
    if _server_first(session, item):
        with framework.importing_beside(item.benchmark.name, config):
            early = _endpoint(session, item, pin_revision(request, identity))
    framework.import_framework(item.benchmark.name, config)
    freeze_imported()
    run_request = RunRequest(
        benchmark=item.benchmark,
        model=item.model,
        output_dir=settings.output_dir,
        index_key=item.nodeid,
        cache=getattr(session.config, "cache", None),
        # --cache-clear starts over too, although the run directories would still be found.
        fresh=settings.fresh or bool(getattr(session.config.option, "cacheclear", False)),
        server=request.profile(),
        endpoint_identity=request.endpoint_identity,
        applies_template=request.applies_template
        if backend(request.backend).starts_server
        else None,
        gpu_prices=dict(settings.gpu_prices),
        identity=identity,
        redactor=session.redactor,
        comparison_open=comparison_open,
        paired=paired,
        writer=WriterSpec(
            session=session.session_id,
            item=item.nodeid,
            worker=session.worker,
            timeout_s=settings.lock_timeout_s,
            say=lambda line: _say(session, f"{item.benchmark.name}: {line}"),
        ),
        observer=session.observer,
        shard=settings.shard,
        container=settings.container,
    )
    try:
        with phases.phase(f"{item.benchmark.name}: loading environment {config.env_id}"):
            run = BenchmarkRun(run_request)
    except EnvironmentLoadError as exc:
        source = env_args_source(item.path, settings.overrides, str(exc))
        raise EvalProblem(f"{source}: {exc}") from None
    if settings.shard is not None and not run.selected_ids:
        run.close()
        k, n = settings.shard
        pytest.skip(f"{item.benchmark.name}: shard {k}/{n} holds no example")
    try:
        item.stash[PREPARED_KEY] = _prepare_run(
            session, item, run, request, identity, stored, early
        )
    except BaseException:
        run.close()  # the run's lock, if its run was found and taken
        raise


def freeze_imported() -> None:
    """Move what is alive now (the modules imported so far: pytest, the evaluation, a
    framework's thousands of classes) out of the garbage collector's reach.

    They live until the process ends; every full collection after this (the automatic ones,
    the one after each evaluation, pytest's at the session's end and the interpreter's at exit)
    then walks only what was made later: after ``import verifiers.v1`` (351,000 objects) a full
    collection took 0.63 s on a busy 2-core machine, and under 1 ms once they were frozen.
    Called once the evaluation's modules are imported, and again once an environment's
    framework is."""
    gc.freeze()


def _server_first(session: EvalContext, item: BenchmarkItem) -> bool:
    """Whether the item asks for its server before it loads its environment: a framework is
    to be imported, the backend starts a server, and there is no run to continue (none of this
    benchmark and model in the output directory, or ``--eval-fresh``), so the server is needed
    whatever the environment holds. Not when the environment may have endpoints of its own
    (judges): those are checked before a server (a GPU) is started for nothing. A shard of a
    fanned-out session may hold no example: it loads first."""
    settings = session.settings
    config = item.benchmark.config
    if not item.model or settings.shard is not None or framework.imported(config):
        return False
    if not backend(item.server_request.backend).starts_server:
        return False
    agent = config.agent.model_dump()
    if verifiers_adapter.has_own_endpoints(config.env_id, config.env_args, agent):
        return False
    if settings.fresh or getattr(session.config.option, "cacheclear", False):
        return True
    _, runs_dir = model_run_dir(settings.output_dir, item.benchmark.name, item.model)
    return next(runs_in(runs_dir), None) is None


def _endpoint(session: EvalContext, item: BenchmarkItem, request: ServerRequest) -> EndpointInfo:
    """The endpoint ``request`` is served at (a server started if need be), checked."""
    try:
        info = endpoint_source(session.config).endpoint_for(request, item.nodeid)
        session.checker.check(info.endpoint, timeout=info.check_timeout)
    except (EndpointError, ServerStartError) as exc:
        raise EvalProblem(f"{item.benchmark.name}: {exc}") from None
    if (problem := served_revision_problem(request, info.profile)) is not None:
        raise EvalProblem(f"{item.benchmark.name}: {problem}")
    return info


def _prepare_run(
    session: EvalContext,
    item: BenchmarkItem,
    run: BenchmarkRun,
    request: ServerRequest,
    identity: ModelIdentity,
    stored: StoredBaseline,
    early: EndpointInfo | None,
) -> Prepared:
    """``early``: the endpoint, when it was asked for before the environment was loaded."""
    config = item.benchmark.config
    try:
        with phases.phase(f"{item.benchmark.name}: reading its runs' checkpoints"):
            finished = run.finished_without_server()
        if finished is not None:
            return Prepared(run, None, stored)
    except RunLockError as exc:
        raise EvalProblem(f"{item.benchmark.name}: {exc}") from None
    try:
        # Before the model's server is asked for (unless there was no run to continue): a
        # judge that cannot answer would error every example while that server waits (on
        # Modal, on a paid GPU).
        verifiers_adapter.check_judge_endpoints(run.env, config.eval.request_timeout)
    except EndpointError as exc:
        raise EvalProblem(f"{item.path}: {exc}") from None
    if early is not None:
        return Prepared(run, early, stored)
    return Prepared(run, _endpoint(session, item, pin_revision(request, identity)), stored)


def _say(session: EvalContext, line: str) -> None:
    """A line for the user while an item runs: on the terminal when this process has it (not
    on an xdist worker, whose output pytest shows only in reports), and in the log."""
    line = session.redactor.text(line)
    log.warning("%s", line)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or hasattr(session.config, "workerinput"):
        return
    terminal = session.config.get_terminal_writer()
    capture = session.config.pluginmanager.get_plugin("capturemanager")
    # The item's output is being captured: step outside it, as pytest's live logging does.
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        if terminal.width_of_current_line:
            terminal.line()
        terminal.line(line, yellow=True)
        terminal.flush()


def release(session: EvalContext, item: BenchmarkItem) -> None:
    """Drop what setup prepared (the environment, its rows, the run state), if still held; a
    reference item that left no results says so, so that no other model's item waits for it."""
    if PREPARED_KEY in item.stash:
        item.stash[PREPARED_KEY].run.close()
        del item.stash[PREPARED_KEY]
    if is_reference(session, item):
        reference_board(session).post_failure(
            item.nodeid, f"{item.nodeid} did not finish its evaluation (see its report)"
        )


def evaluate(session: EvalContext, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
    """The call phase: evaluate every example (as subtests), then apply the gate."""
    writer = item.stash[PREPARED_KEY].run.writer
    try:
        _evaluate(session, item, subtests, snapshot)
    finally:
        writer.release()  # after the verdict is written into the run's metadata.json


def _evaluate(session: EvalContext, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
    # Taken out of the stash: the item outlives its call, its environment and rows must not.
    prepared = item.stash[PREPARED_KEY]
    del item.stash[PREPARED_KEY]
    run, stored = prepared.run, prepared.stored
    config = item.benchmark.config
    tolerate_errors = config.gate.max_error_rate > 0
    passed_examples = PassedExampleLog(item)

    def on_example(result: ExampleResult) -> None:
        progress = example_fields(result)  # also what the live progress lines read
        progress[STATUS_KEY] = example_status(result.rewards, result.error)
        msg = f"example {result.example_id}"
        if result.error is None:
            passed_examples.log(msg, **progress)
            return
        with subtests.test(msg=msg, **progress):
            # The error is the server's or environment's text: shown, never obeyed, by a terminal.
            message = f"example {result.example_id} could not be evaluated: {escape(result.error)}"
            if tolerate_errors:
                pytest.skip(f"{message} (counted against gate.max_error_rate)")
            pytest.fail(message, pytrace=False)

    try:
        info = prepared.endpoint
        # The start-up counts for the benchmark whose request started the server.
        waited = info.waited_by(item.nodeid) if info is not None else 0.0
        outcome = run.run(info, on_example, server_startup_s=waited)
    except KeyboardInterrupt:
        if (stopped := run.interrupted) is not None:
            session.interrupted.append(kept_line(item.benchmark.name, item.model or "", stopped))
            session.interrupted_runs.append(str(stopped.run_dir))
        raise
    except (RunAborted, DirectClientError, RunLockError) as exc:
        raise EvalProblem(f"{item.benchmark.name}: {exc}") from None
    finally:
        del run, prepared  # the environment and its dataset: garbage from here (see below)
    if info is not None:
        # Its server is not needed for judging: free it now (a challenger may wait below for
        # its reference, which under --backend local needs the machine's one vLLM slot).
        endpoint_source(session.config).finished(item.nodeid)
    # The run's environment, event loop and connections are garbage now: hand their pages back
    # to the OS before the baseline's text is built (at 100,000 examples this lowered the peak
    # RSS of a run recording a baseline from 301 to 298 MB).
    gc.collect()
    heap.release_free_memory()
    current = results_of(item, outcome)
    if current is not None and is_reference(session, item):
        reference_board(session).post(item.nodeid, current, outcome.run_dir, outcome.run_id)
    comparison, baseline_note, recorded = baseline_comparison(item, current, snapshot, stored)
    reference, reference_note = reference_comparison(session, item, current)
    verdict = decide(outcome, config.gate, comparison, reference)
    if reference is None and item.reference is not None and config.gate.vs_reference is not None:
        # A gate must never go green by not running: without the comparison it was set to
        # make (the reference deselected, reordered after this item, or without results).
        verdict.fail(
            VS_REFERENCE,
            f"gate.vs_reference: no comparison with the reference model {item.reference} was "
            f"possible ({reference_note or 'no results'}); run it in the same session",
        )
    if recorded and not verdict.passed:
        # A baseline is what later runs are judged against: one from a failing run needs a word.
        verdict.warnings.append(
            "the baseline was recorded (--snapshot-update) from a run that failed its gate: "
            + "; ".join(verdict.reasons)
        )
    record_verdict(outcome.run_dir, verdict, reference)
    item.ihook.pytest_modal_eval_finished(item=item, outcome=outcome, verdict=verdict)
    record_properties(item, outcome, verdict, item.model or "", comparison, reference)
    notes = [
        early_stop_note(outcome),
        outcome.wait_note,
        outcome.serving_note,
        outcome.new_run_note,
        outcome.journal_problem,
        baseline_note,
        reference_note,
    ]
    if comparison is not None and session.config.get_verbosity() > 0:
        notes += describe_comparison(comparison)
    for note in notes:
        if note:
            item.user_properties.append((f"{PROPERTY_PREFIX}note", note))
    if reference is not None:
        for line in describe_comparison(reference.comparison, "reference", "this model"):
            item.user_properties.append((f"{PROPERTY_PREFIX}comparison", line))
    if not verdict.passed:
        raise EvalProblem(failure_message(item, outcome, verdict.reasons))


def early_stop_note(outcome: RunOutcome) -> str | None:
    """What the record says of ``gate.early_stop``: how the run was decided, or why not."""
    if outcome.early_decision is not None:
        evaluated = outcome.summary.n_examples if outcome.summary else 0
        return describe_early_stop(outcome.early_decision, evaluated)
    if outcome.early_stop is not None:
        return f"early stop: {outcome.early_stop.get('reason')}"
    return None


def failure_message(item: BenchmarkItem, outcome: RunOutcome, reasons: list[str]) -> str:
    summary = outcome.summary
    evaluated = summary.n_examples if summary else 0
    lines = [f"{item.name}: gate failed"]  # the benchmark's name, with the model when several
    lines += [f"  - {reason}" for reason in reasons]
    lines.append(
        f"  score {describe_score(outcome)}; {evaluated} examples x {outcome.rollouts} rollouts"
        f" evaluated, {len(outcome.errored)} errored"
    )
    lines.append(f"  run: {outcome.run_dir}")
    return "\n".join(lines)

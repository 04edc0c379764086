"""The work of one benchmark item: prepare its endpoint, evaluate it, judge it.

Imported only when a benchmark item runs, so installing the plugin costs an unrelated test
suite nothing at start-up (this module pulls in verifiers, scipy and syrupy).
"""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.client import verifiers_adapter
from pytest_modal_eval.collect.example_reports import STATUS_KEY, PassedExampleLog, example_status
from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.collect.session import EvalSession
from pytest_modal_eval.exceptions import (
    BaselineError,
    DirectClientError,
    EndpointError,
    EnvironmentLoadError,
    EvalProblem,
    RunAborted,
    ServerStartError,
)
from pytest_modal_eval.judge.baseline import (
    Baseline,
    BaselineStatus,
    StoredBaseline,
    check_baseline,
    read_stored,
)
from pytest_modal_eval.judge.gate import ReferenceComparison, Verdict, judge
from pytest_modal_eval.judge.reference import NoReference, ReferenceBoard
from pytest_modal_eval.report.format import describe_comparison, describe_score
from pytest_modal_eval.report.junit import PROPERTY_PREFIX, record_properties
from pytest_modal_eval.report.progress import example_fields
from pytest_modal_eval.runs import heap
from pytest_modal_eval.runs.evaluation import BenchmarkRun, ExampleResult, RunOutcome, RunRequest
from pytest_modal_eval.runs.identity import (
    FingerprintStore,
    ModelIdentity,
    hub_identity,
    local_identity,
    served_identity,
)
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.store import write_json_atomic
from pytest_modal_eval.serving.backends import backend
from pytest_modal_eval.serving.deployments import endpoint_source
from pytest_modal_eval.serving.endpoint import EndpointInfo, ServerRequest
from pytest_modal_eval.stats.summary import PairedComparison, compare_paired


@dataclass(frozen=True)
class Prepared:
    """What setup hands to the call."""

    run: BenchmarkRun
    endpoint: EndpointInfo | None  # None: every selected example is finished, no server started
    stored: StoredBaseline


PREPARED_KEY = pytest.StashKey[Prepared]()


def prepare(session: EvalSession, item: BenchmarkItem) -> None:
    """Runs in the item's setup (on the process running it): checks, the environment, then the
    endpoint, unless every selected example is already finished (then no server is started)."""
    settings = session.settings
    if not item.model:
        raise EvalProblem(
            f"{item.benchmark.name}: no model given. Pass --model ORG/NAME (a Hugging Face "
            "id or a local directory); deselect evaluations with -m 'not eval'."
        )
    config = item.benchmark.config
    env_problem = verifiers_adapter.missing_environment(config.env_id)
    if env_problem:
        raise EvalProblem(f"{item.path}: env_id: {env_problem}")
    # First, while the process is small (see read_stored).
    snapshot: Any = item.funcargs["snapshot"]
    stored = read_stored(snapshot)
    request = ServerRequest.for_benchmark(settings, item.benchmark, item.model)
    try:
        identity = model_identity(session, request)
    except EndpointError as exc:  # the endpoint serves another model: nothing to reuse either
        raise EvalProblem(f"{item.benchmark.name}: {exc}") from None
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
        applies_template=None if request.backend == "endpoint" else request.applies_template,
        gpu_prices=dict(settings.gpu_prices),
        identity=identity,
    )
    try:
        run = BenchmarkRun(run_request)
    except EnvironmentLoadError as exc:
        raise EvalProblem(f"{item.path}: {exc}") from None
    if run.finished_without_server() is not None:
        item.stash[PREPARED_KEY] = Prepared(run, None, stored)
        return
    try:
        # Before the model's server is asked for: a judge that cannot answer would error every
        # example while that server waits (on Modal, on a paid GPU).
        verifiers_adapter.check_judge_endpoints(run.env, config.eval.request_timeout)
    except EndpointError as exc:
        raise EvalProblem(f"{item.path}: {exc}") from None
    request = pin_revision(request, identity)
    try:
        info = endpoint_source(session.config).endpoint_for(request, item.nodeid)
        session.checker.check(info.endpoint, timeout=info.check_timeout)
    except (EndpointError, ServerStartError) as exc:
        raise EvalProblem(f"{item.benchmark.name}: {exc}") from None
    served = (info.profile.get("vllm") or {}).get("revision")
    if request.pinned_revision is not None and served != request.pinned_revision:
        raise EvalProblem(
            f"{item.benchmark.name}: {item.model} resolved to commit {request.pinned_revision} "
            f"for this benchmark, but its server was started at {served} for another (the Hub "
            "moved during the session). Run again, or pin vllm.revision to a commit."
        )
    item.stash[PREPARED_KEY] = Prepared(run, info, stored)


def record_verdict(run_dir: Path, verdict: Verdict) -> None:
    """The gate's verdict in the run's ``metadata.json`` (what ``runs``, ``show``, the report
    and ``pytest_modal_eval_finished`` hooks read): the one of the latest session that judged
    the run. A file that cannot be written leaves a warning, not an error."""
    paths = RunPaths(run_dir)
    metadata = paths.read_metadata()
    if metadata is None:  # not finished (an aborted run has no metadata.json)
        return
    metadata["verdict"] = "pass" if verdict.passed else "fail"
    metadata["gate_reasons"] = list(verdict.reasons)
    try:
        write_json_atomic(paths.metadata, metadata)
    except OSError as exc:  # a read-only copy of a finished run: the verdict stands regardless
        verdict.warnings.append(f"the verdict could not be recorded in {paths.metadata}: {exc}")


def pin_revision(request: ServerRequest, identity: ModelIdentity) -> ServerRequest:
    """``request`` started at the Hub commit its model's identity names, when ``vllm.revision``
    names none: otherwise vLLM would fetch whatever the branch points to when it starts (or,
    on Modal, a warm deployment would keep serving what it fetched before)."""
    commit = identity.hub_commit
    if commit is None or request.vllm.get("revision") == commit:
        return request
    return replace(request, pinned_revision=commit)


def model_identity(session: EvalSession, request: ServerRequest) -> ModelIdentity:
    """Which weights answer, found once per process and model (see ``runs.identity``): what a
    ``--base-url`` endpoint says it serves, a local directory's content digest, or the commit
    the Hub resolves the id (and ``vllm.revision``) to now."""
    revision = request.vllm.get("revision")
    memo = json.dumps([request.backend, request.model, revision, request.base_url])
    if memo not in session.identities:
        if request.backend == "endpoint":
            info = endpoint_source(session.config).endpoint_for(request)
            entry, problem = session.checker.served_model(info.endpoint, info.check_timeout)
            found = served_identity(entry, problem)
        elif Path(request.model).expanduser().is_dir():
            store = FingerprintStore(getattr(session.config, "cache", None))
            found = local_identity(Path(request.model).expanduser(), store)
        else:
            # A vLLM on this machine loads the local Hugging Face cache when the Hub cannot be
            # asked, so there the cached commit is what answers.
            found = hub_identity(
                request.model, revision, cache_serves=backend(request.backend).runs_here
            )
        session.identities[memo] = found
    return session.identities[memo]


def release(session: EvalSession, item: BenchmarkItem) -> None:
    """Drop what setup prepared (the environment, its rows, the run state), if still held; a
    reference item that left no results says so, so that no other model's item waits for it."""
    if PREPARED_KEY in item.stash:
        del item.stash[PREPARED_KEY]
    if _is_reference(session, item):
        _board(session).post_failure(
            item.nodeid, f"{item.nodeid} did not finish its evaluation (see its report)"
        )


def _is_reference(session: EvalSession, item: BenchmarkItem) -> bool:
    """The first model's item of a benchmark, when several models are compared."""
    return len(session.settings.models) > 1 and item.model == session.settings.models[0]


def _board(session: EvalSession) -> ReferenceBoard:
    assert session.references_dir is not None
    return ReferenceBoard(session.references_dir)


def evaluate(session: EvalSession, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
    """The call phase: evaluate every example (as subtests), then apply the gate."""
    # Taken out of the stash: the item outlives its call, its environment and rows must not.
    prepared = item.stash[PREPARED_KEY]
    del item.stash[PREPARED_KEY]
    run, stored = prepared.run, prepared.stored
    config = item.benchmark.config
    tolerate_errors = config.gate.max_error_rate > 0
    started = time.monotonic()
    passed_examples = PassedExampleLog(item)

    def on_example(result: ExampleResult) -> None:
        progress = example_fields(result)  # also what the live progress lines read
        progress[STATUS_KEY] = example_status(result.rewards, result.error)
        msg = f"example {result.example_id}"
        if result.error is None:
            passed_examples.log(msg, **progress)
            return
        with subtests.test(msg=msg, **progress):
            message = f"example {result.example_id} could not be evaluated: {result.error}"
            if tolerate_errors:
                pytest.skip(f"{message} (counted against gate.max_error_rate)")
            pytest.fail(message, pytrace=False)

    try:
        info = prepared.endpoint
        # The start-up counts for the benchmark whose request started the server.
        waited = info.waited_by(item.nodeid) if info is not None else 0.0
        outcome = run.run(info, on_example, server_startup_s=waited)
    except (RunAborted, DirectClientError) as exc:
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
    current = _results_of(item, outcome)
    if current is not None and _is_reference(session, item):
        _board(session).post(item.nodeid, current)
    comparison, baseline_note, recorded = _baseline(item, current, snapshot, stored)
    reference, reference_note = _reference(session, item, current)
    verdict = judge(outcome, config.gate, comparison, reference)
    if reference is None and item.reference is not None and config.gate.vs_reference is not None:
        # A gate must never go green by not running: without the comparison it was set to
        # make (the reference deselected, reordered after this item, or without results).
        verdict.passed = False
        verdict.reasons.append(
            f"gate.vs_reference: no comparison with the reference model {item.reference} was "
            f"possible ({reference_note or 'no results'}); run it in the same session"
        )
    if recorded and not verdict.passed:
        # A baseline is what later runs are judged against: one from a failing run needs a word.
        verdict.warnings.append(
            "the baseline was recorded (--snapshot-update) from a run that failed its gate: "
            + "; ".join(verdict.reasons)
        )
    record_verdict(outcome.run_dir, verdict)
    item.ihook.pytest_modal_eval_finished(item=item, outcome=outcome, verdict=verdict)
    elapsed = time.monotonic() - started
    record_properties(item, outcome, verdict, item.model or "", elapsed, comparison, reference)
    notes = [
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


def _results_of(item: BenchmarkItem, outcome: RunOutcome) -> Baseline | None:
    """The run's per-example means as a baseline record (what a baseline or a reference is)."""
    if not outcome.per_example_rewards:
        return None
    return Baseline.from_rewards(
        benchmark=item.benchmark.name,
        model=item.model or "",
        config_hash=outcome.baseline_hash,
        rewards=outcome.per_example_rewards,
    )


def _baseline(
    item: BenchmarkItem,
    current: Baseline | None,
    snapshot: Any,
    stored_file: StoredBaseline,
) -> tuple[PairedComparison | None, str | None, bool]:
    """Record (--snapshot-update) or load the stored baseline and compare with it; the last
    value says whether a baseline was written."""
    if current is None:
        return None, None, False
    try:
        found = check_baseline(snapshot, current, stored_file, item.reference)
    except BaselineError as exc:
        raise EvalProblem(f"{item.benchmark.name}: {exc}") from None
    recorded = found.status in (BaselineStatus.RECORDED, BaselineStatus.UPDATED)
    if found.status is BaselineStatus.NOT_COMPARED and not _reference_selected(item):
        return (
            None,
            (
                f"no baseline recorded: {stored_file.shown} is recorded from the reference model "
                f"{item.reference} only, which this session does not evaluate (deselected); "
                "select its item too (e.g. drop the -k that excludes it)"
            ),
            False,
        )
    if not found.comparable or found.stored is None:
        return None, found.message, recorded
    stored, gate = found.stored, item.benchmark.config.gate
    comparison = compare_paired(
        stored.per_example,
        current.per_example,
        baseline_binary_single=stored.binary_single,
        run_binary_single=current.binary_single,
        alpha=gate.alpha,
        max_drop=gate.max_drop,
    )
    return comparison, None, recorded


def _reference_selected(item: BenchmarkItem) -> bool:
    """Whether the session evaluates the item of this item's reference model."""
    nodeid = item.reference_nodeid
    return nodeid is not None and nodeid in {other.nodeid for other in item.session.items}


def _reference(
    session: EvalSession, item: BenchmarkItem, current: Baseline | None
) -> tuple[ReferenceComparison | None, str | None]:
    """Compare with the reference model's results of this session (see judge/reference.py)."""
    if item.reference is None or item.reference_nodeid is None or current is None:
        return None, None
    model, nodeid = item.reference, item.reference_nodeid
    if not _reference_selected(item):
        return None, (
            f"the reference model {model} was not evaluated in this session (deselected): "
            "no comparison"
        )
    # Under xdist the reference may be running on another worker: wait for it. In one process
    # it ran before this item (collection order), unless a plugin reordered the items.
    found = _board(session).read(nodeid, wait=hasattr(session.config, "workerinput"))
    if found is None:
        return None, f"the reference model {model} had not been evaluated yet: no comparison"
    if isinstance(found, NoReference):
        return None, f"no results of the reference model {model} ({found.reason}): no comparison"
    # No configuration check: both items come from the same YAML and overrides in this session,
    # so what can differ is each model's own (its chat template, its weights), which is what is
    # being compared.
    gate = item.benchmark.config.gate.vs_reference
    comparison = compare_paired(
        found.per_example,
        current.per_example,
        baseline_binary_single=found.binary_single,
        run_binary_single=current.binary_single,
        alpha=gate.alpha if gate else 0.05,
        max_drop=gate.max_drop if gate else 0.0,
    )
    return ReferenceComparison(model, comparison), None


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


class BenchmarkRunner:
    """The :class:`~pytest_modal_eval.collect.items.ItemRunner` of this process's items."""

    def __init__(self, session: EvalSession) -> None:
        self.session = session

    def prepare(self, item: BenchmarkItem) -> None:
        prepare(self.session, item)

    def evaluate(self, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
        evaluate(self.session, item, subtests, snapshot)

    def release(self, item: BenchmarkItem) -> None:
        release(self.session, item)

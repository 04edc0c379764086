"""One benchmark evaluated once: pick or resume its run, run what is missing, write outputs."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import platform
import subprocess
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from pytest_modal_eval.client import verifiers_adapter
from pytest_modal_eval.client.answer_journal import AnswerJournal
from pytest_modal_eval.client.rollout_seeds import ROLLOUT_COLUMN, SLOT_WAIT_COLUMN, match_rollouts
from pytest_modal_eval.config.loader import Benchmark
from pytest_modal_eval.config.schema import BenchmarkConfig
from pytest_modal_eval.exceptions import EnvironmentLoadError
from pytest_modal_eval.redact import mask_config, mask_profile
from pytest_modal_eval.runs import heap
from pytest_modal_eval.runs.identity import ModelIdentity, describe_change, describe_weights
from pytest_modal_eval.runs.interrupt import run_interruptibly
from pytest_modal_eval.runs.paths import RunPaths, benchmark_dir
from pytest_modal_eval.runs.record import rollout_record
from pytest_modal_eval.runs.resume import (
    PriorRun,
    RunIndex,
    answer_fields,
    canonical_hash,
    comparable_fields,
    differing_fields,
    fingerprint_rows,
)
from pytest_modal_eval.runs.state import RunState
from pytest_modal_eval.runs.store import (
    CHECKPOINT_VERSION,
    Checkpoint,
    new_run_id,
    write_json_atomic,
    write_results,
)
from pytest_modal_eval.serving.costs import ServerTime
from pytest_modal_eval.serving.endpoint import EndpointInfo
from pytest_modal_eval.stats import summary as stats
from pytest_modal_eval.stats.pass_k import PassAtK, parse_metric_name, pass_at_k

#: How much longer the client waits than the proxy's per-request deadline.
PROXY_DEADLINE_MARGIN_S = 30.0
#: Consecutive errored examples after which the endpoint is taken to be down.
ABORT_AFTER_CONSECUTIVE_ERRORS = 20
#: Progress is logged (``--log-cli-level=INFO`` shows it) every this share of the examples.
PROGRESS_STEP = 0.1

log = logging.getLogger("pytest_modal_eval")


@contextlib.contextmanager
def verifiers_log_to(path: Path) -> Any:
    """Send verifiers' own log records to the run's log file, not pytest's captured output.

    verifiers logs every failed rollout at ERROR level; thousands of those would bury the
    gate's short failure message, and they belong with the run anyway.
    """
    logger = logging.getLogger("verifiers")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # verifiers may have attached its own console handler (setup_logging); swap them all.
    previous = logger.propagate, logger.handlers[:]
    logger.handlers = [handler]
    logger.propagate = False
    # HTTP clients log every request at INFO: noise next to the progress lines.
    client_logs = [logging.getLogger(name) for name in ("httpx", "httpx2")]
    client_levels = [client.level for client in client_logs]
    for client in client_logs:
        client.setLevel(max(client.level, logging.WARNING))
    try:
        yield
    finally:
        logger.propagate, logger.handlers = previous
        handler.close()
        for client, level in zip(client_logs, client_levels, strict=True):
            client.setLevel(level)


@dataclass(frozen=True)
class RunRequest:
    """What a run is, known before any server: the benchmark, the model, where runs live."""

    benchmark: Benchmark
    model: str
    output_dir: Path
    index_key: str
    cache: Any  # pytest.Cache | None
    fresh: bool = False
    server: dict[str, Any] = field(default_factory=dict)  # the server profile asked for
    # The answer key's endpoint identity (the URL of a --base-url endpoint; None for servers
    # we start).
    endpoint_identity: str | None = None
    # For a server we start, which decides the chat template part of the key: whether it would
    # apply a finished run's recorded template. None: the key is known without a server.
    applies_template: Callable[[Any], bool] | None = None
    # ini overrides of the Modal GPU price table (USD per GPU-hour), for the cost estimate.
    gpu_prices: dict[str, float] = field(default_factory=dict)
    # Which weights answer (runs.identity); None: not asked, the key says nothing of them.
    identity: ModelIdentity | None = None


@dataclass(frozen=True)
class ExampleResult:
    example_id: int
    rewards: list[float]
    error: str | None
    done: int
    total: int
    running_mean: float | None
    resumed: bool


@dataclass
class RunOutcome:
    run_dir: Path
    run_id: str
    n_selected: int
    rollouts: int
    summary: stats.RewardSummary | None
    errored: dict[int, str]
    truncated_rollouts: int
    metric_means: dict[str, float]
    elapsed_s: float
    resumed_examples: int = 0
    reused_answers: int = 0  # answers journaled before an interruption, not requested again
    journal_problem: str | None = None  # why answers stopped being journaled, if they did
    new_run_note: str | None = None
    serving_note: str | None = None  # why no server was started, when none was
    answer_hash: str = ""
    baseline_hash: str = ""
    # Finished example id -> its rollouts' rewards, as arrays (reads as {str id: [reward]}).
    per_example_rewards: stats.ExampleRewards = field(default_factory=stats.ExampleRewards.empty)
    pass_at_k: list[PassAtK] = field(default_factory=list)  # over the finished examples
    # Server start-up and time used, and on Modal GPU-hours and cost (see serving.costs);
    # None when no server was asked for.
    serving: dict[str, Any] | None = None

    @property
    def error_rate(self) -> float:
        return len(self.errored) / self.n_selected if self.n_selected else 0.0


def model_slug(model: str) -> str:
    """``org/name`` -> ``org--name``; a local directory -> ``local--dirname``."""
    path = Path(model)
    if path.is_dir():
        return f"local--{path.resolve().name}"
    parts = [p for p in model.strip("/").split("/") if p]
    return "--".join(parts) if len(parts) > 1 else f"default--{parts[0]}"


class BenchmarkRun:
    """One benchmark evaluated once, in two steps: opened before any server is asked for
    (environment, rows, the run it continues), then run against the endpoint if it needs one.

    A run whose every selected example is already finished needs no endpoint
    (:meth:`finished_without_server`): on Modal, starting a deployment only to find nothing to
    do costs minutes of GPU time.
    """

    def __init__(self, request: RunRequest) -> None:
        self.started = time.monotonic()
        self.request = request
        config = request.benchmark.config
        self.env = verifiers_adapter.load_environment(
            config.env_id, config.env_args, request.benchmark.path.parent.resolve()
        )
        # Lazy views: rows are decoded a batch at a time whenever they are walked, never held.
        all_rows = verifiers_adapter.dataset_rows(self.env, None)
        n = config.eval.num_examples
        self.rows = all_rows[:n] if n else all_rows
        self.selected_ids = self.rows.example_ids()
        self.rollouts = config.eval.rollouts
        self.sampling = config.sampling.as_request_args()
        self._dataset = fingerprint_rows(all_rows)
        self.slug = model_slug(request.model)
        self.benchmark_dir = benchmark_dir(request.output_dir, request.benchmark.name, self.slug)
        # Keyed by output directory too: runs written elsewhere are not continued here.
        item_key = canonical_hash([request.index_key, request.model, str(self.benchmark_dir)], 8)
        self.index = RunIndex(
            request.cache, f"{request.benchmark.name}-{item_key}", self.benchmark_dir
        )
        self._finished: PriorRun | None = None  # its state is the one _state_of kept
        self._last_read: tuple[Path, RunState] | None = None

    def answer_fields(self, chat_template: dict[str, str] | str | None) -> dict[str, Any]:
        config = self.request.benchmark.config
        return answer_fields(
            model=self.request.model,
            env_id=config.env_id,
            env_args=config.env_args,
            dataset_fingerprint=self._dataset,
            sampling=self.sampling,
            rollouts=self.rollouts,
            chat_template=chat_template,
            vllm=config.vllm.model_dump(),
            endpoint_identity=self.request.endpoint_identity,
            weights=self.request.identity.key if self.request.identity else None,
        )

    @property
    def unchecked(self) -> str | None:
        """Why the weights could not be checked, when they could not."""
        return self.request.identity.unchecked if self.request.identity else None

    def finished_without_server(self) -> PriorRun | None:
        """The run this one continues if it has every selected example finished, found
        without a server; then :meth:`run` needs no endpoint.

        When the weights could not be checked, the newest finished run that matches in all
        else is reused, and the outcome's note says its weights were not checked.
        """
        if self.request.fresh:
            return None
        config = self.request.benchmark.config
        applies = self.request.applies_template
        ignore = frozenset(
            (["chat_template"] if applies is not None else [])
            + (["weights"] if self.unchecked else [])
        )
        if not ignore:
            prior = self.index.find(canonical_hash(self.answer_fields(config.chat_template)))
        else:
            template = None if applies is not None else config.chat_template
            prior = self.index.newest_alike(self.answer_fields(template), ignore, applies)
        if prior is None:
            return None
        state = self._state_of(prior.run_dir)
        if any(state.missing(i) for i in self.selected_ids):
            return None
        self._finished = prior
        return prior

    def _state_of(self, run_dir: Path) -> RunState:
        """The run's checkpoint folded into a state; kept, so a run that turns out unfinished
        is not read twice (at 100,000 examples a read takes seconds)."""
        if self._last_read is None or self._last_read[0] != run_dir:
            state = RunState.from_checkpoint(Checkpoint(run_dir), self.selected_ids, self.rollouts)
            self._last_read = run_dir, state
        return self._last_read[1]

    def run(
        self,
        info: EndpointInfo | None,
        on_example: Callable[[ExampleResult], None],
        server_startup_s: float = 0.0,
    ) -> RunOutcome:
        """Evaluate what is missing against ``info``'s endpoint (None: nothing is missing, as
        :meth:`finished_without_server` found); each finished example goes to ``on_example``.
        ``server_startup_s`` is the server start-up this benchmark waited for, counted in its
        server time."""
        on_server_since = time.monotonic()
        request, config = self.request, self.request.benchmark.config
        rows, selected_ids, rollouts = self.rows, self.selected_ids, self.rollouts
        chosen = self._choose(info)
        run_id, run_dir, fields, answer_hash = (
            chosen.run_id, chosen.run_dir, chosen.fields, chosen.answer_hash
        )  # fmt: skip
        state = chosen.state
        checkpoint = Checkpoint(run_dir)
        if info is not None:  # a run only reported is left as it was found, "updated" included
            self._record(answer_hash, run_dir, run_id, fields, complete=False)

        total = len(selected_ids)
        done = 0
        reward_sum = 0.0
        counted = 0
        for example_id in selected_ids:
            if state.finished(example_id):
                done += 1
                rewards = state.rewards(example_id)
                reward_sum += sum(rewards) / rollouts
                counted += 1
                on_example(
                    ExampleResult(
                        example_id, rewards, None, done, total, reward_sum / counted, True
                    )
                )
        finished_before = done

        consecutive_errors = 0
        start_time = datetime.now(UTC).isoformat()
        # Answers of examples outside this selection are kept, not dropped, for a later run. (The
        # journal never raises on I/O problems: it stops recording and says why in .problem.)
        journal = AnswerJournal(
            RunPaths(run_dir).answers,
            lambda i: state.positions.get(i) is not None and state.finished(i),
        )

        def meta() -> dict[str, Any]:
            return _meta(run_id, config.env_id, request.model, rollouts, state, total, start_time)

        progress_step = max(1, int(total * PROGRESS_STEP))
        next_progress = done + progress_step

        def handle(example_id: int, outputs: list[dict[str, Any]]) -> None:
            nonlocal done, reward_sum, counted, consecutive_errors, next_progress
            claimed = [output.get(ROLLOUT_COLUMN) for output in outputs]
            records = [
                rollout_record(
                    output,
                    rollout,
                    config.env_id,
                    slot_wait_s=output.get(SLOT_WAIT_COLUMN),
                )
                for output, rollout in zip(
                    outputs, match_rollouts(claimed, state.missing(example_id)), strict=False
                )
            ]
            checkpoint.append(records, config.eval.checkpoint_every)
            state.add(records)
            # Every rollout of it is now in the checkpoint, finished or errored (an errored one is
            # retried afresh): none of its answers may be replayed again.
            journal.finished(example_id)
            done += 1
            if done >= next_progress:
                next_progress += progress_step
                log.info(
                    "%s: %d/%d examples, mean reward so far %s",
                    request.benchmark.name,
                    done,
                    total,
                    f"{reward_sum / counted:.3f}" if counted else "n/a",
                )
            error = state.error(example_id)
            if error is None:
                rewards = state.rewards(example_id)
                reward_sum += sum(rewards) / rollouts
                counted += 1
                consecutive_errors = 0
            else:
                rewards = []
                consecutive_errors += 1
            if checkpoint.write_meta(meta):  # at most once a second
                heap.release_free_memory()
            on_example(
                ExampleResult(
                    example_id,
                    rewards,
                    error,
                    done,
                    total,
                    reward_sum / counted if counted else None,
                    False,
                )
            )

        base_url = info.endpoint.base_url if info is not None else None

        def should_stop() -> str | None:
            if consecutive_errors >= ABORT_AFTER_CONSECUTIVE_ERRORS and counted == 0:
                return (
                    f"the first {consecutive_errors} examples all failed to evaluate "
                    f"(e.g. {state.any_error()}); "
                    f"the endpoint {base_url} looks down. Finished work is kept "
                    f"in {run_dir}; re-run to continue."
                )
            return None

        # Rollouts each selected row still misses, fixed before the run: one int per row, where a
        # list of the pending rows themselves held ~1 kB per example for the whole run.
        still_missing = array("I", (len(state.missing(i)) for i in selected_ids))
        checkpoint.open()
        try:
            if any(still_missing):
                if info is None:
                    raise RuntimeError("examples are missing but no endpoint was given")
                RunPaths(run_dir).discard_final_files()
                with verifiers_log_to(RunPaths(run_dir).logs / "verifiers.log"):
                    _run_grouped(
                        run_dir, self.env, rows, still_missing, request, info, self.sampling,
                        handle, should_stop, journal, state.missing,
                    )  # fmt: skip
        finally:
            checkpoint.close()
            checkpoint.write_meta(meta, force=True)
            journal.close()

        outcome = _summarise(run_dir, run_id, state, self.started)
        outcome.pass_at_k = _pass_at_k(outcome, config)
        outcome.resumed_examples = finished_before
        outcome.reused_answers = journal.replayed
        outcome.journal_problem = journal.problem
        outcome.new_run_note = chosen.new_run_note
        outcome.serving_note = chosen.serving_note
        if info is not None:
            used = ServerTime(
                backend=str(info.profile.get("backend")),
                gpu=(info.profile.get("infra") or {}).get("gpu"),
                startup_s=server_startup_s,
                server_s=server_startup_s + time.monotonic() - on_server_since,
            )
            outcome.serving = used.to_json(request.gpu_prices)
        outcome.answer_hash = answer_hash
        # A baseline is compared across models, so its key leaves out who answered.
        outcome.baseline_hash = canonical_hash(comparable_fields(fields))
        write_results(checkpoint, RunPaths(run_dir).results, selected_ids, rollouts)
        write_json_atomic(RunPaths(run_dir).metadata, _metadata(request, outcome, self.sampling))
        if info is not None:
            self._record(answer_hash, run_dir, run_id, fields, complete=not outcome.errored)
        return outcome

    def _choose(self, info: EndpointInfo | None) -> _ChosenRun:
        """The run to continue (or a new one), its answer key, and what it has finished."""
        request, config = self.request, self.request.benchmark.config
        note: str | None = None
        if info is None:
            if self._finished is None:
                raise RuntimeError("a run without an endpoint must be finished already")
            prior = self._finished
            state = self._state_of(prior.run_dir)
            skipped = (
                "nothing was asked of the endpoint but which model it serves"
                if request.applies_template is None
                else "no server was started"
            )
            note = (
                f"every selected example was finished in run {prior.run_id}: "
                f"nothing to evaluate, {skipped}"
            )
            if self.unchecked:
                made = describe_weights(prior.fields.get("weights"))
                note += (
                    f"; the weights could NOT be checked ({self.unchecked}), so these are the "
                    f"numbers of run {prior.run_id}, made with weights {made}"
                )
            return _ChosenRun(
                prior.run_id, prior.run_dir, prior.fields, canonical_hash(prior.fields), state,
                serving_note=note,
            )  # fmt: skip
        fields = self.answer_fields(info.chat_template or config.chat_template)
        answer_hash = canonical_hash(fields)
        found = None if request.fresh else self.index.find(answer_hash)
        if found is None and not request.fresh:
            note = self._new_run_note(fields, answer_hash)
        elif found is not None and self.unchecked:
            note = (
                f"the weights could not be checked ({self.unchecked}); run {found.run_id} goes on"
            )
        if found is not None and (started_with := _other_verifiers_api(found.run_dir)):
            # Same examples and configuration under the other API: the run goes on, and says so.
            switched = (
                f"run {found.run_id} was started with {started_with} and goes on with "
                f"{_verifiers_api()}: its examples and configuration are the same"
            )
            note = f"{note}; {switched}" if note else switched
        if found is None:
            run_id = new_run_id()
            run_dir = self.benchmark_dir / run_id
        else:
            run_id, run_dir = found.run_id, found.run_dir
        RunPaths(run_dir).logs.mkdir(parents=True, exist_ok=True)
        _link_server_logs(
            Path(info.server_logs) if info.server_logs else None, RunPaths(run_dir).logs
        )
        if found is None or not RunPaths(run_dir).is_run():
            run_config = _run_config(
                request, info, run_id, run_dir, answer_hash, fields, self.slug, len(self.rows)
            )
            write_json_atomic(RunPaths(run_dir).run_config, run_config)
        state = self._state_of(run_dir)
        self._last_read = None  # the run owns it now
        return _ChosenRun(run_id, run_dir, fields, answer_hash, state, new_run_note=note)

    def _new_run_note(self, fields: dict[str, Any], answer_hash: str) -> str | None:
        """One line on why a new run starts, when an earlier run of this item exists: the
        weights changed (or could not be checked), or its configuration differs."""
        newest = self.index.newest(exclude=answer_hash)
        if newest is not None and (made := _other_verifiers_api(newest.run_dir)):
            changed_text = ", ".join(differing_fields(newest.fields, fields)) or "unknown fields"
            return (
                f"run {newest.run_id} was made with {made} and {_verifiers_api()} is installed; "
                f"the environment differs between the two ({changed_text} differ), so that run "
                "is not continued; starting a new run"
            )
        if newest is not None:
            changed = differing_fields(newest.fields, fields)
            if any(name == "weights" or name.startswith("weights.") for name in changed):
                old, new = newest.fields.get("weights"), fields.get("weights")
                if new is None:
                    what = f"the weights could not be checked ({self.unchecked})"
                else:
                    what = f"the model changed since run {newest.run_id}: " + describe_change(
                        old, new
                    )
                others = [n for n in changed if n != "weights" and not n.startswith("weights.")]
                also = f"; {', '.join(others)} differ too" if others else ""
                return f"{what}{also}; starting a new run"
        other = self.index.latest_incomplete(exclude=answer_hash)
        if other is None:
            return None
        changed_text = ", ".join(differing_fields(other.fields, fields)) or "unknown fields"
        return (
            f"an earlier incomplete run {other.run_id} exists with a different "
            f"configuration ({changed_text} differ); starting a new run"
        )

    def _record(
        self, answer_hash: str, run_dir: Path, run_id: str, fields: dict[str, Any], complete: bool
    ) -> None:
        self.index.record(answer_hash, PriorRun(run_dir, run_id, fields, complete), time.time())


@dataclass
class _ChosenRun:
    run_id: str
    run_dir: Path
    fields: dict[str, Any]
    answer_hash: str
    state: RunState
    new_run_note: str | None = None
    serving_note: str | None = None


def _link_server_logs(server_logs: Path | None, run_logs: Path) -> None:
    """Make the shared server's logs (vllm.log, modal_vllm.log, ...) visible from the run."""
    if server_logs is None or not server_logs.is_dir():
        return
    for target in sorted(server_logs.glob("*.log")):
        link = run_logs / target.name
        if link.name != "proxy.log" and not link.exists():
            link.symlink_to(target.resolve())


def _run_grouped(
    run_dir: Path,
    env: Any,
    rows: Iterable[dict[str, Any]],
    still_missing: Sequence[int],
    request: RunRequest,
    info: EndpointInfo,
    sampling: dict[str, Any],
    handle: Callable[[int, list[dict[str, Any]]], None],
    should_stop: Callable[[], str | None],
    journal: AnswerJournal,
    rollout_indexes: Callable[[int], Sequence[int]],
) -> None:
    config = request.benchmark.config
    log_route = None
    request_timeout = config.eval.request_timeout
    if info.proxied:
        # Our proxy writes this request's line to the run's own proxy.log, and ends a request
        # at eval.request_timeout with a 504 the client does not retry; the client waits a
        # little longer, so that the proxy's answer (not a client timeout) ends the request.
        log_route = {
            "X-Modal-Eval-Log": str(RunPaths(run_dir.resolve()).logs / "proxy.log"),
            "X-Modal-Eval-Deadline": f"{request_timeout:g}",
        }
        request_timeout += PROXY_DEADLINE_MARGIN_S
    # Examples missing different numbers of rollouts run as separate batches, so each
    # verifiers group is exactly the rollouts still missing. Each batch streams the rows.
    interrupt = threading.Event()

    def stop_reason() -> str | None:
        return "interrupted (Ctrl-C)" if interrupt.is_set() else should_stop()

    for group in sorted({m for m in still_missing if m}, reverse=True):
        batch = (row for row, m in zip(rows, still_missing, strict=True) if m == group)
        run_interruptibly(
            verifiers_adapter.run_examples(
                env,
                batch,
                endpoint=info.endpoint,
                sampling_args=sampling,
                rollouts=group,
                max_concurrent_requests=config.eval.max_concurrent,
                request_timeout=request_timeout,
                max_retries=config.eval.max_retries,
                on_example=handle,
                should_stop=stop_reason,
                extra_headers=log_route,
                prefetch=config.eval.prefetch,
                journal=journal,
                rollout_indexes=rollout_indexes,
                max_turns=config.eval.max_turns,
            ),
            interrupt,
        )


def _meta(
    run_id: str,
    env_id: str,
    model: str,
    rollouts: int,
    state: RunState,
    total: int,
    start_time: str,
) -> dict[str, Any]:
    return {
        "checkpoint_version": CHECKPOINT_VERSION,
        "run_id": run_id,
        "env_id": env_id,
        "model": model,
        "rollouts_per_example": rollouts,
        "completed_example_ids": state.completed_id_array(),  # written in pieces
        "total_examples": total,
        "completed_rollouts": state.finished_rollouts,
        "start_time": start_time,
        "last_checkpoint_time": datetime.now(UTC).isoformat(),
    }


def _summarise(run_dir: Path, run_id: str, state: RunState, started: float) -> RunOutcome:
    end = state.summary()
    return RunOutcome(
        run_dir=run_dir,
        run_id=run_id,
        n_selected=len(state.example_ids),
        rollouts=state.rollouts,
        summary=stats.summarize(end.rewards) if len(end.rewards) else None,
        errored=end.errored,
        truncated_rollouts=end.truncated_rollouts,
        metric_means=end.metric_means,
        elapsed_s=time.monotonic() - started,
        per_example_rewards=end.rewards,
    )


def _pass_at_k(outcome: RunOutcome, config: BenchmarkConfig) -> list[PassAtK]:
    """pass@k for the benchmark's k values and those its gate names (``pass@8`` in
    ``gate.min_metrics``), over the finished examples."""
    rewards = outcome.per_example_rewards
    if not len(rewards):
        return []
    gated = (parse_metric_name(name) for name in config.gate.min_metrics)
    ks = {*config.eval.pass_ks(), *(k for k in gated if k is not None)}
    return pass_at_k(rewards.rewards, (k for k in ks if k <= rewards.rollouts))


def _metadata(request: RunRequest, outcome: RunOutcome, sampling: dict[str, Any]) -> dict[str, Any]:
    summary = outcome.summary
    return {
        "env_id": request.benchmark.config.env_id,
        "benchmark": request.benchmark.name,
        "model": request.model,
        "run_id": outcome.run_id,
        "num_examples": outcome.n_selected,
        "rollouts_per_example": outcome.rollouts,
        "sampling_args": sampling,
        "time_ms": round(outcome.elapsed_s * 1000, 1),
        "avg_reward": summary.mean if summary else None,
        "avg_metrics": outcome.metric_means,
        "pass_at_k": {
            p.name: {"mean": p.mean, "stderr": _finite(p.stderr)} for p in outcome.pass_at_k
        },
        "stderr": _finite(summary.stderr) if summary else None,
        "ci": [_finite(summary.ci_low), _finite(summary.ci_high)] if summary else None,
        "ci_level": summary.confidence if summary else None,
        "ci_method": summary.interval if summary else None,
        "n_evaluated": summary.n_examples if summary else 0,
        "errors": len(outcome.errored),
        "errored_example_ids": sorted(outcome.errored),
        "truncated_rollouts": outcome.truncated_rollouts,
        "resumed_examples": outcome.resumed_examples,
        "reused_answers": outcome.reused_answers,
        "answer_hash": outcome.answer_hash,
        "serving": outcome.serving,
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _run_config(
    request: RunRequest,
    info: EndpointInfo,
    run_id: str,
    run_dir: Path,
    answer_hash: str,
    fields: dict[str, Any],
    slug: str,
    n_selected: int,
) -> dict[str, Any]:
    config = request.benchmark.config
    return {
        "run_id": run_id,
        "model_id": request.model,
        "model_slug": slug,
        "benchmark": request.benchmark.name,
        "benchmark_file": str(request.benchmark.path),
        "env_id": config.env_id,
        "server_profile": mask_profile(request.server),
        "endpoint": info.endpoint.base_url,
        "chat_template": info.chat_template or None,
        "server_startup": (info.startup.phases or None) if info.startup else None,
        "sampling": config.sampling.model_dump(),
        "rollouts": config.eval.rollouts,
        "num_examples": n_selected,
        "config": mask_config(config.model_dump(mode="json")),
        "answer_hash": answer_hash,
        "answer_fields": fields,
        "model_identity": (
            {**request.identity.record, "unchecked": request.identity.unchecked}
            if request.identity is not None
            else None
        ),
        "started_at": datetime.now(UTC).isoformat(),
        "checkpoint_dir": str(run_dir),
        "versions": _versions(),
        "git_commit": _git_commit(request.benchmark.path.parent),
    }


def _verifiers_api(version: str | None = None) -> str:
    """``verifiers 0.4.0 (v1 API)``: the installed verifiers, or ``version``."""
    version = version or verifiers_adapter.installed_version()
    try:
        api = verifiers_adapter.api_for(version)
    except EnvironmentLoadError:
        return f"verifiers {version}"
    return f"verifiers {version} ({api} API)"


def _other_verifiers_api(run_dir: Path) -> str | None:
    """The verifiers a run was started with (its ``run_config.json``), when its API is not the
    installed one; else None (the same API, or not recorded)."""
    try:
        config = json.loads(RunPaths(run_dir).run_config.read_text())
        made = config["versions"]["verifiers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(made, str):
        return None
    installed = verifiers_adapter.installed_version()
    try:
        same = verifiers_adapter.api_for(made) == verifiers_adapter.api_for(installed)
    except EnvironmentLoadError:
        return None
    return None if same else _verifiers_api(made)


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("pytest-modal-eval", "pytest", "verifiers", "modal", "openai", "vllm"):
        try:
            found[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return found


def _git_commit(directory: Path) -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None

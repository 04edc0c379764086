"""One benchmark evaluated once: pick or resume its run, run what is missing, write outputs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import platform
import subprocess
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from pytest_modal_eval import adapter, heap, stats
from pytest_modal_eval.answer_journal import FILENAME as JOURNAL_FILENAME
from pytest_modal_eval.answer_journal import AnswerJournal
from pytest_modal_eval.loader import Benchmark
from pytest_modal_eval.resume import (
    PriorRun,
    RunIndex,
    answer_fields,
    canonical_hash,
    differing_fields,
    fingerprint_rows,
)
from pytest_modal_eval.rollout_seeds import match_rollouts
from pytest_modal_eval.run_state import RunState
from pytest_modal_eval.runstore import (
    CHECKPOINT_VERSION,
    Checkpoint,
    new_run_id,
    rollout_record,
    write_json_atomic,
    write_results,
)

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
    benchmark: Benchmark
    model: str
    endpoint: adapter.Endpoint
    output_dir: Path
    index_key: str
    cache: Any  # pytest.Cache | None
    fresh: bool = False
    server: dict[str, Any] = field(default_factory=dict)  # server profile, for the record
    chat_template: dict[str, str] | None = None
    endpoint_identity: str | None = None
    server_logs: Path | None = None  # the shared server's log directory
    proxied: bool = False


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
    answer_hash: str = ""
    baseline_hash: str = ""
    # Finished example id -> its rollouts' rewards, as arrays (reads as {str id: [reward]}).
    per_example_rewards: stats.ExampleRewards = field(default_factory=stats.ExampleRewards.empty)

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


def run_benchmark(request: RunRequest, on_example: Callable[[ExampleResult], None]) -> RunOutcome:
    """Evaluate (or finish) one benchmark; each finished example goes to ``on_example``."""
    started = time.monotonic()
    config = request.benchmark.config
    env = adapter.load_environment(
        config.env_id, config.env_args, request.benchmark.path.parent.resolve()
    )
    # Lazy views: rows are decoded a batch at a time whenever they are walked, never all held.
    all_rows = adapter.dataset_rows(env, None)
    rows = all_rows[: config.eval.num_examples] if config.eval.num_examples else all_rows
    rollouts = config.eval.rollouts
    sampling = config.sampling.as_request_args()
    fields = answer_fields(
        model=request.model,
        env_id=config.env_id,
        env_args=config.env_args,
        dataset_fingerprint=fingerprint_rows(all_rows),
        sampling=sampling,
        rollouts=rollouts,
        chat_template=request.chat_template or config.chat_template,
        vllm=config.vllm.model_dump(),
        endpoint_identity=request.endpoint_identity,
    )
    answer_hash = canonical_hash(fields)
    slug = model_slug(request.model)
    benchmark_dir = request.output_dir / f"{request.benchmark.name}--{slug}"
    # Keyed by output directory too: runs written elsewhere are not continued here.
    item_key = canonical_hash([request.index_key, request.model, str(benchmark_dir)], 8)
    index = RunIndex(request.cache, f"{request.benchmark.name}-{item_key}", benchmark_dir)
    prior = None if request.fresh else index.find(answer_hash)
    note = None
    if prior is None:
        other = index.latest_incomplete(exclude=answer_hash)
        if other is not None and not request.fresh:
            changed = ", ".join(differing_fields(other.fields, fields)) or "unknown fields"
            note = (
                f"an earlier incomplete run {other.run_id} exists with a different "
                f"configuration ({changed} differ); starting a new run"
            )
        run_id = new_run_id()
        run_dir = index.benchmark_dir / run_id
    else:
        run_id, run_dir = prior.run_id, prior.run_dir
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    _link_server_logs(request.server_logs, run_dir / "logs")
    checkpoint = Checkpoint(run_dir)
    selected_ids = rows.example_ids()
    state = RunState.from_checkpoint(checkpoint, selected_ids, rollouts)
    run_config = _run_config(request, run_id, run_dir, answer_hash, fields, slug, len(rows))
    if prior is None or not (run_dir / "run_config.json").exists():
        write_json_atomic(run_dir / "run_config.json", run_config)
    index.record(answer_hash, PriorRun(run_dir, run_id, fields, False), time.time())

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
                ExampleResult(example_id, rewards, None, done, total, reward_sum / counted, True)
            )
    finished_before = done

    consecutive_errors = 0
    start_time = datetime.now(UTC).isoformat()
    # Answers of examples outside this selection are kept, not dropped, for a later run. (The
    # journal never raises on I/O problems: it stops recording and says why in .problem.)
    journal = AnswerJournal(
        run_dir / JOURNAL_FILENAME,
        lambda i: state.positions.get(i) is not None and state.finished(i),
    )

    def meta() -> dict[str, Any]:
        return _meta(run_id, config.env_id, request.model, rollouts, state, total, start_time)

    progress_step = max(1, int(total * PROGRESS_STEP))
    next_progress = done + progress_step

    def handle(example_id: int, outputs: list[dict[str, Any]]) -> None:
        nonlocal done, reward_sum, counted, consecutive_errors, next_progress
        claimed = [output.get(adapter.ROLLOUT_COLUMN) for output in outputs]
        records = [
            rollout_record(
                output, rollout, config.env_id, slot_wait_s=output.get(adapter.SLOT_WAIT_COLUMN)
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

    def should_stop() -> str | None:
        if consecutive_errors >= ABORT_AFTER_CONSECUTIVE_ERRORS and counted == 0:
            return (
                f"the first {consecutive_errors} examples all failed to evaluate "
                f"(e.g. {state.any_error()}); "
                f"the endpoint {request.endpoint.base_url} looks down. Finished work is kept "
                f"in {run_dir}; re-run to continue."
            )
        return None

    # Rollouts each selected row still misses, fixed before the run: one int per row, where a
    # list of the pending rows themselves held ~1 kB per example for the whole run.
    still_missing = array("I", (len(state.missing(i)) for i in selected_ids))
    checkpoint.open()
    try:
        if any(still_missing):
            with verifiers_log_to(run_dir / "logs" / "verifiers.log"):
                _run_grouped(
                    run_dir, env, rows, still_missing, request, sampling, handle, should_stop,
                    journal, state.missing,
                )  # fmt: skip
    finally:
        checkpoint.close()
        checkpoint.write_meta(meta, force=True)
        journal.close()

    outcome = _summarise(run_dir, run_id, state, started)
    outcome.resumed_examples = finished_before
    outcome.reused_answers = journal.replayed
    outcome.journal_problem = journal.problem
    outcome.new_run_note = note
    outcome.answer_hash = answer_hash
    # A baseline is compared across models, so its key leaves out who answered.
    outcome.baseline_hash = canonical_hash({**fields, "model": None, "endpoint": None})
    write_results(checkpoint, run_dir / "results.jsonl", selected_ids, rollouts)
    write_json_atomic(run_dir / "metadata.json", _metadata(request, outcome, sampling))
    index.record(answer_hash, PriorRun(run_dir, run_id, fields, not outcome.errored), time.time())
    return outcome


def _link_server_logs(server_logs: Path | None, run_logs: Path) -> None:
    """Make the shared server's logs (vllm.log, modal_vllm.log) visible from the run."""
    if server_logs is None or not server_logs.is_dir():
        return
    for name in ("vllm.log", "modal_vllm.log"):
        target, link = server_logs / name, run_logs / name
        if target.exists() and not link.exists():
            link.symlink_to(target.resolve())


def _run_grouped(
    run_dir: Path,
    env: Any,
    rows: Iterable[dict[str, Any]],
    still_missing: Sequence[int],
    request: RunRequest,
    sampling: dict[str, Any],
    handle: Callable[[int, list[dict[str, Any]]], None],
    should_stop: Callable[[], str | None],
    journal: AnswerJournal,
    rollout_indexes: Callable[[int], Sequence[int]],
) -> None:
    config = request.benchmark.config
    log_route = None
    if request.proxied:
        # Our proxy writes this request's line to the run's own proxy.log.
        log_route = {"X-Modal-Eval-Log": str(run_dir.resolve() / "logs" / "proxy.log")}
    # Examples missing different numbers of rollouts run as separate batches, so each
    # verifiers group is exactly the rollouts still missing. Each batch streams the rows.
    for group in sorted({m for m in still_missing if m}, reverse=True):
        batch = (row for row, m in zip(rows, still_missing, strict=True) if m == group)
        asyncio.run(
            adapter.run_examples(
                env,
                batch,
                endpoint=request.endpoint,
                sampling_args=sampling,
                rollouts=group,
                max_concurrent_requests=config.eval.max_concurrent,
                request_timeout=config.eval.request_timeout,
                max_retries=config.eval.max_retries,
                on_example=handle,
                should_stop=should_stop,
                extra_headers=log_route,
                prefetch=config.eval.prefetch,
                journal=journal,
                rollout_indexes=rollout_indexes,
            )
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
        "stderr": _finite(summary.stderr) if summary else None,
        "ci": [_finite(summary.ci_low), _finite(summary.ci_high)] if summary else None,
        "ci_level": 0.95,
        "ci_method": summary.interval if summary else None,
        "n_evaluated": summary.n_examples if summary else 0,
        "errors": len(outcome.errored),
        "errored_example_ids": sorted(outcome.errored),
        "truncated_rollouts": outcome.truncated_rollouts,
        "resumed_examples": outcome.resumed_examples,
        "reused_answers": outcome.reused_answers,
        "answer_hash": outcome.answer_hash,
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _run_config(
    request: RunRequest,
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
        "server_profile": request.server,
        "endpoint": request.endpoint.base_url,
        "chat_template": request.chat_template,
        "sampling": config.sampling.model_dump(),
        "rollouts": config.eval.rollouts,
        "num_examples": n_selected,
        "config": config.model_dump(mode="json"),
        "answer_hash": answer_hash,
        "answer_fields": fields,
        "started_at": datetime.now(UTC).isoformat(),
        "checkpoint_dir": str(run_dir),
        "versions": _versions(),
        "git_commit": _git_commit(request.benchmark.path.parent),
    }


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

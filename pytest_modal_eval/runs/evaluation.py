"""One benchmark evaluated once: run what its run still misses, write its outputs (which run it
continues is chosen by :class:`~pytest_modal_eval.runs.resume.RunChoice`)."""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_modal_eval.client import verifiers_adapter
from pytest_modal_eval.client.answer_journal import AnswerJournal
from pytest_modal_eval.client.observe import observing
from pytest_modal_eval.client.rollout_seeds import SLOT_WAIT_COLUMN, match_seat_rollouts
from pytest_modal_eval.client.workers import Intake
from pytest_modal_eval.runs import heap
from pytest_modal_eval.runs.answer_key import canonical_hash, comparable_fields, fingerprint_rows
from pytest_modal_eval.runs.early_stop import (
    REWARD,
    EarlyStop,
    example_values,
)
from pytest_modal_eval.runs.early_stop import build as build_early_stop
from pytest_modal_eval.runs.early_stop import record as early_stop_record
from pytest_modal_eval.runs.outcome import (
    ExampleResult,
    Interrupted,
    RunOutcome,
    outcome_pass_at_k,
    summarise,
)
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.record import rollout_record
from pytest_modal_eval.runs.request import RunRequest, shard_slice
from pytest_modal_eval.runs.resume import PriorRun, RunChoice
from pytest_modal_eval.runs.rollout_batches import run_grouped, verifiers_log_to
from pytest_modal_eval.runs.run_files import checkpoint_meta, metadata_json
from pytest_modal_eval.runs.seats import SeatPlan, seat_outcomes
from pytest_modal_eval.runs.state import RunState
from pytest_modal_eval.runs.store import Checkpoint, json_default, write_json_atomic, write_results
from pytest_modal_eval.runs.times import RecordedTimes
from pytest_modal_eval.runs.writer_lock import RunWriter
from pytest_modal_eval.serving.costs import ContainerTime, ServerTime
from pytest_modal_eval.serving.endpoint import EndpointInfo

#: Consecutive errored examples after which the endpoint is taken to be down.
ABORT_AFTER_CONSECUTIVE_ERRORS = 20
#: Progress is logged (``--log-cli-level=INFO`` shows it) every this share of the examples.
PROGRESS_STEP = 0.1

log = logging.getLogger("pytest_modal_eval")


class BenchmarkRun:
    """One benchmark evaluated once, in two steps: opened before any server is asked for
    (environment, rows, the run it continues), then run against the endpoint if it needs one.

    A run whose every selected example is already finished needs no endpoint
    (:meth:`finished_without_server`): on Modal, starting a deployment only to find nothing to
    do costs minutes of GPU time.
    """

    def __init__(self, request: RunRequest) -> None:
        self.request = request
        self.interrupted: Interrupted | None = None  # set when Ctrl-C ends run()
        config = request.benchmark.config
        self.env = verifiers_adapter.load_environment(
            config.env_id,
            config.env_args,
            request.benchmark.path.parent.resolve(),
            agent=config.agent.model_dump(exclude_none=True),
            num_examples=config.eval.num_examples,
            max_turns=config.eval.max_turns,
        )
        request.redactor.learn_variables(verifiers_adapter.secret_variables(self.env))
        self.seat_plan = SeatPlan.of(
            config.env_id, *verifiers_adapter.seats(self.env), config.gate.every_seat
        )
        # Lazy views: rows are decoded a batch at a time whenever they are walked, never held.
        all_rows = verifiers_adapter.dataset_rows(self.env, None)
        n = config.eval.num_examples
        self.rows = all_rows[:n] if n else all_rows
        if request.shard is not None:  # examples keep their ids, so the answer key stays
            self.rows = self.rows[shard_slice(len(self.rows), request.shard)]
        self.selected_ids = self.rows.example_ids()
        self.rollouts = config.eval.rollouts
        self.sampling = config.sampling.as_request_args()
        # Which run this evaluation continues, and the run's lock (see resume.RunChoice).
        self.choice = RunChoice(
            request,
            self.selected_ids,
            rollouts=self.rollouts,
            sampling=self.sampling,
            dataset=fingerprint_rows(all_rows),
            read_state=self._read_state,
        )

    @property
    def writer(self) -> RunWriter:
        """The run's lock, held from when its run is found until the item ends."""
        return self.choice.writer

    def finished_without_server(self) -> PriorRun | None:
        """The run this one continues if it has every selected example finished (or its gate
        was decided early), found without a server; then :meth:`run` needs no endpoint."""
        return self.choice.finished(self._decided_early)

    def _decided_early(self, fields: dict[str, Any], state: RunState) -> bool:
        """Whether ``gate.early_stop`` decides the gate on the examples the run has finished
        (the same sequences, in the same order, as when it stopped): then nothing is to be
        sent, and no server is needed."""
        early, _ = self._early_stop(canonical_hash(fields), fields)
        if early is None:
            return False
        self._replay(early, state)
        return early.decided

    def _replay(self, early: EarlyStop, state: RunState) -> None:
        """Feed the sequences what the run's checkpoint holds, as the run fed them: each
        finished example's values, and each errored one as an error (it left the population
        when it errored; skipped, it would hold back every example after it in the order)."""
        for example_id in self.selected_ids:
            if state.finished(example_id):
                early.finished(example_id, self._values(early, state, example_id))
            elif state.error(example_id) is not None:
                early.finished(example_id, None)

    def close(self) -> None:
        """Give up the run's lock: the item is done with the run (or failed before its run)."""
        self.choice.close()

    def _read_state(self, run_dir: Path) -> RunState:
        """A run's checkpoint folded into a state for this run's selection and seats."""
        return RunState.from_checkpoint(
            Checkpoint(run_dir),
            self.selected_ids,
            self.rollouts,
            self.seat_plan.seats,
            self.seat_plan.headline,
        )

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
        chosen = self.choice.choose(info)
        run_id, run_dir, fields, answer_hash = (
            chosen.run_id, chosen.run_dir, chosen.fields, chosen.answer_hash
        )  # fmt: skip
        state = chosen.state
        checkpoint = Checkpoint(run_dir)
        recorded = RecordedTimes.read(RunPaths(run_dir))
        evaluating: list[float] = []  # when this session's evaluation began, once it has

        total = len(selected_ids)
        early, early_off = self._early_stop(answer_hash, fields)
        done = 0
        reward_sum = 0.0
        counted = 0
        if early is not None:
            self._replay(early, state)
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
            request.redactor,
        )

        def eval_s() -> float:
            return recorded.eval_s + (time.monotonic() - evaluating[0] if evaluating else 0.0)

        def server_time() -> tuple[float, float]:
            """The run's server start-up and server seconds, this session's share included."""
            if info is None:
                return recorded.server_startup_s, recorded.server_s
            used = server_startup_s + time.monotonic() - on_server_since
            return recorded.server_startup_s + server_startup_s, recorded.server_s + used

        def container_s() -> float:
            """Seconds the run held a detached container (its server wait and its evaluation),
            every session's: what that container's CPU time is reckoned by."""
            if info is None or request.container is None:
                return recorded.container_s
            return recorded.container_s + server_startup_s + time.monotonic() - on_server_since

        def serving() -> dict[str, Any] | None:
            """The run's server (and container) time record, this session's share included."""
            if info is None:  # only reported: the time it recorded stays
                return recorded.serving
            startup_s, server_s = server_time()
            used = ServerTime(
                backend=str(info.profile.get("backend")),
                gpu=(info.profile.get("infra") or {}).get("gpu"),
                startup_s=startup_s,
                server_s=server_s,
            )
            record = used.to_json(request.gpu_prices)
            if request.container is not None or recorded.container_s:
                cpu, memory_mib = request.container or recorded.container_size
                record["container"] = ContainerTime(cpu, memory_mib, container_s()).to_json()
            return record

        def meta() -> dict[str, Any]:
            startup_s, server_s = server_time()
            data = {
                **checkpoint_meta(
                    run_id, config.env_id, request.model, rollouts, state, total, start_time
                ),
                "eval_s": round(eval_s(), 3),
                "server_startup_s": round(startup_s, 3),
                "server_s": round(server_s, 3),
                # What metadata.json will say of the server, for a run finished by a later
                # session that only reports it (one whose shards were merged, one killed after
                # its last example).
                "serving": serving(),
            }
            if request.container is not None or recorded.container_s:
                data["container_s"] = round(container_s(), 3)
                data["container_size"] = list(request.container or recorded.container_size)
            return data

        progress_step = max(1, int(total * PROGRESS_STEP))
        next_progress = done + progress_step

        handled: set[int] = set()  # the examples this session evaluated
        answered_ahead: list[int] = []  # answers waiting for their turn when it was decided

        def handle(example_id: int, outputs: list[dict[str, Any]]) -> None:
            nonlocal done, reward_sum, counted, consecutive_errors, next_progress
            handled.add(example_id)
            records = [
                request.redactor.json(
                    rollout_record(
                        output, rollout, config.env_id, slot_wait_s=output.get(SLOT_WAIT_COLUMN)
                    ),
                    by_name=False,
                    default=json_default,
                )
                for output, rollout in match_seat_rollouts(outputs, state.missing(example_id))
            ]
            checkpoint.append(records, config.eval.checkpoint_every)
            state.add(records)
            if request.observer is not None:
                request.observer.example_finished(example_id, records)
            # Every rollout of it is now in the checkpoint, finished or errored (an errored one is
            # retried afresh): none of its answers may be replayed again. One answered wholly
            # from the journal counts as resumed: no work of this session, so not in its pace.
            reused = journal.finished(example_id)
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
            if early is not None:
                values = None if error is not None else self._values(early, state, example_id)
                decided = early.decided
                early.finished(example_id, values)
                if early.decided and not decided:
                    answered_ahead.append(early.ahead)
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
                    reused,
                    time.monotonic() - evaluating[0] if evaluating else None,
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
        early_order = early.order if early is not None else None

        def keep_sending() -> bool:
            return early is None or not early.decided

        # Once the gate is decided, the intake drops the examples that sent nothing.
        observer = request.observer
        intake = Intake(keep_sending, observer.example_dropped if observer is not None else None)
        checkpoint.open()
        try:
            if any(still_missing) and keep_sending():
                if info is None:
                    raise RuntimeError("examples are missing but no endpoint was given")
                RunPaths(run_dir).discard_final_files()
                evaluating.append(time.monotonic())
                with (
                    verifiers_log_to(RunPaths(run_dir).logs / "verifiers.log"),
                    observing(request.observer),
                ):
                    run_grouped(
                        run_dir, self.env, rows, still_missing, request, info, self.sampling,
                        handle, should_stop, journal, state.missing,
                        order=early_order, intake=intake,
                    )  # fmt: skip
                    if early is not None and early.undone is not None and not should_stop():
                        # A decision taken back once sending had stopped: send the rest.
                        rest = (
                            0 if i in handled else m
                            for i, m in zip(selected_ids, still_missing, strict=True)
                        )
                        run_grouped(
                            run_dir, self.env, rows, array("I", rest), request, info,
                            self.sampling, handle, should_stop, journal, state.missing,
                            order=early_order,
                        )  # fmt: skip
        except KeyboardInterrupt:
            self.interrupted = Interrupted(counted, total, run_id, run_dir)
            raise
        finally:
            if evaluating:  # the evaluation is over: the clock stops here
                recorded = replace(recorded, eval_s=eval_s())
                evaluating.clear()
            try:
                checkpoint.close()
                checkpoint.write_meta(meta, force=True)
            finally:
                journal.close()

        # The figure metadata.json records (time_ms, to 0.1 ms), so every place that shows it
        # rounds the same number.
        reward_range = config.gate.reward_range
        outcome = summarise(
            run_dir, run_id, state, round(recorded.eval_s * 1000, 1) / 1000, reward_range
        )
        outcome.seat_plan = self.seat_plan
        outcome.seats = seat_outcomes(state, self.seat_plan, reward_range)
        outcome.pass_at_k = outcome_pass_at_k(outcome, config)
        outcome.resumed_examples = finished_before
        outcome.reused_answers = journal.replayed
        outcome.journal_problem = journal.problem
        outcome.new_run_note = chosen.new_run_note
        outcome.serving_note = chosen.serving_note
        outcome.wait_note = self.writer.waited
        outcome.serving = serving()
        if info is None:  # only reported: the server time it recorded stays
            outcome.server_used = False
        outcome.answer_hash = answer_hash
        if early is not None and early.decided:
            # Examples never sent are not errors: only those that were sent and failed are.
            sent_errors = {i: e for i, e in outcome.errored.items() if state.error(i) is not None}
            if len(sent_errors) < len(outcome.errored):  # some were never sent: stopped early
                outcome.unsent = len(outcome.errored) - len(sent_errors)
                outcome.errored = sent_errors
                outcome.early_decision = early.decision
        if early_off is not None or early is not None:
            reason = early_off or (early.undecided() if early is not None else None)
            if early is not None and early.decided and outcome.early_decision is None:
                reason = f"decided after {early.taken:,} examples, when none was left to send"
            outcome.early_stop = early_stop_record(
                outcome.early_decision,
                reason,
                outcome.summary.n_examples if outcome.summary else 0,
                in_flight=(intake.unanswered_at_close, sum(answered_ahead)),
            )
        # A baseline is compared across models, so its key leaves out who answered.
        outcome.baseline_hash = canonical_hash(comparable_fields(fields))
        write_results(
            checkpoint, RunPaths(run_dir).results, selected_ids, rollouts, self.seat_plan.seats
        )
        metadata = metadata_json(request, outcome, self.sampling)
        if outcome.seats:
            metadata["seat"] = self.seat_plan.headline
            metadata["seats"] = {seat: o.to_json() for seat, o in outcome.seats.items()}
        played = verifiers_adapter.played(self.env, request.model)
        if played is not None:
            metadata["played"] = played
        write_json_atomic(
            RunPaths(run_dir).metadata, request.redactor.json(metadata, by_name=False)
        )
        if info is not None:
            # A run stopped early is not complete: a run without early stop goes on with it.
            complete = not outcome.errored and outcome.early_decision is None
            self.choice.record(answer_hash, run_dir, run_id, fields, complete=complete)
        return outcome

    def _early_stop(
        self, run_key: str, fields: dict[str, Any]
    ) -> tuple[EarlyStop | None, str | None]:
        """The run's sequences when ``gate.early_stop`` applies, else why it does not (None
        for both: early stop was not asked for)."""
        request = self.request
        if request.benchmark.config.gate.early_stop and self.seat_plan.gated():
            return None, "gate.every_seat: early stop decides one seat; the run goes on to the end"
        return build_early_stop(
            request.benchmark.config.gate,
            self.selected_ids,
            run_key,
            request.paired,
            canonical_hash(comparable_fields(fields)),
            request.comparison_open,
        )

    @staticmethod
    def _values(early: EarlyStop, state: RunState, example_id: int) -> dict[str, float]:
        metrics = (
            state.metric_means([example_id])
            if any("@" not in n and n != REWARD for n in early.thresholds)
            else {}
        )
        return example_values(list(early.thresholds), state.rewards(example_id), metrics)

"""What one evaluation of a benchmark hands back: each example as it finishes, the run's outcome
and its summary, and where Ctrl-C left it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_modal_eval.config.schema import BenchmarkConfig
from pytest_modal_eval.runs.early_stop import (
    Decision,
)
from pytest_modal_eval.runs.seats import SeatOutcome, SeatPlan
from pytest_modal_eval.runs.state import RunState
from pytest_modal_eval.stats import summary as stats
from pytest_modal_eval.stats.pass_k import PassAtK, parse_metric_name, pass_at_k


@dataclass(frozen=True)
class ExampleResult:
    example_id: int
    rewards: list[float]
    error: str | None
    done: int
    total: int
    running_mean: float | None
    # Finished by an earlier session, or answered wholly from its answer journal: done, but
    # no work of this session (the progress rate leaves it out).
    resumed: bool
    # Seconds from this session's start of evaluating the benchmark (its first request) to
    # this example's end, on this process's clock: the progress rate's time. None when this
    # session evaluated nothing before it (an example finished by an earlier session).
    elapsed_s: float | None = None


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
    eval_s: float  # the run's evaluation time, all sessions (see runs.times)
    resumed_examples: int = 0
    reused_answers: int = 0  # answers journaled before an interruption, not requested again
    journal_problem: str | None = None  # why answers stopped being journaled, if they did
    new_run_note: str | None = None
    serving_note: str | None = None  # why no server was started, when none was
    wait_note: str | None = None  # whom the run was waited for, when another process held it
    answer_hash: str = ""
    baseline_hash: str = ""
    # Finished example id -> its rollouts' rewards, as arrays (reads as {str id: [reward]}).
    per_example_rewards: stats.ExampleRewards = field(default_factory=stats.ExampleRewards.empty)
    pass_at_k: list[PassAtK] = field(default_factory=list)  # over the finished examples
    # Server start-up and time used, and on Modal GPU-hours and cost (see serving.costs);
    # None when no server was asked for.
    serving: dict[str, Any] | None = None
    # False when this session used no server (it only reported a finished run): ``serving``
    # is then what the run recorded when it was evaluated.
    server_used: bool = True
    # gate.early_stop: the decision that stopped the run (None: it ran to the end), and what
    # metadata.json says of it (None: early stop was not asked for).
    early_decision: Decision | None = None
    early_stop: dict[str, Any] | None = None
    # Several seats: how they are gated, and each seat's figures (the headline's are above).
    seat_plan: SeatPlan = field(default_factory=SeatPlan)
    seats: dict[str, SeatOutcome] = field(default_factory=dict)
    # The (headline) seat played several times per rollout: plays per rollout and all plays.
    attempts: dict[str, Any] | None = None

    # Examples never sent because early stop decided the gate first: not errors, and not in
    # the error rate's denominator.
    unsent: int = 0

    @property
    def n_sent(self) -> int:
        """The examples sent for evaluation (all selected, unless early stop decided first)."""
        return self.n_selected - self.unsent

    @property
    def error_rate(self) -> float:
        """The share of the examples sent that could not be evaluated."""
        return len(self.errored) / self.n_sent if self.n_sent else 0.0


@dataclass(frozen=True)
class Interrupted:
    """Where a run stood when Ctrl-C ended it: the examples its checkpoint keeps (finished
    without error; an errored one is evaluated again) of those selected."""

    kept: int
    total: int
    run_id: str
    run_dir: Path


def summarise(
    run_dir: Path,
    run_id: str,
    state: RunState,
    eval_s: float,
    reward_range: Sequence[float] | None = None,
) -> RunOutcome:
    """The run's outcome from its state; its interval within ``reward_range`` (the declared
    ``gate.reward_range``) when every reward lies in it."""
    end = state.summary()
    return RunOutcome(
        run_dir=run_dir,
        run_id=run_id,
        n_selected=len(state.example_ids),
        rollouts=state.rollouts,
        summary=stats.summarize_within(end.rewards, reward_range) if len(end.rewards) else None,
        errored=end.errored,
        truncated_rollouts=end.truncated_rollouts,
        metric_means=end.metric_means,
        eval_s=eval_s,
        per_example_rewards=end.rewards,
        attempts=end.attempts,
    )


def outcome_pass_at_k(outcome: RunOutcome, config: BenchmarkConfig) -> list[PassAtK]:
    """pass@k for the benchmark's k values and those its gate names (``pass@8`` in
    ``gate.min_metrics``), over the finished examples."""
    rewards = outcome.per_example_rewards
    if not len(rewards):
        return []
    gated = (parse_metric_name(name) for name in config.gate.min_metrics)
    ks = {*config.eval.pass_ks(), *(k for k in gated if k is not None)}
    return pass_at_k(rewards.rewards, (k for k in ks if k <= rewards.rollouts))

"""Several seats at the end of a run: each seat's figures and the gate on one or every seat,
with a game's payoffs outside [0, 1]."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.config.schema import GateConfig
from pytest_modal_eval.exceptions import EnvironmentLoadError
from pytest_modal_eval.gate.verdict import decide
from pytest_modal_eval.runs.evaluation import RunOutcome
from pytest_modal_eval.runs.seats import SeatPlan, seat_outcomes
from pytest_modal_eval.runs.state import RunState
from pytest_modal_eval.stats.summary import summarize

SEATS = ["player_0", "player_1"]
# Zero-sum payoffs: player_0 wins most games.
PAYOFFS = [(2.0, -2.0), (1.0, -1.0), (-1.0, 1.0), (2.0, -2.0), (1.0, -1.0), (-2.0, 2.0)]


def _outcome(plan: SeatPlan) -> RunOutcome:
    state = RunState(range(len(PAYOFFS)), 1, SEATS, plan.headline)
    state.add(
        {"example_id": i, "rollout": 0, "agent": seat, "reward": reward, "error": None}
        for i, rewards in enumerate(PAYOFFS)
        for seat, reward in zip(SEATS, rewards, strict=True)
    )
    end = state.summary()
    outcome = RunOutcome(
        run_dir=Path("run"),
        run_id="run",
        n_selected=len(PAYOFFS),
        rollouts=1,
        summary=summarize(end.rewards),
        errored=end.errored,
        truncated_rollouts=0,
        metric_means=end.metric_means,
        eval_s=1.0,
        per_example_rewards=end.rewards,
    )
    outcome.seat_plan, outcome.seats = plan, seat_outcomes(state, plan)
    return outcome


def test_each_seat_has_its_own_figures_in_the_payoffs_range() -> None:
    outcome = _outcome(SeatPlan.of("kuhn", SEATS, "player_1", every_seat=False))
    first, second = outcome.seats["player_0"], outcome.seats["player_1"]
    assert first.summary is not None and second.summary is not None
    assert first.summary.mean == pytest.approx(0.5) and second.summary.mean == pytest.approx(-0.5)
    assert outcome.summary is not None and outcome.summary.mean == second.summary.mean
    for figures in (first, second):
        s: Any = figures.summary
        assert s.interval == "t-clipped" and -2.0 <= s.ci_low < s.mean < s.ci_high <= 2.0
    assert first.to_json()["ci"] == [first.summary.ci_low, first.summary.ci_high]


def test_the_gate_applies_to_the_named_seat_or_to_every_seat() -> None:
    gate = GateConfig(min_avg_reward=-0.25)
    assert decide(_outcome(SeatPlan.of("kuhn", SEATS, "player_0", every_seat=False)), gate).passed
    verdict = decide(_outcome(SeatPlan.of("kuhn", SEATS, "player_1", every_seat=False)), gate)
    assert [r.split(" (")[0] for r in verdict.reasons] == [
        "seat player_1: mean reward -0.500 ± 0.671"  # sd 1.643 / sqrt(6)
    ]

    every = GateConfig(min_avg_reward=-0.25, every_seat=True)
    verdict = decide(_outcome(SeatPlan.of("kuhn", SEATS, None, every_seat=True)), every)
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith("seat player_1: ")
    assert "< gate.min_avg_reward -0.25" in verdict.reasons[0]
    assert decide(
        _outcome(SeatPlan.of("kuhn", SEATS, None, every_seat=True)),
        GateConfig(min_avg_reward=-0.75, every_seat=True),
    ).passed


def test_several_seats_need_a_named_seat_or_every_seat() -> None:
    with pytest.raises(EnvironmentLoadError, match=r"set agent\.seat .* or gate\.every_seat"):
        SeatPlan.of("kuhn", SEATS, None, every_seat=False)
    assert SeatPlan.of("one", ["agent"], None, every_seat=False) == SeatPlan()
    assert SeatPlan.of("kuhn", SEATS, None, every_seat=True).headline == "player_0"


def test_a_seat_played_several_times_counts_its_plays_per_rollout() -> None:
    """``attempts`` in a seat's figures: the fewest and most plays of a rollout and all plays,
    over finished examples only; none for a seat every rollout played once."""
    from pytest_modal_eval.stats.format import describe_attempts

    def play(n: int) -> list[dict[str, Any]]:
        return [{"reward": 1.0, "error": None}] * n if n > 1 else []

    state = RunState(range(4), 1, SEATS, "player_1")
    plays = {0: 3, 1: 1, 2: 2}  # example 3: player_1 errored, so not finished
    state.add(
        {"example_id": i, "rollout": 0, "agent": "player_0", "reward": 0.0, "error": None}
        for i in range(4)
    )
    state.add(
        {"example_id": i, "rollout": 0, "agent": "player_1", "reward": 0.5, "error": None,
         "attempts": play(n)}
        for i, n in plays.items()
    )  # fmt: skip
    state.add([{"example_id": 3, "rollout": 0, "agent": "player_1", "error": "boom",
                "attempts": play(5)}])  # fmt: skip
    outcomes = seat_outcomes(state, SeatPlan.of("duel", SEATS, "player_1", every_seat=False))
    attempts = outcomes["player_1"].attempts
    assert attempts == {"per_rollout": [1, 3], "plays": 6}
    assert outcomes["player_1"].to_json()["attempts"] == attempts
    assert outcomes["player_0"].attempts is None
    assert "attempts" not in outcomes["player_0"].to_json()
    assert state.summary().attempts == attempts  # the headline seat's, for the run
    assert describe_attempts(attempts) == (
        "1-3 attempts per rollout (6 plays), reward the mean over them"
    )
    assert describe_attempts(None) is None

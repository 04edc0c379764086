"""The seats of an environment with several agents (a two-player game): which seat is the
headline, which are gated, and each seat's figures at the end of a run.

Each seat of such an environment has one record per rollout (``agent`` names it) and its own
statistics: mean, standard error and interval clustered by example, metric means. The headline
seat — the one ``agent.seat`` names, else the environment's first — is the run's ``avg_reward``,
its baseline and its early stop; the gate applies to it, or to every seat with
``gate.every_seat``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.exceptions import EnvironmentLoadError
from pytest_modal_eval.stats import summary as stats

if TYPE_CHECKING:
    from pytest_modal_eval.runs.state import RunState


@dataclass(frozen=True)
class SeatPlan:
    """An environment's seats as a run records them (empty: one seat, one record per
    rollout), its headline seat, and whether the gate applies to every seat."""

    seats: tuple[str, ...] = ()
    headline: str | None = None
    every_seat: bool = False

    @classmethod
    def of(cls, env_id: str, seats: list[str], named: str | None, every_seat: bool) -> SeatPlan:
        """The plan for ``seats`` with ``agent.seat`` ``named``; several seats need a named
        one or ``gate.every_seat`` (which seat a gate applies to is the benchmark's choice)."""
        if len(seats) < 2:
            return cls()
        if named is None and not every_seat:
            raise EnvironmentLoadError(
                f"environment {env_id!r} plays {len(seats)} seats ({', '.join(seats)}); set "
                "agent.seat to the one whose reward the benchmark gates, or gate.every_seat: "
                "true to gate each (every seat is recorded and summarised either way)"
            )
        return cls(tuple(seats), named if named is not None else seats[0], every_seat)

    def gated(self) -> tuple[str, ...]:
        """The seats besides the headline the gate applies to."""
        return tuple(s for s in self.seats if s != self.headline) if self.every_seat else ()


@dataclass(frozen=True)
class SeatOutcome:
    """One seat's figures over the run's finished examples."""

    summary: stats.RewardSummary | None
    metric_means: dict[str, float]
    truncated_rollouts: int
    # Played several times per rollout: plays per rollout (fewest, most) and all plays.
    attempts: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """What ``metadata.json`` records of the seat (``seats``); ``attempts`` only for a seat
        some episode played several times."""
        s = self.summary
        figures = {
            "avg_reward": s.mean if s else None,
            "stderr": _finite(s.stderr) if s else None,
            "ci": [_finite(s.ci_low), _finite(s.ci_high)] if s else None,
            "ci_level": s.confidence if s else None,
            "ci_method": s.interval if s else None,
            "n_evaluated": s.n_examples if s else 0,
            "avg_metrics": self.metric_means,
            "truncated_rollouts": self.truncated_rollouts,
        }
        if self.attempts is not None:
            figures["attempts"] = self.attempts
        return figures


def seat_outcomes(
    state: RunState, plan: SeatPlan, reward_range: Sequence[float] | None = None
) -> dict[str, SeatOutcome]:
    """Every seat's figures, in the environment's order (empty with one seat); intervals
    within ``reward_range`` as :func:`~pytest_modal_eval.stats.summary.summarize_within`."""
    outcomes = {}
    for seat in plan.seats:
        end = state.summary(seat)
        outcomes[seat] = SeatOutcome(
            stats.summarize_within(end.rewards, reward_range) if len(end.rewards) else None,
            end.metric_means,
            end.truncated_rollouts,
            end.attempts,
        )
    return outcomes


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None

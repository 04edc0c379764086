"""An example's status from its rollouts' rewards: solved, partial, missed or errored (the word
``-v`` prints, the per-example tables). Imports nothing: the plugin's entry point reads it."""

from __future__ import annotations

SOLVED, PARTIAL, MISSED, ERRORED = "solved", "partial", "missed", "errored"


def example_status(rewards: list[float], error: str | None) -> str:
    """errored: it could not be evaluated; missed: no rollout earned any reward (every reward
    <= 0); solved: every rollout earned the full reward (>= 1); partial: anything between."""
    if error is not None or not rewards:
        return ERRORED
    if max(rewards) <= 0.0:
        return MISSED
    if min(rewards) >= 1.0:
        return SOLVED
    return PARTIAL

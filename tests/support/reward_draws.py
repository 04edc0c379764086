"""Simulated rewards other than 0/1, for the coverage of the betting interval: one generator
for tests/test_interval_coverage.py (fast cells) and benchmarks/interval_coverage.py (the full
grid), so both measure the same cells.

Each dataset's true mean is drawn uniformly from mu +- 20% of its distance to the nearer end of
[0, 1] (as for the pass/fail cells); the estimand is that mean over the population of examples.
The kinds of rewards (each example's mean over its rollouts):

- ``continuous``: 4 rollouts, each Beta(6 mu, 6 (1 - mu)).
- ``judge``: one score per example, 0.9 when right and 0.005 when wrong (0.995 and 0.1 for a
  mean of 0.5 or more): a judge's probabilities, piled up at two values.
- ``judge4``: 4 such scores, each example right with its own rate (Beta(s, 1 - s) around the
  share s right), so examples differ as much as a beta allows.
- ``heterogeneous``: 4 rollouts, each Beta(3 p, 3 (1 - p)) around its example's rate
  p ~ Beta(mu, 1 - mu).
- ``partial``: 4 rollouts of 4 pass/fail checks (rewards 0, 1/4, ..., 1), rates
  Beta(mu, 1 - mu).
- ``payoff``: 4 rollouts each paying -2 + 4 u, u ~ Beta(4 p, 4 (1 - p)) around its example's
  rate p ~ Beta(2 mu, 2 (1 - mu)), in ``gate.reward_range`` [-2, 2]: the true mean and the
  example means are on that scale.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

KINDS = ("continuous", "judge", "judge4", "heterogeneous", "partial", "payoff")
PAYOFF_RANGE = (-2.0, 2.0)

FloatArray = npt.NDArray[np.float64]


def true_means(rng: np.random.Generator, mu: float, datasets: int) -> FloatArray:
    """(datasets, 1) true means, mu +- 20% of its distance to the nearer end of [0, 1]."""
    spread = min(mu, 1 - mu) * 0.2
    return rng.uniform(mu - spread, mu + spread, size=(datasets, 1))


def bounded(
    rng: np.random.Generator, n: int, kind: str, mu: float, datasets: int
) -> tuple[FloatArray, FloatArray]:
    """True means (datasets,) and each example's mean reward (datasets, n)."""
    mus = true_means(rng, mu, datasets)
    if kind == "continuous":
        values = rng.beta(mus[..., None] * 6, (1 - mus[..., None]) * 6, size=(datasets, n, 4))
        return mus[:, 0], values.mean(-1)
    if kind in ("judge", "judge4"):
        wrong, right = (0.005, 0.9) if mu < 0.5 else (0.1, 0.995)
        share = (mus - wrong) / (right - wrong)
        if kind == "judge":
            return mus[:, 0], np.where(rng.random((datasets, n)) < share, right, wrong)
        rates = rng.beta(share, 1 - share, size=(datasets, n))[..., None]
        hits = rng.random((datasets, n, 4)) < rates
        return mus[:, 0], np.where(hits, right, wrong).mean(-1)
    if kind == "payoff":
        rates = rng.beta(mus * 2, (1 - mus) * 2, size=(datasets, n))[..., None]
        own = np.clip(rates, 1e-6, 1 - 1e-6)
        low, high = PAYOFF_RANGE
        payoffs = low + (high - low) * rng.beta(own * 4, (1 - own) * 4, size=(datasets, n, 4))
        return low + (high - low) * mus[:, 0], payoffs.mean(-1)
    rates = rng.beta(mus, 1 - mus, size=(datasets, n))[..., None]
    if kind == "partial":
        return mus[:, 0], rng.binomial(4, rates, size=(datasets, n, 4)).mean(-1) / 4
    own = np.clip(rates, 1e-6, 1 - 1e-6)
    return mus[:, 0], rng.beta(own * 3, (1 - own) * 3, size=(datasets, n, 4)).mean(-1)


def on_unit_scale(kind: str, values: FloatArray) -> FloatArray:
    """Example means on [0, 1], as summarize rescales a declared range."""
    if kind != "payoff":
        return values
    low, high = PAYOFF_RANGE
    return (values - low) / (high - low)


def from_unit_scale(kind: str, values: FloatArray) -> FloatArray:
    if kind != "payoff":
        return values
    low, high = PAYOFF_RANGE
    return low + (high - low) * values

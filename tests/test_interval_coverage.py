"""Coverage of the reported intervals, by simulation.

Thousands of datasets per cell of a grid (examples n, rollouts r, true mean reward, how much
examples differ), each summarised by the interval code the plugin reports with
(``stats.intervals``, which ``summarize`` calls), vectorised over the datasets.

Examples differ: each example's own rate is drawn from Beta(mu * k, (1 - mu) * k), so its
rollouts share it (intra-example correlation 1 / (k + 1): 0.09 for k = 10, 0.5 for k = 1, where
most examples are nearly always or never solved; None: every example alike). The estimand is
mu, the mean over the population of examples, which is what a benchmark's score stands for.

The true rate of each simulated dataset is drawn uniformly from mu +- 20% (of the distance to
the nearer end of [0, 1]): a binomial interval's coverage at one exact rate jumps up and down
with the lattice of possible counts (Wilson's at n = 30 from 0.89 to 0.98 between 0.016 and
0.024), so "coverage near mu" is the meaningful figure; the jitter averages over that.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from pytest_modal_eval.stats import intervals
from pytest_modal_eval.stats.summary import summarize
from tests.support import reward_draws

RATES = (0.02, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98)
DATASETS = 2000
Cell = tuple[int, int, float, float | None]


def _true_rates(rng: np.random.Generator, mu: float, size: int) -> np.ndarray:
    spread = min(mu, 1 - mu) * 0.2
    return rng.uniform(mu - spread, mu + spread, size=(size, 1))


def _example_rates(
    rng: np.random.Generator, mus: np.ndarray, n: int, kappa: float | None
) -> np.ndarray:
    if kappa is None:
        return np.broadcast_to(mus, (len(mus), n))
    return rng.beta(mus * kappa, (1 - mus) * kappa, size=(len(mus), n))


def _binary_coverage(rng: np.random.Generator, cell: Cell, datasets: int = DATASETS) -> float:
    n, r, mu, kappa = cell
    mus = _true_rates(rng, mu, datasets)
    passes = rng.binomial(r, _example_rates(rng, mus, n, kappa))
    found = intervals.beta_binomial_score(passes, r)
    return float(np.mean((found.low <= mus[:, 0]) & (mus[:, 0] <= found.high)))


def _grid(
    ns: tuple[int, ...], rs: tuple[int, ...], kappas: tuple[float | None, ...]
) -> Iterator[Cell]:
    for n in ns:
        for r in rs:
            for mu in RATES:
                for kappa in kappas:
                    yield n, r, mu, kappa


def _conservative(cell: Cell) -> bool:
    """Where the interval is measured slightly wide (up to 98%, docs/trust.md): rates within
    0.1 of 0 or 1 with 2-8 rollouts, and examples alike at 0.02 / 0.98."""
    _, r, mu, kappa = cell
    distance = round(min(mu, 1 - mu), 6)
    return distance <= 0.1 and (2 <= r <= 8 or (kappa is None and distance <= 0.02))


def test_one_pass_fail_rollout_per_example_covers_95_percent_wherever_n_is_at_least_30() -> None:
    """Wilson's interval, what summarize reports for one pass/fail rollout per example (which
    is Bernoulli(mu) however examples differ)."""
    rng = np.random.default_rng(20261128)
    misses = {}
    for cell in _grid((30, 100), (1,), (None,)):
        coverage = _binary_coverage(rng, cell)
        if not 0.93 <= coverage <= (0.98 if _conservative(cell) else 0.97):
            misses[cell] = coverage
    assert not misses, f"coverage outside the target in (n, r, mu, k) cells: {misses}"


def _fitted_rho(mu: float, passes: np.ndarray, rollouts: np.ndarray) -> float:
    """The intra-example correlation that makes the counts most likely at mean ``mu``, by
    scipy's beta-binomial and a bounded search over the concentration k in [0.01, 10^4]."""

    def minus_loglik(log_k: float) -> float:
        k = math.exp(log_k)
        return -float(sps.betabinom.logpmf(passes, rollouts, mu * k, (1 - mu) * k).sum())

    fit = optimize.minimize_scalar(
        minus_loglik, bounds=(math.log(0.01), math.log(1e4)), method="bounded"
    )
    binomial = float(sps.binom.logpmf(passes, rollouts, mu).sum())
    return 0.0 if binomial >= -fit.fun else 1.0 / (math.exp(fit.x) + 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_beta_binomial_ends_solve_the_score_equation_with_the_fitted_spread(seed: int) -> None:
    # Examples with different numbers of rollouts, checked against scipy's beta-binomial: at
    # each end, the mean of example means is z standard errors from the end, the standard
    # error taken with the spread fitted at that end.
    rng = np.random.default_rng(seed)
    n = 40
    rollouts = rng.integers(2, 12, size=n)
    passes = rng.binomial(rollouts, rng.beta(0.3 + seed, 2.0, size=n))
    found = intervals.beta_binomial_score(passes, rollouts)
    mean = float((passes / rollouts).mean())
    z = 1.959963984540054
    assert 0.0 < float(found.low) < mean < float(found.high) < 1.0
    for end in (float(found.low), float(found.high)):
        rho = _fitted_rho(end, passes, rollouts)
        variance = end * (1 - end) * float(np.sum(rho + (1 - rho) / rollouts)) / n**2
        assert (mean - end) ** 2 / (z * z * variance) == pytest.approx(1.0, rel=0.02)


def test_beta_binomial_is_wilson_for_single_rollouts_and_reaches_the_ends() -> None:
    passes = np.array([[1] * 7 + [0] * 23, [0] * 30, [1] * 30])
    found = intervals.beta_binomial_score(passes, 1)
    for row, (low, high) in zip(passes, zip(found.low, found.high, strict=True), strict=True):
        expected = proportion_confint(int(row.sum()), 30, alpha=0.05, method="wilson")
        assert (low, high) == pytest.approx(expected)
    # 30 examples that never pass in 8 tries: the counts are as likely if a tenth of all
    # examples always passed and none of them was drawn, so the upper end is about Wilson's
    # for 0 of 30 examples (0.114), not for 0 of 240 rollouts (0.016).
    many = intervals.beta_binomial_score(np.array([[0] * 30, [8] * 30]), 8)
    wilson_examples = proportion_confint(0, 30, alpha=0.05, method="wilson")[1]
    assert many.low[0] == 0.0 and 0.1 < many.high[0] <= wilson_examples
    assert many.high[1] == 1.0 and 1 - wilson_examples <= many.low[1] < 0.9
    with pytest.raises(ValueError, match="rollouts"):
        intervals.beta_binomial_score(np.array([3]), 2)


#: Cells of the betting interval's grid: (n, what the rewards are, the true mean); the kinds
#: of rewards are tests/support/reward_draws.py's.
BETTING_CELLS = [
    (n, kind, mu) for n in (20, 50) for kind in reward_draws.KINDS for mu in (0.02, 0.1, 0.5, 0.98)
]
#: Datasets per cell: a coverage near 95% is then +-1.4 points at two standard errors (near 99%,
#: +-0.6); the figures over 20,000 datasets per cell are benchmarks/interval_coverage.py's.
BETTING_DATASETS = 1000


def test_rewards_other_than_0_1_cover_in_every_regime() -> None:
    """The interval summarize reports for rewards other than 0/1 (the betting interval of the
    example means, rescaled from a declared range) covers at least 94% in every cell: near 0
    and 1, judge-like scores piled up at two values, examples that differ as much as they can,
    partial credit, payoffs; n = 20 and 50."""
    rng = np.random.default_rng(35)
    low = {}
    for n, kind, mu in BETTING_CELLS:
        truth, means = reward_draws.bounded(rng, n, kind, mu, BETTING_DATASETS)
        # As summarize does with a declared range: the interval on [0, 1], scaled back.
        found = intervals.betting(reward_draws.on_unit_scale(kind, means))
        low_end = reward_draws.from_unit_scale(kind, found.low)
        covered = (low_end <= truth) & (truth <= reward_draws.from_unit_scale(kind, found.high))
        if covered.mean() < 0.94:
            low[(n, kind, mu)] = float(covered.mean())
    assert not low, f"coverage below 94% in (n, rewards, mu) cells: {low}"


def test_summarize_reports_the_betting_interval_for_rewards_other_than_0_1() -> None:
    # Every example scores a little above zero (a judge's probability): the interval is not
    # shrunk around the mean, and reaches about as far as 0/1 rewards that are all 0 allow.
    near_zero = summarize({str(i): [0.001] * 4 for i in range(20)})
    zero = summarize({str(i): [0.0] * 4 for i in range(20)})
    assert near_zero.interval == "betting" and zero.interval == "betting"
    assert near_zero.ci_low <= 0.001 and near_zero.ci_high >= 0.9 * zero.ci_high
    rng = np.random.default_rng(4)
    passes = rng.binomial(4, rng.beta(0.2, 1.8, size=(30, 1)), size=(30, 4))
    s = summarize({str(i): list(row / 4) for i, row in enumerate(passes)})
    found = intervals.betting(passes.mean(1) / 4)
    assert s.interval == "betting"
    assert (s.ci_low, s.ci_high) == pytest.approx((float(found.low), float(found.high)))
    # The interval is a function of the example means alone, whatever their order.
    shuffled = summarize({str(i): list(row / 4) for i, row in reversed(list(enumerate(passes)))})
    assert (shuffled.ci_low, shuffled.ci_high) == (s.ci_low, s.ci_high)


def test_unbounded_rewards_t_interval_covers_and_stays_within_observed_rewards() -> None:
    rng = np.random.default_rng(5)
    for n in (30, 100):
        # Scores 0-10 with a skew: a t interval of example means.
        example = rng.gamma(2.0, 1.5, size=(4000, n))
        rewards = example[..., None] + rng.normal(0, 1, size=(4000, n, 4))
        means = rewards.mean(-1)
        found = intervals.clipped_t(means, float(rewards.min()), float(rewards.max()))
        coverage = float(np.mean((found.low <= 3.0) & (found.high >= 3.0)))
        assert 0.93 <= coverage <= 0.97, (n, coverage)


def test_summarize_reports_the_interval_the_simulation_checks() -> None:
    rng = np.random.default_rng(1)
    rewards = (rng.random((30, 32)) < rng.beta(0.5, 4.5, size=(30, 1))).astype(float)
    s = summarize({str(i): list(row) for i, row in enumerate(rewards)})
    found = intervals.betting(rewards.mean(1))
    assert (s.ci_low, s.ci_high) == pytest.approx((float(found.low), float(found.high)))
    assert s.interval == "betting" and s.reward_range == (0.0, 1.0)


@pytest.mark.parametrize(
    ("n", "mu"), [(20, 0.02), (50, 0.02), (50, 0.05), (50, 0.5), (50, 0.95), (50, 0.98)]
)
def test_pass_fail_rewards_of_examples_at_two_rates_cover_with_many_rollouts(
    n: int, mu: float
) -> None:
    """Several pass/fail rollouts per example, each example's rate at one of two values (a
    judge-like benchmark: most examples nearly never solved, some nearly always) with 32
    rollouts: where a beta model of how examples differ covered 77% at n = 50, mu = 0.02
    (docs/trust.md). The interval summarize reports (betting, over the example means) covers
    at least 94% (1,000 datasets: +-1.4 points near 95%)."""
    rng = np.random.default_rng(int(mu * 1000) + n)
    # Mirrored above 0.5: most examples nearly always solved, some nearly never.
    low_rate, high_rate = (0.005, 0.9) if mu <= 0.5 else (0.1, 0.995)
    rollouts, datasets = 32, 1000
    share = (mu - low_rate) / (high_rate - low_rate)  # examples at the high rate
    high = rng.random((datasets, n)) < share
    passes = rng.binomial(rollouts, np.where(high, high_rate, low_rate))
    found = intervals.betting(passes / rollouts)
    covered = (found.low <= mu) & (mu <= found.high)
    assert covered.mean() >= 0.94, covered.mean()
    # What summarize reports for one of these datasets.
    s = summarize({str(i): [1.0] * p + [0.0] * (rollouts - p) for i, p in enumerate(passes[0])})
    assert s.interval == "betting"
    assert (s.ci_low, s.ci_high) == pytest.approx((float(found.low[0]), float(found.high[0])))

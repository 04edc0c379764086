"""Confidence intervals for a mean reward over examples, within the rewards' possible range.

One function per kind of reward, each vectorised over many datasets at once (the last axis is
the examples) so a simulation can check the coverage of exactly the code that reports it:

- :func:`beta_binomial_score` for pass/fail rewards (reported with one rollout per example, where
  it is Wilson's; with several it is the benchmarks' reference only: it under-covers where
  examples' rates sit at two values, docs/trust.md): a score interval in which every candidate
  mean brings its own fit of how much examples differ. Each example has its own solve rate,
  drawn from a beta distribution with mean mu; its rollouts are binomial given that rate (the
  beta-binomial model, whose intra-example correlation is rho = 1 / (k + 1) for the beta's
  concentration k). A candidate mean mu is inside when the mean of example means lies within z
  standard errors of it, the standard error taken at mu and at the rho that makes the counts
  most likely given mu. A mean near 0 that comes from a few examples solved now and then is
  therefore checked against the spread those examples would need to have at each candidate,
  not only the spread one sample happened to show. With one rollout per example rho drops out
  and this is Wilson's score interval of a proportion.
- :func:`betting` for pass/fail rewards with several rollouts and other rewards in [0, 1] (or a
  declared range rescaled to it: partial credit, a judge's scores, payoffs): the betting
  confidence interval of Waudby-Smith & Ramdas over the example means, which covers whatever
  their distribution -- near 0 or 1, judge scores piled up at two values, examples that differ
  as much as they can -- at the price of about 1.4 times the width of an interval from the
  normal approximation where that approximation holds.
- :func:`clustered_wilson`: a Wilson score interval whose sample size is the *effective*
  number of independent rollouts, n * r divided by the design effect measured from the spread
  of the example means, with a t quantile whose degrees of freedom come from a jackknife of
  that design effect. Not reported for a run's mean: for judge-like scores near 0 or 1 it
  covers as little as 47% of the time (docs/trust.md). The live progress line's
  :func:`running_wilson` uses its design effect, and the benchmarks print it as a comparison.
- :func:`clipped_t` for rewards of unknown range: a t interval around the mean of example
  means, clipped to the smallest and largest reward observed.

docs/trust.md reports the coverage these reach in simulation (tests/test_interval_coverage.py,
benchmarks/interval_coverage.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

from pytest_modal_eval.stats import capital

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: ``RewardSummary.interval`` for each method.
METHOD_WILSON = "wilson"  # one pass/fail rollout per example: exactly Wilson's interval
METHOD_BETA_BINOMIAL = "beta-binomial-score"
METHOD_CLUSTERED_WILSON = "clustered-wilson"
METHOD_BETTING = "betting"  # any other rewards within a known range

METHOD_T = "t-clipped"

#: Concentrations k of the beta distribution of example rates tried when fitting the spread:
#: from examples that are all-or-nothing (k = 0.01, rho = 0.99) to examples that are alike
#: (k = 10^4); Newton's method refines the best of them.
_CONCENTRATIONS = np.logspace(-2.0, 4.0, 13)
_NEWTON_STEPS = 4
#: Halvings of [0, 1] when locating each end of an interval: ends to within 6e-8.
_HALVINGS = 24
#: Rates kept off 0 and 1 where logarithms of them are taken.
_TINY = 1e-12
#: The share of capital a bet of :func:`betting` may risk (the paper's truncation ``c``): near
#: 0 or 1 it is what bounds the far side's bets, and a share near 1 narrows the interval there
#: (n = 20, mean 0.02: width 0.20 at 0.9, 0.30 at 1/2; docs/trust.md).
BETTING_SHARE = 0.9
#: Halvings of [0, 1] when :func:`betting` locates each end: ends to within 1e-9.
_BETTING_HALVINGS = 30


@dataclass(frozen=True)
class Intervals:
    low: FloatArray
    high: FloatArray


def _t_quantile(confidence: float, dof: FloatArray) -> FloatArray:
    """Two-sided quantile; infinite degrees of freedom give the normal quantile."""
    z = float(special.ndtri(0.5 + confidence / 2))
    finite = np.isfinite(dof)
    q = np.full(dof.shape, z)
    if np.any(finite):
        q[finite] = special.stdtrit(dof[finite], 0.5 + confidence / 2)
    return q


def _wilson(mean: FloatArray, a: FloatArray | float) -> Intervals:
    """Wilson's score interval of a proportion ``mean``; it depends on z and the sample size n
    only through ``a`` = z^2 / n."""
    centre = (mean + a / 2) / (1 + a)
    half = np.sqrt(a * mean * (1.0 - mean) + a * a / 4) / (1 + a)
    return Intervals(np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0))


class _PassCounts:
    """Pass counts of many datasets, kept as how many examples pass (and fail) more than t times.

    An example with j passes of r contributes, up to a term free of mu and k,
    log[a (a+1)...(a+j-1)] + log[b (b+1)...(b+r-j-1)] - log[k (k+1)...(k+r-1)] to the
    beta-binomial log-likelihood, with a = mu k, b = (1 - mu) k. Summed over examples, the
    factor a + t appears once for every example with more than t passes, so a dataset is
    known by those counts: 100,000 examples cost what 30 with as many rollouts cost.
    """

    def __init__(self, successes: IntArray, rollouts: IntArray) -> None:
        steps = np.arange(int(rollouts.max()))
        fails = rollouts - successes
        self.pass_tail = (successes[..., None] > steps).sum(-2).astype(np.float64)
        self.fail_tail = (fails[..., None] > steps).sum(-2).astype(np.float64)
        # Only the steps some example of some dataset reaches enter the likelihood.
        self.pass_steps = steps[: int(successes.max()) if successes.size else 0]
        self.fail_steps = steps[: int(fails.max()) if fails.size else 0]
        self.pass_tail = self.pass_tail[:, : len(self.pass_steps)]
        self.fail_tail = self.fail_tail[:, : len(self.fail_steps)]
        self.steps = steps.astype(np.float64)
        self.reached = (rollouts[:, None] > steps).sum(0).astype(np.float64)
        self.rising = np.log(_CONCENTRATIONS[:, None] + self.steps) @ self.reached
        self.datasets = successes.shape[0]
        self.passes = successes.sum(-1).astype(np.float64)
        self.fails = fails.sum(-1).astype(np.float64)

    def spread(self, mu: FloatArray) -> FloatArray:
        """rho of the spread of example rates that makes each dataset most likely at mean ``mu``
        (k = infinity, rho = 0, is the binomial of examples alike)."""
        mu = np.clip(mu, _TINY, 1 - _TINY)
        a = mu[:, None] * _CONCENTRATIONS
        b = (1 - mu)[:, None] * _CONCENTRATIONS
        loglik = -np.broadcast_to(self.rising, a.shape)
        loglik = loglik + np.einsum(
            "dt,dkt->dk", self.pass_tail, np.log(a[..., None] + self.pass_steps)
        )
        loglik += np.einsum("dt,dkt->dk", self.fail_tail, np.log(b[..., None] + self.fail_steps))
        binomial = special.xlogy(self.passes, mu) + special.xlogy(self.fails, 1 - mu)
        # Newton's method on log k from the best point of the grid, kept between its neighbours.
        best = loglik.argmax(1)
        grid = np.log(_CONCENTRATIONS)
        lowest = grid[np.maximum(best - 1, 0)]
        highest = grid[np.minimum(best + 1, len(grid) - 1)]
        log_k = grid[best]
        for _ in range(_NEWTON_STEPS):
            slope, curve = self._derivatives(mu, np.exp(log_k))
            with np.errstate(divide="ignore", invalid="ignore"):
                step = np.where(curve < 0, -slope / curve, np.sign(slope) * (highest - lowest))
            log_k = np.clip(log_k + np.nan_to_num(step), lowest, highest)
        k = np.exp(log_k)
        top = self._loglik(mu, k)
        return np.where(binomial >= top, 0.0, 1.0 / (k + 1.0))

    def _loglik(self, mu: FloatArray, k: FloatArray) -> FloatArray:
        """The log-likelihood at one concentration per dataset, as in :meth:`spread`."""
        a, b = (mu * k)[:, None], ((1 - mu) * k)[:, None]
        loglik: FloatArray = (
            (self.pass_tail * np.log(a + self.pass_steps)).sum(1)
            + (self.fail_tail * np.log(b + self.fail_steps)).sum(1)
            - np.log(k[:, None] + self.steps) @ self.reached
        )
        return loglik

    def _derivatives(self, mu: FloatArray, k: FloatArray) -> tuple[FloatArray, FloatArray]:
        """First and second derivative of the log-likelihood in log k."""
        a, b = (mu * k)[:, None], ((1 - mu) * k)[:, None]
        to_a = 1.0 / (a + self.pass_steps)
        to_b = 1.0 / (b + self.fail_steps)
        to_k = 1.0 / (k[:, None] + self.steps)
        m = mu[:, None]
        first = (
            (self.pass_tail * m * to_a).sum(1)
            + (self.fail_tail * (1 - m) * to_b).sum(1)
            - to_k @ self.reached
        )
        second = (
            -(self.pass_tail * (m * to_a) ** 2).sum(1)
            - (self.fail_tail * ((1 - m) * to_b) ** 2).sum(1)
            + (to_k * to_k) @ self.reached
        )
        return k * first, k * first + k * k * second


def beta_binomial_score(
    successes: npt.ArrayLike, rollouts: npt.ArrayLike, *, confidence: float = 0.95
) -> Intervals:
    """The beta-binomial score interval of the mean of pass/fail examples' mean rewards.

    ``successes`` has the examples on its last axis (one row per dataset for a simulation):
    each example's passed rollouts; ``rollouts`` is each example's number of rollouts (one
    number for all). The estimate is the mean of example means, every example weighing the
    same. Its variance at a candidate mean mu is mu (1 - mu) / n^2 * sum_i (rho + (1 - rho) /
    r_i), with rho fitted at mu (:meth:`_PassCounts.spread`); mu is inside when the estimate
    is within z of those standard errors. Each end is found by halving. With one rollout per
    example this is Wilson's interval; with one example, Wilson's for a single observation.
    """
    s = np.asarray(successes, dtype=np.int64)
    shape = s.shape[:-1]
    s = s.reshape(-1, s.shape[-1])
    r = np.broadcast_to(np.asarray(rollouts, dtype=np.int64), s.shape[-1:])
    if np.any(r < 1) or np.any(s < 0) or np.any(s > r):
        raise ValueError("every example needs 1 or more rollouts and 0..rollouts passes")
    n = s.shape[-1]
    mean = (s / r).mean(-1)
    z2 = float(special.ndtri(0.5 + confidence / 2)) ** 2
    if np.all(r == 1):
        found = _wilson(mean, z2 / n)
        return Intervals(found.low.reshape(shape), found.high.reshape(shape))
    counts = _PassCounts(s, r)
    inverse = float((1.0 / r).sum())

    def inside(mu: FloatArray) -> npt.NDArray[np.bool_]:
        # One example says nothing of how examples differ: the widest spread, rho = 1.
        rho = counts.spread(mu) if n > 1 else np.ones(mu.shape)
        var = mu * (1 - mu) * (n * rho + (1 - rho) * inverse) / (n * n)
        ok: npt.NDArray[np.bool_] = (mean - mu) ** 2 <= z2 * var
        return ok

    def end(outside: float) -> FloatArray:
        found, beyond = mean.copy(), np.full(mean.shape, outside)
        for _ in range(_HALVINGS):
            middle = (found + beyond) / 2
            ok = inside(middle)
            found, beyond = np.where(ok, middle, found), np.where(ok, beyond, middle)
        # Every rollout failed (or passed): the interval reaches 0 (or 1).
        return np.where(mean == outside, outside, found)

    return Intervals(end(0.0).reshape(shape), end(1.0).reshape(shape))


def _design_effect(
    total: FloatArray, squares: FloatArray, n: int, rollouts: float, z2: float
) -> FloatArray:
    """r * var(example means) / (m (1 - m)), kept within what [0, 1] rewards allow.

    Its ceiling, r, is the largest variance example means in [0, 1] can have (Bhatia-Davis:
    var <= m (1 - m)). With nothing to measure it from (n < 2, or every mean 0 or 1)
    the ceiling is used: the interval is then as wide as [0, 1]-valued example means can need.
    Its floor is w = z^2 / (n + z^2), Wilson's upper end for 0 of n: n examples cannot show
    that no share up to w of all examples has pass/fail rollouts (independent, each 0 or 1,
    with mean m), and such a share alone gives example means the variance w m (1 - m) / r.
    """
    mean = total / n
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (squares - total * total / n) / (n - 1) if n > 1 else np.full(total.shape, np.nan)
        pq = mean * (1.0 - mean)
        deff = np.where(pq > 0, rollouts * np.maximum(var, 0.0) / pq, rollouts)
    deff = np.where(np.isfinite(deff), deff, rollouts)
    return np.clip(deff, min(z2 / (n + z2), rollouts), rollouts)


def clustered_wilson(
    means: npt.ArrayLike, rollouts: float, *, confidence: float = 0.95
) -> Intervals:
    """The clustered Wilson interval of the mean of ``means`` (example means in [0, 1]).

    ``means`` has the examples on its last axis (one row per dataset for a simulation);
    ``rollouts`` is the rollouts per example (their mean when it varies). The design effect
    is estimated from the spread of the example means, and kept at least z^2 / (n + z^2) (see
    :func:`_design_effect`), so that example means that agree never give a zero-width
    interval; its uncertainty, measured by a
    jackknife over examples, sets the degrees of freedom of the t quantile used in place of z
    (Satterthwaite: an estimate with relative variance v has 2 / v degrees of freedom).
    """
    y = np.asarray(means, dtype=np.float64)
    n = y.shape[-1]
    total, squares = y.sum(-1), (y * y).sum(-1)
    mean = total / n
    z2 = float(special.ndtri(0.5 + confidence / 2)) ** 2
    deff = _design_effect(total, squares, n, rollouts, z2)
    dof = np.full(mean.shape, np.inf)
    if n >= 3:
        # Jackknife over examples: how much the design effect moves when one example is left
        # out. Satterthwaite: an estimate with relative variance v has 2 / v degrees of freedom.
        left_out = _design_effect(
            total[..., None] - y, squares[..., None] - y * y, n - 1, rollouts, z2
        )
        spread = (n - 1) / n * ((left_out - left_out.mean(-1, keepdims=True)) ** 2).sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            dof = np.where(spread > 0, 2.0 * deff * deff / spread, np.inf)
        # At the ceiling nothing estimated enters the interval.
        dof = np.where(deff >= rollouts, np.inf, np.maximum(dof, 1.0))
    q = _t_quantile(confidence, dof)
    # Wilson's n is here the effective number of rollouts, n * r / deff.
    return _wilson(mean, q * q * deff / (n * rollouts))


def betting(means: npt.ArrayLike, *, confidence: float = 0.95) -> Intervals:
    """The betting confidence interval of the mean of ``means`` (example means in [0, 1]).

    Waudby-Smith & Ramdas ("Estimating means of bounded random variables by betting", JRSS-B
    2024; the fixed-n hedged capital interval of their Section 5.3): the example means are bet
    on with the predictable plug-in sizes tuned for n examples
    (:func:`~pytest_modal_eval.stats.capital.fixed_n`), the same for every candidate, through
    the capital process the confidence sequence uses (:mod:`~pytest_modal_eval.stats.capital`).
    A candidate mean is outside once the upward or the downward capital after the last example
    reaches ``2 / (1 - confidence)`` (Markov's inequality, each side at half the miss rate).
    Each capital is monotone in the candidate, so each end is found by halving.

    The bets are placed in a fixed order of the values -- sorted, then a permutation seeded by
    their number -- so the interval is a function of the values alone (the same for a run and
    for the same examples merged from shards). The capital after the last value is a product
    over all of them and depends on their order only through the bet sizes: averaging it over
    32 orders gives the coverage and widths of any one (docs/trust.md). The capital's maximum
    over the examples is not used: it depends on the order, and one fixed order of sorted
    values can make it cover 88% where another covers 99%.

    Nothing is assumed of the distribution of example means but that they lie in [0, 1] and
    examples are independent: the coverage holds near 0 and 1, for judge-like scores piled up
    at two values, and for examples that differ as much as they can. ``means`` has the
    examples on its last axis (one row per dataset for a simulation).
    """
    y = np.asarray(means, dtype=np.float64)
    shape, n = y.shape[:-1], y.shape[-1]
    x = np.sort(y.reshape(-1, n), axis=-1)[:, np.random.default_rng(n).permutation(n)]
    side = (1.0 - confidence) / 2.0
    _, variance = capital.estimates(x)
    bets = capital.fixed_n(variance, n, side)
    barrier = math.log(1.0 / side)

    def ruled_out(m: FloatArray, *, upward: bool) -> npt.NDArray[np.bool_]:
        implied = np.clip(m, capital.TINY, 1.0 - capital.TINY)[:, None]
        grown = capital.log_growth(bets, x, implied, upward=upward, share=BETTING_SHARE)
        out: npt.NDArray[np.bool_] = grown.sum(axis=-1) >= barrier
        return out

    # Upward, the candidates ruled out are those below the lower end; downward, above the
    # upper end. The side ruled out is kept, so that each end is outward of the true one.
    low, high = np.zeros(len(x)), np.ones(len(x))
    inside_low, inside_high = np.ones(len(x)), np.zeros(len(x))
    for _ in range(_BETTING_HALVINGS):
        middle = (low + inside_low) / 2
        out = ruled_out(middle, upward=True)
        low, inside_low = np.where(out, middle, low), np.where(out, inside_low, middle)
        middle = (high + inside_high) / 2
        out = ruled_out(middle, upward=False)
        high, inside_high = np.where(out, middle, high), np.where(out, inside_high, middle)
    return Intervals(low.reshape(shape), high.reshape(shape))


def running_wilson(
    n: int, mean: float, squared_deviations: float, *, confidence: float = 0.95
) -> tuple[float, float]:
    """An interval of the mean of ``n`` example means in [0, 1] known only by their mean and
    sum of squared deviations (a running mean): Wilson's score interval with the design effect
    of :func:`clustered_wilson`, one unit per example, kept within [z^2 / (n + z^2), 1], and
    the normal quantile. Examples that all agree (six of six solved) give the interval n
    examples allow, never one of zero width."""
    z2 = float(special.ndtri(0.5 + confidence / 2)) ** 2
    total = np.asarray(n * mean, dtype=np.float64)
    squares = np.asarray(squared_deviations + n * mean * mean, dtype=np.float64)
    deff = _design_effect(total, squares, n, 1.0, z2)
    interval = _wilson(np.asarray(mean, dtype=np.float64), z2 * deff / n)
    return float(interval.low), float(interval.high)


def clipped_t(
    means: npt.ArrayLike, low: float, high: float, *, confidence: float = 0.95
) -> Intervals:
    """A t interval (n - 1 degrees of freedom) of the mean of ``means``, clipped to
    [``low``, ``high``], the smallest and largest reward observed. NaN for one example."""
    y = np.asarray(means, dtype=np.float64)
    n = y.shape[-1]
    mean = y.mean(-1)
    if n < 2:
        nan = np.full(mean.shape, np.nan)
        return Intervals(nan, nan.copy())
    sem = y.std(-1, ddof=1) / np.sqrt(n)
    half = _t_quantile(confidence, np.full(mean.shape, n - 1.0)) * sem
    return Intervals(np.clip(mean - half, low, high), np.clip(mean + half, low, high))

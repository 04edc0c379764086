"""Confidence intervals for a mean reward over examples, within the rewards' possible range.

One function per kind of reward, each vectorised over many datasets at once (the last axis is
the examples) so a simulation can check the coverage of exactly the code that reports it:

- :func:`clustered_wilson` for rewards in [0, 1] (pass/fail, or partial credit): a Wilson score
  interval whose sample size is the *effective* number of independent rollouts, n * r divided by
  the design effect measured from the spread of the example means. Examples are the sampled
  units (the rollouts of one example share its difficulty), so the design effect runs from 1
  (rollouts as good as independent) to r (every rollout of an example agrees). The score form
  keeps the interval inside [0, 1] and keeps its coverage near 0 and 1, where a t interval
  around the mean collapses or spills over. The design effect is itself estimated from n
  examples; its uncertainty, measured by a jackknife over examples, sets the degrees of freedom
  of the t quantile used in place of z (Satterthwaite), which widens the interval where a few
  examples carry most of the reward (few examples x many rollouts, rates near 0 or 1); there
  the estimate is still often too small and the coverage below 95% (docs/trust.md).
- :func:`clipped_t` for rewards of unknown range: a t interval around the mean of example
  means, clipped to the smallest and largest reward observed.

docs/trust.md reports the coverage these reach in simulation (tests/test_interval_coverage.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

FloatArray = npt.NDArray[np.float64]

#: ``RewardSummary.interval`` for each method.
METHOD_WILSON = "wilson"  # one pass/fail rollout per example: exactly Wilson's interval
METHOD_CLUSTERED_WILSON = "clustered-wilson"
METHOD_T = "t-clipped"


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


def _design_effect(
    total: FloatArray, squares: FloatArray, n: int, rollouts: float, binary: bool
) -> FloatArray:
    """r * var(example means) / (m (1 - m)), kept within what [0, 1] rewards allow.

    Its ceiling, r, is the largest variance example means in [0, 1] can have (Bhatia-Davis:
    var <= m (1 - m)); pass/fail rollouts also have the floor 1 (an example's mean is at least
    as noisy as a binomial's). With nothing to measure it from (n < 2, or every mean 0 or 1)
    the ceiling is used: the interval is then as wide as [0, 1]-valued example means can need.
    """
    mean = total / n
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (squares - total * total / n) / (n - 1) if n > 1 else np.full(total.shape, np.nan)
        pq = mean * (1.0 - mean)
        deff = np.where(pq > 0, rollouts * np.maximum(var, 0.0) / pq, rollouts)
    deff = np.where(np.isfinite(deff), deff, rollouts)
    return np.clip(deff, 1.0 if binary else 0.0, rollouts)


def clustered_wilson(
    means: npt.ArrayLike, rollouts: float, *, binary: bool, confidence: float = 0.95
) -> Intervals:
    """The clustered Wilson interval of the mean of ``means`` (example means in [0, 1]).

    ``means`` has the examples on its last axis (one row per dataset for a simulation);
    ``rollouts`` is the rollouts per example (their mean when it varies); ``binary``: every
    rollout reward is 0 or 1. With one rollout per pass/fail example this is exactly the Wilson
    score interval of a proportion.
    """
    y = np.asarray(means, dtype=np.float64)
    n = y.shape[-1]
    total, squares = y.sum(-1), (y * y).sum(-1)
    mean = total / n
    deff = _design_effect(total, squares, n, rollouts, binary)
    dof = np.full(mean.shape, np.inf)
    if n >= 3 and (rollouts > 1 or not binary):
        # Jackknife over examples: how much the design effect moves when one example is left
        # out. Satterthwaite: an estimate with relative variance v has 2 / v degrees of freedom.
        left_out = _design_effect(
            total[..., None] - y, squares[..., None] - y * y, n - 1, rollouts, binary
        )
        spread = (n - 1) / n * ((left_out - left_out.mean(-1, keepdims=True)) ** 2).sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            dof = np.where(spread > 0, 2.0 * deff * deff / spread, np.inf)
        # At the ceiling nothing estimated enters the interval.
        dof = np.where(deff >= rollouts, np.inf, np.maximum(dof, 1.0))
    q = _t_quantile(confidence, dof)
    # Wilson's interval depends on z and n only through a = z^2 / n; here n is n * r / deff.
    a = q * q * deff / (n * rollouts)
    pq = mean * (1.0 - mean)
    centre = (mean + a / 2) / (1 + a)
    half = np.sqrt(a * pq + a * a / 4) / (1 + a)
    return Intervals(np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0))


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

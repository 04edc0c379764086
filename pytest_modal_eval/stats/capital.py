"""The capital of a bettor on a bounded mean: what the confidence sequence and the betting
interval share.

Waudby-Smith & Ramdas ("Estimating means of bounded random variables by betting", JRSS-B
2024). For values ``x_1, x_2, ...`` in [0, 1] and a candidate mean ``m``, a bettor starts with
capital 1 and before each value stakes a share ``b_i`` of it on ``x_i`` lying above ``m_i``,
the mean the candidate implies for ``x_i``; she ends with ``K_t(m) = prod (1 + b_i (x_i - m_i))``.
Were ``m`` the true mean, ``K_t(m)`` would be a nonnegative martingale whatever the bets, as
long as each is fixed before its value is seen and keeps every factor above 0; by Ville's
inequality it ever reaches ``1 / a`` with probability at most ``a``, so ``m`` is ruled out
once it does. A second capital bets the other way, on ``x_i`` lying below ``m_i``.

- ``m_i`` (:func:`implied_mean`): ``m`` itself for values drawn with replacement; for values
  drawn without replacement from a population of ``N``, the mean of the values not yet seen
  were ``m`` the population's: ``(N m - S) / (N - i + 1)``, ``S`` the sum of those before.
- The bets come from the running mean and variance of the values before (:class:`Estimates`,
  :func:`estimates`, regularised by one value at 1/2 of variance 1/4): :func:`agrapa` for the
  confidence sequence, :func:`fixed_n` for the interval over a known number of values.
- :func:`log_growth` caps each side's stake at ``MAX_SHARE / m_i`` upward and
  ``MAX_SHARE / (1 - m_i)`` downward (the paper's truncation), so no factor reaches 0, and
  returns the logarithm of the factor: capitals are kept as logarithms.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: The running estimates start from one value at 1/2 with variance 1/4 (the paper's choice).
PRIOR_MEAN = 0.5
PRIOR_VARIANCE = 0.25
#: Implied means are kept this far inside [0, 1] where they divide.
TINY = 1e-12


class Estimates:
    """Running mean and variance of values in [0, 1], one value at a time (the paper's
    regularised estimates, as :func:`estimates` computes them for a whole sequence). Works on
    floats and on arrays (many sequences at once)."""

    def __init__(self) -> None:
        self.count = 0
        self.total: float | FloatArray = 0.0
        self.squares: float | FloatArray = PRIOR_VARIANCE

    @property
    def mean(self) -> float | FloatArray:
        return (PRIOR_MEAN + self.total) / (self.count + 1)

    @property
    def variance(self) -> float | FloatArray:
        return self.squares / (self.count + 1)

    def update(self, value: float | FloatArray) -> None:
        self.count += 1
        self.total = self.total + value
        self.squares = self.squares + (value - self.mean) ** 2


def estimates(values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """For each value (the last axis is the sequence), the running mean and variance of the
    values before it: what :class:`Estimates` holds just before that value."""
    steps = np.arange(1, values.shape[-1] + 1)
    means = (PRIOR_MEAN + np.cumsum(values, -1)) / (steps + 1)
    variances = (PRIOR_VARIANCE + np.cumsum((values - means) ** 2, -1)) / (steps + 1)
    first = np.ones((*values.shape[:-1], 1))
    before_mean = np.concatenate([first * PRIOR_MEAN, means[..., :-1]], -1)
    before_variance = np.concatenate([first * PRIOR_VARIANCE, variances[..., :-1]], -1)
    return before_mean, before_variance


def implied_mean(
    m: FloatArray | float, seen_sum: FloatArray | float, seen: int, population: int | None
) -> FloatArray:
    """The mean candidate ``m`` implies for the next value after ``seen`` values summing to
    ``seen_sum``: ``m`` (with replacement) or the mean of the ``population - seen`` values
    not yet seen. Outside [0, 1]: no population of [0, 1] values has mean ``m``."""
    if population is None:
        return np.asarray(m, dtype=np.float64)
    return np.asarray((population * np.asarray(m) - seen_sum) / (population - seen))


def agrapa(
    mean: FloatArray | float, variance: FloatArray | float, implied: FloatArray
) -> FloatArray:
    """The approximate growth-rate adaptive bet (aGRAPA, the paper's Section 5.2): ``g / (v +
    g^2)`` with ``g = mean - implied``; positive, it is the upward capital's stake, negative,
    minus the downward one's (the other side stakes nothing). Near the Kelly bet, which grows
    the capital fastest, at every candidate: a candidate far from the values is bet against
    hard, one near them lightly."""
    gap = np.asarray(mean) - implied
    bet: FloatArray = gap / (np.asarray(variance) + gap * gap)
    return bet


def fixed_n(variance: FloatArray, n: int, alpha: float) -> FloatArray:
    """The predictable plug-in bet tuned for ``n`` values (the paper's fixed-time interval):
    ``sqrt(2 log(1 / alpha) / (n v))``, the same for every candidate, for each side at
    ``alpha``."""
    bet: FloatArray = np.sqrt(2.0 * math.log(1.0 / alpha) / (n * variance))
    return bet


def log_growth(
    stake: FloatArray | float,
    value: FloatArray | float,
    implied: FloatArray,
    *,
    upward: bool,
    share: float,
) -> FloatArray:
    """The logarithm of one factor of a capital: ``1 + b (x - m_i)`` upward, ``1 - b (x -
    m_i)`` downward, ``b`` the ``stake`` (>= 0) capped at ``share / m_i`` upward and ``share /
    (1 - m_i)`` downward. ``implied`` (``m_i``) must lie in (0, 1)."""
    step = np.asarray(value) - implied
    if upward:
        grown: FloatArray = np.log1p(np.minimum(stake, share / implied) * step)
    else:
        grown = np.log1p(-np.minimum(stake, share / (1.0 - implied)) * step)
    return grown

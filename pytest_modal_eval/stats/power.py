"""What a paired comparison can detect: the smallest drop it finds with 80% power.

A green gate means little if the test could not have failed. For each paired test of
:func:`compare_paired` this module gives the smallest true drop in mean reward that the test,
at the comparison's number of examples and ``alpha``, would call significant with probability
:data:`POWER`:

- exact McNemar (one 0/1 rollout per example): examples flip between the two sides by chance
  at the rate seen going *up* (missed -> solved); a drop of ``delta`` adds ``delta`` to the rate
  going down. The power is computed exactly, summing over the number of discordant examples.
- paired t-test (per-example means): per-example differences with the spread observed between
  the two sides, shifted by ``-delta``; the power is exact for normal differences (noncentral
  t distribution). No drop larger than the rewards' range can be. When every difference is
  the same, no noise is seen: the drop is the smallest uniform one the exact test of a
  uniform shift calls significant (any larger uniform drop is found, any smaller one never).

Both are functions of the observed noise, never of the observed difference (that would be
"post-hoc power", which says nothing the p-value does not).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy import special

POWER = 0.8
"""The power at which the detectable drop is stated."""

_TOLERANCE = 1e-6
"""How close the bisection gets to the smallest detectable drop, relative to its scale (at
least 1): an absolute step would stall once adjacent floats lie further apart than it."""

_MAX_STEPS = 200
"""Bisection steps at most: each halves the bracket, so ~50 reach float resolution from any
start; the cap ends the search even if the bracket cannot shrink further."""


def mcnemar_power(n: int, p_down: float, p_up: float, alpha: float) -> float:
    """Probability that the one-sided exact McNemar test rejects at ``alpha`` with ``n`` pairs,
    each going solved -> missed with probability ``p_down`` and missed -> solved with ``p_up``."""
    p_discordant = p_down + p_up
    if n < 1 or p_discordant <= 0.0:
        return 0.0
    p_discordant = min(p_discordant, 1.0)
    # Discordant counts beyond 10 standard deviations of their mean carry no probability a
    # float can hold: summing over that window keeps 100,000 examples fast.
    spread = 10.0 * math.sqrt(n * p_discordant * (1.0 - p_discordant)) + 10.0
    centre = n * p_discordant
    d = np.arange(max(0, math.floor(centre - spread)), min(n, math.ceil(centre + spread)) + 1)
    below = np.where(d > 0, special.bdtr(np.maximum(d - 1, 0), n, p_discordant), 0.0)
    pmf = special.bdtr(d, n, p_discordant) - below
    critical = mcnemar_critical(d, alpha)
    share_down = p_down / p_discordant
    reach = np.where(
        critical <= d,
        np.where(critical > 0, special.bdtrc(np.maximum(critical - 1, 0), d, share_down), 1.0),
        0.0,
    )
    return float(np.clip(np.sum(pmf * reach), 0.0, 1.0))


def mcnemar_critical(discordant: npt.ArrayLike, alpha: float) -> npt.NDArray[np.int64]:
    """For each number of discordant examples d, the fewest solved -> missed flips among them
    that the one-sided exact McNemar test calls significant (p < alpha); d + 1 when none is."""
    d = np.asarray(discordant, dtype=np.int64)
    z = float(special.ndtri(1.0 - alpha))
    # Start at the normal approximation and walk to the exact value (a step or two).
    b = np.clip(np.floor(d / 2 + z * np.sqrt(d) / 2).astype(np.int64), 0, d + 1)
    while np.any(down := (b > 0) & (_upper_tail(b - 1, d) < alpha)):
        b = b - down
    while np.any(up := (b <= d) & ~(_upper_tail(b, d) < alpha)):
        b = b + up
    return b


def _upper_tail(b: npt.NDArray[np.int64], d: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """P(X >= b) for X ~ Binomial(d, 1/2): the exact McNemar p-value of b flips down of d."""
    tail = special.bdtrc(np.maximum(b - 1, 0), d, 0.5)
    return np.where(b > 0, np.where(b <= d, tail, 0.0), 1.0)


def paired_t_power(n: int, drop: float, sd: float, alpha: float) -> float:
    """Probability that the one-sided paired t-test rejects at ``alpha`` when the ``n``
    per-example differences are normal with mean ``-drop`` and standard deviation ``sd``."""
    if n < 2 or sd <= 0.0:
        return math.nan
    df = n - 1
    critical = float(special.stdtrit(df, 1.0 - alpha))
    shift = drop * math.sqrt(n) / sd
    return float(1.0 - special.nctdtr(df, shift, critical))


def detectable_drop_mcnemar(n: int, noise: float, alpha: float, power: float = POWER) -> float:
    """Smallest drop in the solved share that exact McNemar detects with ``power``, when
    examples flip each way by chance at rate ``noise``; NaN when no drop is detectable."""
    if not 0.0 <= noise < 0.5:
        noise = min(max(noise, 0.0), 0.5 - _TOLERANCE)
    return _smallest(lambda x: mcnemar_power(n, noise + x, noise, alpha), 1.0 - 2.0 * noise, power)


def detectable_drop_t(
    n: int, sd: float, alpha: float, power: float = POWER, *, width: float = math.inf
) -> float:
    """Smallest mean drop the paired t-test detects with ``power`` when per-example differences
    have standard deviation ``sd``; NaN below two examples, without spread, or when no drop up
    to ``width`` (the length of the rewards' range, the largest drop there can be) is."""
    if n < 2 or not sd > 0.0:
        return math.nan
    return _smallest(lambda x: paired_t_power(n, x, sd, alpha), min(20.0 * sd, width), power)


def detectable_uniform_drop(n: int, alpha: float, width: float) -> float:
    """Smallest drop that, taken by each of ``n`` examples alike, the exact test of a uniform
    shift calls significant at ``alpha``: p = (width / (width + delta))^n < alpha from
    delta = width (alpha^(-1/n) - 1). NaN below two examples or when that exceeds ``width``."""
    if n < 2:
        return math.nan
    drop = width * math.expm1(-math.log(alpha) / n)
    return drop if drop <= width else math.nan


def _smallest(power_at: Callable[[float], float], high: float, power: float) -> float:
    """Bisection for the smallest drop in [0, high] whose power reaches ``power``."""
    if power_at(high) < power:
        return math.nan
    low = 0.0
    for _ in range(_MAX_STEPS):
        if high - low <= _TOLERANCE * max(1.0, high):
            break
        middle = (low + high) / 2
        if power_at(middle) >= power:
            high = middle
        else:
            low = middle
    return high

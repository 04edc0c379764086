"""Confidence sequences for a bounded mean, valid at every look: what lets a gate stop early.

A confidence sequence (CS) is a sequence of intervals ``C_1, C_2, ...`` with
``P(the mean is in C_t for every t) >= 1 - alpha``, so stopping at a time chosen from the data
keeps the guarantee; a fixed-sample interval re-checked after every example does not.

:class:`BettingCS` is the hedged betting CS of Waudby-Smith & Ramdas ("Estimating means of
bounded random variables by betting", JRSS-B 2024) for values in [0, 1], in its version for
sampling *without replacement* from a finite population of ``population`` values (Section 6
there): the benchmark is the population, examples arrive in a uniformly random order, and the
CS closes on the exact full-run mean as the last example arrives. For each candidate mean ``m``
on a grid two capital processes bet that the next value is above, and below, the mean ``m``
implies for the values not yet seen; ``m`` leaves the CS for good once either capital reaches
``2 / alpha`` (Ville's inequality: each side misses at any look with probability at most
``alpha / 2``, so either side is a one-sided sequence at ``alpha / 2`` on its own). The bets
are the paper's predictable plug-in (PrPl) sizes, truncated so that no capital can go
negative. The CS is also intersected with
the bounds every population of [0, 1] values consistent with the values seen must satisfy.

Written here because the reference implementation (``confseq``) ships only as a C++ source
package without wheels; the grid spacing is 1/2000, plus any thresholds the caller names
(so "is the threshold excluded" is answered exactly), and bounds are rounded outward to it.

:func:`paired_difference` maps a per-example difference in [-1, 1] to [0, 1], so a paired
comparison (a run against its baseline) uses the same CS; :meth:`BettingCS.difference_bounds`
maps its bounds back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

#: Candidate means on [0, 1] between grid points, before the caller's thresholds are added.
GRID_STEPS = 2000
#: Truncation of the bets (the paper's ``c``): a bet never risks more than this share of capital.
MAX_BET_SHARE = 0.5


class BettingCS:
    """A two-sided ``1 - alpha`` confidence sequence for the mean of values in [0, 1].

    ``population``: the number of values the mean is over when they are drawn without
    replacement (None: drawn with replacement, an infinite population). ``thresholds`` are
    put on the grid so that :meth:`above` and :meth:`below` are exact for them.
    """

    def __init__(
        self, alpha: float, population: int | None = None, thresholds: Iterable[float] = ()
    ) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        if population is not None and population < 1:
            raise ValueError(f"population must be >= 1, got {population}")
        self.alpha = alpha
        self.population = population
        extra = [t for t in thresholds if 0.0 <= t <= 1.0]
        self.grid: npt.NDArray[np.float64] = np.unique(
            np.concatenate([np.linspace(0.0, 1.0, GRID_STEPS + 1), np.asarray(extra, float)])
        )
        self._log_up = np.zeros_like(self.grid)
        self._log_down = np.zeros_like(self.grid)
        self._excluded = np.zeros(self.grid.shape, dtype=bool)
        self._active = slice(0, len(self.grid))  # every candidate not excluded lies within
        self._log_barrier = math.log(2.0 / alpha)
        self.n = 0
        self._sum = 0.0
        # Running plug-in estimates of the mean and variance (the paper's regularised ones).
        self._mean_hat = 0.5
        self._var_sum = 0.25
        self.lower = 0.0
        self.upper = 1.0

    def _bet(self) -> float:
        """The PrPl bet size for the next value, from the values seen so far only."""
        t = self.n + 1
        variance = self._var_sum / t
        return math.sqrt(2.0 * math.log(2.0 / self.alpha) / (variance * t * math.log1p(t)))

    def update(self, value: float) -> None:
        """Take the next value (in [0, 1]); the bounds narrow or stay."""
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ValueError(f"a confidence sequence for [0, 1] values got {value!r}")
        population = self.population
        if population is not None and self.n >= population:
            raise ValueError(f"all {population} values of the population were already seen")
        bet = self._bet()
        # Only candidates still in the CS are bet on: one excluded stays excluded.
        active = self._active
        grid = self.grid[active]
        if population is None:
            implied = grid
        else:
            # The mean of the values not yet seen, were the population's mean m.
            implied = (population * grid - self._sum) / (population - self.n)
        with np.errstate(divide="ignore", invalid="ignore"):
            possible = (implied >= 0.0) & (implied <= 1.0)
            safe = np.clip(implied, 1e-12, 1.0 - 1e-12)
            bet_up = np.minimum(bet, MAX_BET_SHARE / safe)
            bet_down = np.minimum(bet, MAX_BET_SHARE / (1.0 - safe))
            log_up = self._log_up[active]
            log_down = self._log_down[active]
            log_up += np.log1p(bet_up * (value - safe))
            log_down += np.log1p(-bet_down * (value - safe))
        # Each side on its own (not the hedged mix of the two): a lower bound then misses with
        # probability at most alpha / 2 whatever the upper one does, which is what makes a
        # one-sided decision (runs/early_stop.py) wrong at most that often.
        self._excluded[active] |= (
            ~possible | (log_up >= self._log_barrier) | (log_down >= self._log_barrier)
        )
        self.n += 1
        self._sum += value
        self._var_sum += (value - self._mean_hat) ** 2
        self._mean_hat = (0.5 + self._sum) / (self.n + 1)
        self._narrow()

    def _narrow(self) -> None:
        lower, upper = 0.0, 1.0
        if self.population is not None:
            unseen = self.population - self.n
            lower, upper = self._sum / self.population, (self._sum + unseen) / self.population
        kept = np.flatnonzero(~self._excluded[self._active]) + self._active.start
        self._active = slice(kept[0], kept[-1] + 1) if len(kept) else slice(0, 0)
        if len(kept):
            first, last = int(kept[0]), int(kept[-1])
            # Outward to the excluded neighbours: a mean between grid points stays inside.
            lower = max(lower, float(self.grid[first - 1]) if first > 0 else 0.0)
            upper = min(upper, float(self.grid[last + 1]) if last + 1 < len(self.grid) else 1.0)
        lower, upper = max(lower, self.lower), min(upper, self.upper)
        if lower <= upper:  # the running intersection of intervals of a CS is one too
            self.lower, self.upper = lower, upper

    def above(self, threshold: float) -> bool:
        """Whether the whole CS is at or above ``threshold`` (a mean below it is ruled out)."""
        return self.lower >= threshold and not self._kept_at(threshold, below=True)

    def below(self, threshold: float) -> bool:
        """Whether the whole CS is below ``threshold``."""
        return self.upper <= threshold and not self._kept_at(threshold, below=False)

    def _kept_at(self, threshold: float, *, below: bool) -> bool:
        """Whether a candidate on the far side of ``threshold`` is still in the CS: for
        ``below``, one under it (``above`` then cannot hold), else one at or over it."""
        if self.population is not None and self.n >= self.population:
            exact = self._sum / self.population
            return exact < threshold if below else exact >= threshold
        side = self.grid < threshold if below else self.grid >= threshold
        in_bounds = (self.grid >= self.lower) & (self.grid <= self.upper)
        return bool(np.any(side & in_bounds & ~self._excluded))

    def difference_bounds(self) -> tuple[float, float]:
        """The bounds on the [-1, 1] scale, for values made by :func:`paired_difference`."""
        return 2.0 * self.lower - 1.0, 2.0 * self.upper - 1.0


def paired_difference(run: float, baseline: float) -> float:
    """``run - baseline`` (each in [0, 1]) mapped from [-1, 1] onto [0, 1]."""
    return (run - baseline + 1.0) / 2.0

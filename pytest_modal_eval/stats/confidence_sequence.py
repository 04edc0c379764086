"""Confidence sequences for a bounded mean, valid at every look: what lets a gate stop early.

A confidence sequence (CS) is a sequence of intervals ``C_1, C_2, ...`` with
``P(the mean is in C_t for every t) >= 1 - alpha``, so stopping at a time chosen from the data
keeps the guarantee; a fixed-sample interval re-checked after every example does not.

:class:`BettingCS` is the betting CS of Waudby-Smith & Ramdas ("Estimating means of bounded
random variables by betting", JRSS-B 2024) for values in [0, 1], with replacement or in its
version for sampling *without replacement* from a finite population of ``population`` values
(Section 6 there): the benchmark is the population, examples arrive in a uniformly random
order, and the CS closes on the exact full-run mean as the last example arrives. For each
candidate mean ``m`` on a grid, two capitals (:mod:`pytest_modal_eval.stats.capital`) bet that
the next value lies above, and below, the mean ``m`` implies for it; ``m`` leaves the CS for
good once either capital reaches ``2 / alpha`` (Ville's inequality: each side misses at any
look with probability at most ``alpha / 2``, so either side is a one-sided sequence at
``alpha / 2`` on its own, the paper's hedged capital with equal weights taken at its maximum).

The bets are aGRAPA (:func:`~pytest_modal_eval.stats.capital.agrapa`), each candidate's own,
from the running mean and variance of the values seen (without replacement, the running mean
turned into the mean of the values not yet seen as a candidate is: the paper's choice); near
the Kelly bet, they decide a threshold near the mean far sooner than the plug-in bets the
paper uses for a CS of even width over time (benchmarks/early_stop.py prints the stops beside
an independent implementation of the paper's hedged sequence with aGRAPA bets). The CS is
also intersected with the bounds every population of [0, 1] values consistent with the values
seen must satisfy, and with its own earlier intervals.

Written here because the reference implementation (``confseq``) ships only as a C++ source
package without wheels; the grid spacing is 1/2000, plus any thresholds the caller names
(so "is the threshold excluded" is answered exactly). :meth:`BettingCS.bounds` gives the
sequence's ends between grid points, found by halving on the values seen.

:func:`paired_difference` maps a per-example difference in [-1, 1] to [0, 1], so a paired
comparison (a run against its baseline) uses the same CS; :meth:`BettingCS.difference_bounds`
maps its bounds back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from pytest_modal_eval.stats import capital

#: Candidate means on [0, 1] between grid points, before the caller's thresholds are added.
GRID_STEPS = 2000
#: Truncation of the bets (the paper's ``c``): a bet never risks more than this share of capital.
MAX_BET_SHARE = 0.5
#: Halvings of a grid step when :meth:`BettingCS.bounds` locates an end (to 5e-10).
_HALVINGS = 20


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
        self._estimates = capital.Estimates()
        # Each value taken, and the population it was drawn from (errors shrink it): what
        # bounds() replays to place the ends between grid points.
        self._values: list[float] = []
        self._populations: list[int] = []
        self.lower = 0.0
        self.upper = 1.0

    def leave(self) -> None:
        """One member of the population will never be seen (its example errored): the mean
        is over the others."""
        if self.population is not None:
            self.population = max(self.population - 1, self.n, 1)

    def update(self, value: float) -> None:
        """Take the next value (in [0, 1]); the bounds narrow or stay."""
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ValueError(f"a confidence sequence for [0, 1] values got {value!r}")
        population = self.population
        if population is not None and self.n >= population:
            raise ValueError(f"all {population} values of the population were already seen")
        # Only candidates still in the CS are bet on: one excluded stays excluded.
        active = self._active
        implied = capital.implied_mean(self.grid[active], self._sum, self.n, population)
        possible = (implied >= 0.0) & (implied <= 1.0)
        safe = np.clip(implied, capital.TINY, 1.0 - capital.TINY)
        guess = capital.implied_mean(self._estimates.mean, self._sum, self.n, population)
        bet = capital.agrapa(guess, self._estimates.variance, safe)
        log_up = self._log_up[active]
        log_down = self._log_down[active]
        log_up += capital.log_growth(
            np.maximum(bet, 0.0), value, safe, upward=True, share=MAX_BET_SHARE
        )
        log_down += capital.log_growth(
            np.maximum(-bet, 0.0), value, safe, upward=False, share=MAX_BET_SHARE
        )
        # Each side on its own (not the hedged mix of the two): a lower bound then misses with
        # probability at most alpha / 2 whatever the upper one does, which is what makes a
        # one-sided decision (runs/early_stop.py) wrong at most that often.
        self._excluded[active] |= (
            ~possible | (log_up >= self._log_barrier) | (log_down >= self._log_barrier)
        )
        self._values.append(value)
        self._populations.append(population or 0)
        self.n += 1
        self._sum += value
        self._estimates.update(value)
        self._narrow()

    def _logical(self) -> tuple[float, float]:
        """The bounds any population of [0, 1] values with the values seen satisfies."""
        if self.population is None:
            return 0.0, 1.0
        unseen = self.population - self.n
        return self._sum / self.population, (self._sum + unseen) / self.population

    def _narrow(self) -> None:
        lower, upper = self._logical()
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

    def excluded(self, m: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each candidate mean in ``m`` (any, not only the grid's) has been ruled out
        at some look so far: the capitals replayed on the values seen."""
        return self._replay()(np.atleast_1d(np.asarray(m, dtype=np.float64)))

    def _replay(self) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.bool_]]:
        """:meth:`excluded` with what does not depend on the candidates computed once."""
        values = np.asarray(self._values)
        seen = np.arange(len(values))
        before = np.concatenate([[0.0], np.cumsum(values)[:-1]])
        populations = np.asarray(self._populations, dtype=np.float64)
        mean, variance = capital.estimates(values)
        # The running mean, as an estimate of the mean of the values not yet seen.
        guess = (
            mean
            if self.population is None
            else (populations * mean - before) / (populations - seen)
        )

        def ruled_out(m: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
            candidates = m[:, None]
            if self.population is None:
                implied = np.broadcast_to(candidates, (len(m), len(values)))
            else:
                implied = (populations * candidates - before) / (populations - seen)
            found: npt.NDArray[np.bool_] = ~np.all((implied >= 0.0) & (implied <= 1.0), axis=1)
            safe = np.clip(implied, capital.TINY, 1.0 - capital.TINY)
            bet = capital.agrapa(guess, variance, safe)
            for stake, up in ((np.maximum(bet, 0.0), True), (np.maximum(-bet, 0.0), False)):
                grown = capital.log_growth(stake, values, safe, upward=up, share=MAX_BET_SHARE)
                if grown.shape[1]:
                    found |= np.cumsum(grown, axis=1).max(axis=1) >= self._log_barrier
            return found

        return ruled_out

    def bounds(self) -> tuple[float, float]:
        """The ends of the sequence to within 5e-10 rather than the grid's step: between the
        grid point an end lies on and its neighbour inside the sequence, the candidate where
        the capitals replayed on the values seen reach the barrier, found by halving (the
        side ruled out kept, so that the ends stay outward), within the bounds every
        population consistent with the values seen satisfies. So a threshold the sequence
        lies at or above is at most the lower end, and one it lies below (ruled out with
        every candidate above it) is above the upper end."""
        lower, upper = self.lower, self.upper
        kept = np.flatnonzero(~self._excluded & (self.grid >= lower) & (self.grid <= upper))
        if not len(kept) or not self._values:
            return lower, upper
        ruled_out = self._replay()
        logical_low, logical_high = self._logical()
        first, last = float(self.grid[kept[0]]), float(self.grid[kept[-1]])
        ends = np.array([lower, upper])
        low_out, high_out = ruled_out(ends)
        if lower < first and low_out:
            lower = max(self._edge(ruled_out, lower, first), logical_low)
        if upper > last and high_out:
            upper = min(self._edge(ruled_out, upper, last), logical_high)
        return lower, upper

    @staticmethod
    def _edge(
        ruled_out: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.bool_]],
        out: float,
        inside: float,
    ) -> float:
        """Halving between ``out`` (ruled out) and ``inside`` (not): the last point ruled out."""
        for _ in range(_HALVINGS):
            middle = (out + inside) / 2.0
            if ruled_out(np.array([middle]))[0]:
                out = middle
            else:
                inside = middle
        return out

    def difference_bounds(self) -> tuple[float, float]:
        """The bounds on the [-1, 1] scale, for values made by :func:`paired_difference`."""
        low, high = self.bounds()
        return 2.0 * low - 1.0, 2.0 * high - 1.0


def paired_difference(run: float, baseline: float) -> float:
    """``run - baseline`` (each in [0, 1]) mapped from [-1, 1] onto [0, 1]."""
    return (run - baseline + 1.0) / 2.0

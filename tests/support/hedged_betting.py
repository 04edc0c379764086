"""A reference to stop against: the hedged betting confidence sequence with aGRAPA bets.

Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting" (JRSS-B 2024,
arXiv 2010.09686): for each candidate mean m on a grid, the hedged capital
``max(theta K+(m), (1 - theta) K-(m))`` with ``theta = 1/2``, ``K+ = prod(1 + l+ (x - m_t))`` and
``K- = prod(1 - l- (x - m_t))``; m leaves the sequence once it reaches ``1 / alpha``. The bets
are aGRAPA (Section 5.2): ``g / (v + g^2)`` with ``g`` the running mean (one prior value at 1/2,
variance 1/4) minus ``m_t``, its positive part for ``K+`` capped at ``c / m_t``, its negative
part for ``K-`` capped at ``c / (1 - m_t)``, ``c = 1/2``. With replacement ``m_t = m``; without
(Section 6), ``m_t = (N m - S_{t-1}) / (N - t + 1)``, the running mean is turned into an estimate
of the values not yet seen the same way, and the sequence is intersected with the bounds any
population consistent with the values seen satisfies.

Written apart from the plugin's own code (``stats/confidence_sequence.py``) so that
benchmarks/early_stop.py and tests/test_confidence_sequence.py measure the plugin against an
independent implementation of the published method, vectorised over many runs at once.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

GRID = np.linspace(0.0, 1.0, 2001)
THETA = 0.5
TRUNCATION = 0.5


def stopping_times(
    populations: npt.NDArray[np.float64],
    threshold: float,
    alpha: float,
    *,
    without_replacement: bool,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """For each row of ``populations`` (values in [0, 1], in the order they are seen), the
    number of values after which the two-sided ``1 - alpha`` hedged sequence lies entirely
    above ``threshold`` (every candidate up to it ruled out, as the plugin's sequence decides
    a PASS) or entirely below it (every candidate from it up ruled out), or the row's length
    when it never does; and whether it lay above."""
    runs, n = populations.shape
    grid = np.unique(np.concatenate([GRID, [threshold]]))
    up_to = grid <= threshold
    log_up = np.zeros((runs, len(grid)))
    log_down = np.zeros((runs, len(grid)))
    out = np.zeros((runs, len(grid)), dtype=bool)
    barrier = np.log(1.0 / alpha)
    total = np.zeros(runs)
    squares = np.full(runs, 0.25)
    stopped = np.full(runs, n)
    passed = np.zeros(runs, dtype=bool)
    open_ = np.ones(runs, dtype=bool)
    for t in range(1, n + 1):
        x = populations[:, t - 1][:, None]
        mean = ((0.5 + total) / t)[:, None]
        variance = (squares / t)[:, None]
        if without_replacement:
            left = n - t + 1
            m_t = (n * grid[None, :] - total[:, None]) / left
            mean = (n * mean - total[:, None]) / left
        else:
            m_t = np.broadcast_to(grid, (runs, len(grid)))
        possible = (m_t >= 0.0) & (m_t <= 1.0)
        m_t = np.clip(m_t, 1e-12, 1.0 - 1e-12)
        gap = mean - m_t
        bet = gap / (variance + gap * gap)
        up = np.minimum(np.maximum(bet, 0.0), TRUNCATION / m_t)
        down = np.minimum(np.maximum(-bet, 0.0), TRUNCATION / (1.0 - m_t))
        with np.errstate(invalid="ignore"):
            log_up += np.log1p(up * (x - m_t))
            log_down += np.log1p(-down * (x - m_t))
        hedged = np.maximum(np.log(THETA) + log_up, np.log(1.0 - THETA) + log_down)
        out |= ~possible | (hedged >= barrier)
        total += x[:, 0]
        squares += (x[:, 0] - (0.5 + total) / (t + 1)) ** 2
        inside = ~out
        if without_replacement:
            low = (total / n)[:, None]
            high = ((total + n - t) / n)[:, None]
            inside &= (grid >= low - 1e-12) & (grid <= high + 1e-12)
        above = ~(inside & up_to).any(axis=1)
        below = ~(inside & (grid >= threshold)).any(axis=1)
        decided = open_ & (above | below)
        stopped[decided] = t
        passed[decided] = above[decided]
        open_ &= ~decided
        if not open_.any():
            break
    return stopped, passed

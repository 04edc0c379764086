"""Error control and savings of ``gate.early_stop``, by simulation of gated runs, side by side
with hedged betting with aGRAPA bets, the published sequence to beat.

For every cell -- rewards (binary: one pass/fail rollout; partial: the mean of 4 pass/fail
rollouts of an example whose own rate is drawn from Beta(mu k, (1 - mu) k), k = 4; payoff: the
mean of 4 rollouts each paying -2 + 4 u, u ~ Beta(4 r, 4 (1 - r)) around its example's rate r
from the same Beta, gated in ``gate.reward_range`` [-2, 2]), the number of examples N, and the
true mean's distance from the gate's ``min_avg_reward`` (0.6 on the [0, 1] scale, 0.4 for
payoffs), above and below -- ``--runs`` benchmarks are drawn, each evaluated as a gated run with
early stop would: the examples in a random order, fed one by one to
:class:`pytest_modal_eval.runs.early_stop.EarlyStop` (the code the plugin runs) at
``gate.alpha`` = 0.05, stopping at its decision.

Printed per cell: the median and 90th percentile of the number of examples the sequence had
taken at its decision (N when it ran to the end), and the same for the hedged capital
sequence with aGRAPA bets of Waudby-Smith & Ramdas (JRSS-B 2024), written apart in
``tests/support/hedged_betting.py``, on the very same orders, with replacement ("aGRAPA WR")
and without ("aGRAPA WoR"), at the same level (two-sided 1 - 2 alpha, each side at alpha) and
deciding as the plugin decides (a PASS rules out every mean up to the threshold); ``<-
slower`` marks a cell where the plugin's median or 90th percentile is above either's. Then the
rate at which the early verdict differs from the full run's (goal: <= alpha), and how often the
sequence missed the full-run mean at any look up to the stop: its lower bound above it, its
upper bound below it (goal: each <= alpha; the sequence is two-sided at 1 - 2 alpha, each side
at alpha).

Paired cells (``--cells paired``) add a stored baseline, compared as the gate compares it
(``gate.max_drop`` 0): the run's true mean is 0.75, far above ``min_avg_reward``, and the
baseline's is the run's minus a difference from -0.2 to +0.2; each example's baseline and run
rewards share the example's difficulty (binary: the same uniform draw decides both in 70% of
examples; partial: the run's rate is the baseline's plus the difference, clipped to [0, 1]).
The full run's verdict is the plugin's: the mean above the minimum and
``compare_paired(...).regressed`` false on every example; *differs* counts runs whose early
verdict is not that one, *regressed differs* those whose early "regressed" is not the full
run's.

A rate measured over 100 runs is ±4 points (two standard errors at 5%); a cell is marked when
its rate is significantly above alpha (exact binomial test, p < 0.01). A median over 100 runs
moves by about ±10% of itself between seeds; the three sequences see the same runs, so their
difference is far less noisy than that.

Run: ``.venv/bin/python -m benchmarks.early_stop`` (seeded; about 25 CPU-minutes at the
default 100 runs per cell, shared by ``--processes``).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from pytest_modal_eval.runs.early_stop import BASELINE, REWARD, EarlyStop, PairedGate
from pytest_modal_eval.stats.summary import compare_paired
from tests.support.hedged_betting import stopping_times

THRESHOLD = 0.6
ALPHA = 0.05
DISTANCES = (0.01, 0.03, 0.05, 0.1, 0.2, 0.3)
RUN_MEAN = 0.75  # the paired cells' run: far above THRESHOLD, so the comparison decides
DIFFERENCES = (-0.2, -0.1, -0.05, -0.03, 0.0, 0.03, 0.05, 0.1, 0.2)
SHARED_DRAW = 0.7  # binary paired cells: the share of examples one draw decides on both sides
NS = (200, 1000)
KINDS = ("binary", "partial", "payoff")
ROLLOUTS = 4
SPREAD_K = 4.0
#: The payoff cells' rewards: gate.reward_range, and the values rescaled onto [0, 1].
PAYOFF_RANGE = (-2.0, 2.0)
#: The references run beside the plugin's sequence, by the name printed.
REFERENCES = {"aGRAPA WR": False, "aGRAPA WoR": True}


def population(kind: str, n: int, mean: float, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """One benchmark's per-example mean rewards, on the [0, 1] scale (for payoffs, the
    rewards' range mapped onto it)."""
    if kind == "binary":
        return (rng.random(n) < mean).astype(float)
    rates = rng.beta(mean * SPREAD_K, (1 - mean) * SPREAD_K, size=n)
    if kind == "partial":
        return rng.binomial(ROLLOUTS, rates).astype(float) / ROLLOUTS
    own = np.clip(rates, 1e-6, 1 - 1e-6)[:, None]
    return rng.beta(own * SPREAD_K, (1 - own) * SPREAD_K, size=(n, ROLLOUTS)).mean(1)


def on_reward_scale(kind: str, value: float) -> float:
    low, high = PAYOFF_RANGE if kind == "payoff" else (0.0, 1.0)
    return low + (high - low) * value


def one_run(
    kind: str, values: npt.NDArray[np.float64], order: list[int]
) -> tuple[int, bool, bool, bool]:
    """(examples taken at the decision, early verdict differs from the full run's, the
    sequence's lower bound went above the full-run mean, its upper bound below)."""
    n = len(values)
    full_mean = float(values.mean())
    reward_range = PAYOFF_RANGE if kind == "payoff" else (0.0, 1.0)
    threshold = on_reward_scale(kind, THRESHOLD)
    early = EarlyStop(order, list(range(n)), {REWARD: threshold}, ALPHA, (), reward_range)
    cs = early.sequences[REWARD]
    low_missed = high_missed = False
    for position in order:
        early.finished(position, {REWARD: on_reward_scale(kind, float(values[position]))})
        low_missed |= cs.lower > full_mean
        high_missed |= cs.upper < full_mean
        if early.decision is not None:
            differs = early.decision.passed != (full_mean >= THRESHOLD)
            return early.taken, differs, low_missed, high_missed
    return n, False, low_missed, high_missed


def paired_population(
    kind: str, n: int, difference: float, rng: np.random.Generator
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One benchmark's per-example rewards of the baseline and of the run (run - baseline has
    mean ``difference``, up to clipping), sharing each example's difficulty."""
    base_mean = RUN_MEAN - difference
    if kind == "binary":
        draw = rng.random(n)
        own = np.where(rng.random(n) < SHARED_DRAW, draw, rng.random(n))
        return (draw < base_mean).astype(float), (own < RUN_MEAN).astype(float)
    rates = rng.beta(base_mean * SPREAD_K, (1 - base_mean) * SPREAD_K, size=n)
    run_rates = np.clip(rates + difference, 0.0, 1.0)
    base = rng.binomial(ROLLOUTS, rates).astype(float) / ROLLOUTS
    return base, rng.binomial(ROLLOUTS, run_rates).astype(float) / ROLLOUTS


def one_paired_run(
    base: npt.NDArray[np.float64], run: npt.NDArray[np.float64], kind: str,
    rng: np.random.Generator,
) -> tuple[float, bool, bool]:  # fmt: skip
    """(share evaluated, early verdict differs from the full run's, early "regressed" differs
    from the full run's)."""
    n = len(run)
    ids = [str(i) for i in range(n)]
    full = compare_paired(
        dict(zip(ids, base.tolist(), strict=True)),
        dict(zip(ids, run.tolist(), strict=True)),
        baseline_binary_single=kind == "binary",
        run_binary_single=kind == "binary",
        alpha=ALPHA,
    )
    full_passed = float(run.mean()) >= THRESHOLD and not full.regressed
    gate = PairedGate(BASELINE, "the baseline", dict(zip(ids, base.tolist(), strict=True)),
                      0.0, ALPHA, "gate.max_drop")  # fmt: skip
    order = [int(p) for p in rng.permutation(n)]
    early = EarlyStop(order, list(range(n)), {REWARD: THRESHOLD}, ALPHA, [gate])
    for position in order:
        early.finished(position, {REWARD: float(run[position])})
        if early.decision is not None and early.taken < n:  # at n: the full run's verdict
            regressed = early.decision.regressed(BASELINE)
            return (
                early.taken / n,
                early.decision.passed != full_passed,
                regressed != full.regressed,
            )
    return 1.0, False, False


@dataclass(frozen=True)
class Cell:
    kind: str
    n: int
    mean: float
    runs: int
    seed: tuple[int, int]
    paired: bool = False  # mean: the run's mean minus the baseline's, not the run's mean


@dataclass
class Found:
    """A cell's runs: examples taken at the decision (the plugin's sequence, and each of
    REFERENCES on the same orders), runs whose verdict differs, lower-side and upper-side
    misses -- for a paired cell: runs whose "regressed" differs, and 0."""

    taken: list[int] = field(default_factory=list)
    references: dict[str, list[int]] = field(default_factory=dict)
    differs: int = 0
    lows: int = 0
    highs: int = 0


def run_cell(cell: Cell) -> tuple[Cell, Found]:
    rng = np.random.default_rng(cell.seed)
    found = Found()
    if cell.paired:
        for _ in range(cell.runs):
            base, run = paired_population(cell.kind, cell.n, cell.mean, rng)
            share, wrong, low = one_paired_run(base, run, cell.kind, rng)
            found.taken.append(round(share * cell.n))
            found.differs += wrong
            found.lows += low
        return cell, found
    seen = np.empty((cell.runs, cell.n))
    for row in range(cell.runs):
        values = population(cell.kind, cell.n, cell.mean, rng)
        order = [int(p) for p in rng.permutation(cell.n)]
        seen[row] = values[order]
        taken, wrong, low, high = one_run(cell.kind, values, order)
        found.taken.append(taken)
        found.differs += wrong
        found.lows += low
        found.highs += high
    for name, without_replacement in REFERENCES.items():
        stopped, _ = stopping_times(
            seen, THRESHOLD, 2 * ALPHA, without_replacement=without_replacement
        )
        found.references[name] = [int(t) for t in stopped]
    return cell, found


def above_goal(count: int, runs: int) -> bool:
    """Whether ``count`` of ``runs`` is significantly above ALPHA (exact binomial, one-sided
    p < 0.01): a cell's rate is measured with noise, ±4 points at 100 runs."""
    return bool(stats.binom.sf(count - 1, runs, ALPHA) < 0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per cell (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--cells",
        choices=("threshold", "paired", "all"),
        default="all",
        help="the threshold cells, the paired (stored baseline) cells, or both (default all)",
    )
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"threshold cells' rewards (default {KINDS})"
    )
    parser.add_argument(
        "--ns", default=",".join(map(str, NS)), help=f"benchmark sizes (default {NS})"
    )
    args = parser.parse_args()
    started = time.monotonic()
    worst = [0.0, 0.0, 0, 0]
    kinds = tuple(args.kinds.split(","))
    ns = tuple(int(n) for n in args.ns.split(","))
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        if args.cells in ("threshold", "all"):
            threshold_table(pool, args.runs, args.seed, worst, kinds, ns)
        if args.cells in ("paired", "all"):
            paired_table(pool, args.runs, args.seed, worst, ns)
    worst_differs, worst_missed, flagged, slower = worst
    print(
        f"largest rate of differing verdicts {worst_differs:.1%}, largest miss rate of one side "
        f"of the sequence {worst_missed:.1%} (goal: <= {ALPHA:.0%}; {flagged} cells "
        f"significantly above it); {slower} cells where the median or 90th percentile is "
        f"above a reference's; {time.monotonic() - started:.0f}s"
    )


def paired_table(pool: Any, runs: int, seed: int, worst: list[Any], ns: tuple[int, ...]) -> None:
    cells = [
        Cell(kind, n, difference, runs, (seed, 1000 + index), paired=True)
        for index, (kind, n, difference) in enumerate(
            itertools.product(("binary", "partial"), ns, DIFFERENCES)
        )
    ]
    print(
        f"\npaired: run mean {RUN_MEAN}, min_avg_reward {THRESHOLD}, gate.max_drop 0, "
        f"gate.alpha {ALPHA}, {runs} runs per cell"
    )
    header = f"{'rewards':8} {'N':>5} {'run - base':>10}  {'share med':>9} {'p90':>5}  "
    print(header + f"{'differs':>7}  {'regressed differs':>17}")
    for cell, found in pool.imap(run_cell, cells):
        shares = [t / cell.n for t in found.taken]
        worst[0] = max(worst[0], found.differs / runs, found.lows / runs)
        marked = above_goal(found.differs, runs) or above_goal(found.lows, runs)
        worst[2] += marked
        print(
            f"{cell.kind:8} {cell.n:>5} {cell.mean:>+10.2f}  "
            f"{statistics.median(shares):>9.1%} {float(np.quantile(shares, 0.9)):>5.0%}  "
            f"{found.differs / runs:>7.1%}  {found.lows / runs:>17.1%}"
            + ("  <- above alpha" if marked else ""),
            flush=True,
        )


def _spread(taken: list[int]) -> tuple[float, float]:
    return float(np.median(taken)), float(np.quantile(taken, 0.9))


def threshold_table(
    pool: Any, runs: int, seed: int, worst: list[Any], kinds: tuple[str, ...], ns: tuple[int, ...]
) -> None:
    cells = [
        Cell(kind, n, THRESHOLD + sign * distance, runs, (seed, index))
        for index, (kind, n, distance, sign) in enumerate(
            itertools.product(kinds, ns, DISTANCES, (1, -1))
        )
    ]
    print(
        f"min_avg_reward {THRESHOLD} (payoffs: {on_reward_scale('payoff', THRESHOLD):g} in "
        f"{list(PAYOFF_RANGE)}), gate.alpha {ALPHA}, {runs} runs per cell; examples taken at "
        "the decision, median / 90th percentile"
    )
    header = f"{'rewards':8} {'N':>5} {'distance':>8}  {'plugin':>11}"
    header += "".join(f"  {name:>11}" for name in REFERENCES)
    print(header + f"  {'differs':>7}  {'low > mean':>10} {'high < mean':>11}")
    for cell, found in pool.imap(run_cell, cells):
        worst[0] = max(worst[0], found.differs / runs)
        worst[1] = max(worst[1], found.lows / runs, found.highs / runs)
        marks = [above_goal(k, runs) for k in (found.differs, found.lows, found.highs)]
        worst[2] += any(marks)
        mine = _spread(found.taken)
        line = f"{cell.kind:8} {cell.n:>5} {cell.mean - THRESHOLD:>+8.2f}  "
        line += f"{mine[0]:>5.0f} {mine[1]:>5.0f}"
        slower = False
        for taken in found.references.values():
            theirs = _spread(taken)
            slower |= mine[0] > theirs[0] or mine[1] > theirs[1]
            line += f"  {theirs[0]:>5.0f} {theirs[1]:>5.0f}"
        worst[3] += slower
        print(
            line + f"  {found.differs / runs:>7.1%}  {found.lows / runs:>10.1%} "
            f"{found.highs / runs:>11.1%}"
            + ("  <- above alpha" if any(marks) else "")
            + ("  <- slower" if slower else ""),
            flush=True,
        )


if __name__ == "__main__":
    main()

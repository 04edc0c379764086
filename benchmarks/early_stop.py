"""Error control and savings of ``gate.early_stop``, by simulation of gated runs.

For every cell -- rewards (binary: one pass/fail rollout; partial: the mean of 4 pass/fail
rollouts of an example whose own rate is drawn from Beta(mu k, (1 - mu) k), k = 4), the number
of examples N, and the true mean's distance from the gate's ``min_avg_reward`` (0.6), above and
below -- ``--runs`` benchmarks are drawn, each evaluated as a gated run with early stop would:
the examples in a random order, fed one by one to :class:`pytest_modal_eval.runs.early_stop.
EarlyStop` (the code the plugin runs) at ``gate.alpha`` = 0.05, stopping at its decision.

Printed per cell: the median and 90th percentile of the share of examples evaluated before the
decision (1 when it ran to the end), the rate at which the early verdict differs from the full
run's (goal: <= alpha), and how often the sequence missed the full-run mean at any look up to
the stop: its lower bound above it, its upper bound below it (goal: each <= alpha; the sequence
is two-sided at 1 - 2 alpha, each side at alpha).

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
its rate is significantly above alpha (exact binomial test, p < 0.01).

Run: ``.venv/bin/python -m benchmarks.early_stop`` (seeded; about 4 minutes on two cores at
the default 100 runs per cell).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from pytest_modal_eval.runs.early_stop import BASELINE, REWARD, EarlyStop, PairedGate
from pytest_modal_eval.stats.summary import compare_paired

THRESHOLD = 0.6
ALPHA = 0.05
DISTANCES = (0.01, 0.03, 0.05, 0.1, 0.2, 0.3)
RUN_MEAN = 0.75  # the paired cells' run: far above THRESHOLD, so the comparison decides
DIFFERENCES = (-0.2, -0.1, -0.05, -0.03, 0.0, 0.03, 0.05, 0.1, 0.2)
SHARED_DRAW = 0.7  # binary paired cells: the share of examples one draw decides on both sides
NS = (200, 1000)
ROLLOUTS = 4
SPREAD_K = 4.0


def population(kind: str, n: int, mean: float, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """One benchmark's per-example rewards."""
    if kind == "binary":
        return (rng.random(n) < mean).astype(float)
    rates = rng.beta(mean * SPREAD_K, (1 - mean) * SPREAD_K, size=n)
    return rng.binomial(ROLLOUTS, rates).astype(float) / ROLLOUTS


def one_run(
    values: npt.NDArray[np.float64], rng: np.random.Generator
) -> tuple[float, bool, bool, bool]:
    """(share evaluated, early verdict differs from the full run's, the sequence's lower bound
    went above the full-run mean, its upper bound below)."""
    n = len(values)
    full_mean = float(values.mean())
    order = [int(p) for p in rng.permutation(n)]
    early = EarlyStop(order, list(range(n)), {REWARD: THRESHOLD}, ALPHA)
    cs = early.sequences[REWARD]
    low_missed = high_missed = False
    for position in order:
        early.finished(position, {REWARD: float(values[position])})
        low_missed |= cs.lower > full_mean
        high_missed |= cs.upper < full_mean
        if early.decision is not None:
            differs = early.decision.passed != (full_mean >= THRESHOLD)
            return early.taken / n, differs, low_missed, high_missed
    return 1.0, False, low_missed, high_missed


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


def run_cell(cell: Cell) -> tuple[Cell, list[float], int, int, int]:
    """(the cell, shares evaluated, runs whose verdict differs, lower-side and upper-side
    misses -- for a paired cell: runs whose "regressed" differs, and 0) over the cell's runs."""
    rng = np.random.default_rng(cell.seed)
    shares, differs, lows, highs = [], 0, 0, 0
    for _ in range(cell.runs):
        if cell.paired:
            base, run = paired_population(cell.kind, cell.n, cell.mean, rng)
            share, wrong, low = one_paired_run(base, run, cell.kind, rng)
            high = False
        else:
            share, wrong, low, high = one_run(population(cell.kind, cell.n, cell.mean, rng), rng)
        shares.append(share)
        differs += wrong
        lows += low
        highs += high
    return cell, shares, differs, lows, highs


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
    args = parser.parse_args()
    started = time.monotonic()
    worst = [0.0, 0.0, 0]
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        if args.cells in ("threshold", "all"):
            threshold_table(pool, args.runs, args.seed, worst)
        if args.cells in ("paired", "all"):
            paired_table(pool, args.runs, args.seed, worst)
    worst_differs, worst_missed, flagged = worst
    print(
        f"largest rate of differing verdicts {worst_differs:.1%}, largest miss rate of one side "
        f"of the sequence {worst_missed:.1%} (goal: <= {ALPHA:.0%}; {flagged} cells "
        f"significantly above it); {time.monotonic() - started:.0f}s"
    )


def paired_table(pool: Any, runs: int, seed: int, worst: list[Any]) -> None:
    cells = [
        Cell(kind, n, difference, runs, (seed, 1000 + index), paired=True)
        for index, (kind, n, difference) in enumerate(
            itertools.product(("binary", "partial"), NS, DIFFERENCES)
        )
    ]
    print(
        f"\npaired: run mean {RUN_MEAN}, min_avg_reward {THRESHOLD}, gate.max_drop 0, "
        f"gate.alpha {ALPHA}, {runs} runs per cell"
    )
    header = f"{'rewards':8} {'N':>5} {'run - base':>10}  {'share med':>9} {'p90':>5}  "
    print(header + f"{'differs':>7}  {'regressed differs':>17}")
    for cell, shares, differs, regressed, _ in pool.imap(run_cell, cells):
        worst[0] = max(worst[0], differs / runs, regressed / runs)
        marked = above_goal(differs, runs) or above_goal(regressed, runs)
        worst[2] += marked
        print(
            f"{cell.kind:8} {cell.n:>5} {cell.mean:>+10.2f}  "
            f"{statistics.median(shares):>9.1%} {float(np.quantile(shares, 0.9)):>5.0%}  "
            f"{differs / runs:>7.1%}  {regressed / runs:>17.1%}"
            + ("  <- above alpha" if marked else "")
        )


def threshold_table(pool: Any, runs: int, seed: int, worst: list[Any]) -> None:
    cells = [
        Cell(kind, n, THRESHOLD + sign * distance, runs, (seed, index))
        for index, (kind, n, distance, sign) in enumerate(
            itertools.product(("binary", "partial"), NS, DISTANCES, (1, -1))
        )
    ]
    print(f"min_avg_reward {THRESHOLD}, gate.alpha {ALPHA}, {runs} runs per cell")
    header = f"{'rewards':8} {'N':>5} {'true mean':>9}  {'share med':>9} {'p90':>5}  "
    print(header + f"{'differs':>7}  {'low > mean':>10} {'high < mean':>11}")
    for cell, shares, differs, lows, highs in pool.imap(run_cell, cells):
        worst[0] = max(worst[0], differs / runs)
        worst[1] = max(worst[1], lows / runs, highs / runs)
        marks = [above_goal(k, runs) for k in (differs, lows, highs)]
        worst[2] += any(marks)
        print(
            f"{cell.kind:8} {cell.n:>5} {cell.mean:>9.2f}  "
            f"{statistics.median(shares):>9.1%} {float(np.quantile(shares, 0.9)):>5.0%}  "
            f"{differs / runs:>7.1%}  {lows / runs:>10.1%} {highs / runs:>11.1%}"
            + ("  <- above alpha" if any(marks) else "")
        )


if __name__ == "__main__":
    main()

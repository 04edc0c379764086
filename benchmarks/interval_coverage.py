"""Coverage of the reported intervals over the full simulation grids.

Pass/fail rewards (the default): for every cell of the grid -- examples n, rollouts r, true mean
reward mu, and how much examples differ (each example's own rate drawn from Beta(mu k, (1 - mu)
k); k = None: all alike; "two-point": every example's rate is 0.005 or 0.9, or 0.1 or 0.995 for
mu >= 0.5, the judge-like extreme) -- ``--datasets`` datasets are simulated and summarised by
the interval ``summarize`` reports for pass/fail rewards: Wilson's
(:func:`pytest_modal_eval.stats.intervals.beta_binomial_score` with one rollout) for one rollout
per example, else the betting interval of the example means
(:func:`~pytest_modal_eval.stats.intervals.betting`); with several rollouts the beta-binomial
score interval's coverage is printed beside it (a model of how examples differ, not reported: it
falls short where examples' rates sit at two values). Each dataset's true mean is jittered by
+-20% of its distance to the nearer end of [0, 1], as in tests/test_interval_coverage.py, so a
binomial interval's lattice of possible counts averages out.

Printed per cell: the coverage, the share of datasets whose true mean lies above the interval
and below it, and the mean width; with ``--reference`` also the coverage of the clustered
Wilson interval (the design effect estimated from the spread of example means) and of Wilson's
interval given the *true* design effect 1 + (r - 1) / (k + 1), the best an interval of that
form could do. Then, for each (n, r), the smallest and largest coverage, and the cells outside
93-97%.

With ``--bounded``, the grid of rewards other than 0/1 instead: n in {20, 50, 100}, the kinds of
rewards of tests/support/reward_draws.py (continuous scores, judge-like scores at two values,
the same with 4 rollouts of examples that differ, strongly differing examples, partial credit
of 4 x 4 checks, payoffs in [-2, 2]) and the nine rates. Printed per cell: the coverage and mean
width of the interval ``summarize`` reports for them (the betting interval, ``betting``) and of
the clustered Wilson interval on the same datasets; then, for each, its smallest, largest and
mean coverage, the cells below 94% (the goal) and the cells significantly below 95% (exact
binomial test, p < 0.01), and how much wider the betting interval is where the clustered Wilson
one covers. Each cell draws from its own seed, in ``--processes`` worker processes. The
default 20,000 datasets per cell make one cell's figure +-0.3 points at two standard errors.

Run: ``.venv/bin/python -m benchmarks.interval_coverage`` (seeded; about 15 minutes at the
default 3,000 datasets per cell on one quiet core); ``--bounded``: about 10 CPU-minutes, shared
by the worker processes.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special, stats

from pytest_modal_eval.stats import intervals
from tests.support import reward_draws

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

NS = (20, 30, 50, 100)
ROLLOUTS = (1, 2, 4, 8, 32)
RATES = (0.02, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98)
TWO_POINT = "two-point"
KAPPAS: tuple[float | str | None, ...] = (None, 20.0, 10.0, 3.0, 1.0, TWO_POINT)
TARGET = (0.93, 0.97)


@dataclass(frozen=True)
class Cell:
    n: int
    rollouts: int
    rate: float
    kappa: float | str | None

    def label(self) -> str:
        kappa = (
            "alike"
            if self.kappa is None
            else self.kappa
            if isinstance(self.kappa, str)
            else f"k={self.kappa:g}"
        )
        return f"n={self.n:<4d} r={self.rollouts:<3d} mu={self.rate:<5g} {kappa}"


@dataclass(frozen=True)
class Coverage:
    covered: float
    above: float  # true mean above the interval
    below: float
    width: float
    clustered: float | None  # the clustered Wilson interval
    reference: float | None  # Wilson's, with the true design effect
    beta_binomial: float | None = None  # several rollouts: the beta-binomial score interval


def simulate(rng: np.random.Generator, cell: Cell, datasets: int) -> tuple[FloatArray, IntArray]:
    """True means (datasets,) and passes per example (datasets, n) of pass/fail rollouts."""
    spread = min(cell.rate, 1 - cell.rate) * 0.2
    mus = rng.uniform(cell.rate - spread, cell.rate + spread, size=(datasets, 1))
    if cell.kappa is None:
        rates = np.broadcast_to(mus, (datasets, cell.n))
    elif isinstance(cell.kappa, str):
        wrong, right = (0.005, 0.9) if cell.rate < 0.5 else (0.1, 0.995)
        hit = rng.random((datasets, cell.n)) < (mus - wrong) / (right - wrong)
        rates = np.where(hit, right, wrong)
    else:
        rates = rng.beta(mus * cell.kappa, (1 - mus) * cell.kappa, size=(datasets, cell.n))
    return mus[:, 0], rng.binomial(cell.rollouts, rates)


def wilson_known_deff(means: FloatArray, cell: Cell) -> intervals.Intervals:
    """Wilson's interval with n * r / deff rollouts, deff the true design effect."""
    if isinstance(cell.kappa, str):  # the variance of the two rates over mu (1 - mu)
        wrong, right = (0.005, 0.9) if cell.rate < 0.5 else (0.1, 0.995)
        mu = cell.rate
        rho = (right - mu) * (mu - wrong) / (mu * (1 - mu))
    else:
        rho = 0.0 if cell.kappa is None else 1.0 / (cell.kappa + 1.0)
    deff = 1.0 + (cell.rollouts - 1) * rho
    z = float(special.ndtri(0.975))
    a = z * z * deff / (cell.n * cell.rollouts)
    mean = means.mean(-1)
    centre = (mean + a / 2) / (1 + a)
    half = np.sqrt(a * mean * (1 - mean) + a * a / 4) / (1 + a)
    return intervals.Intervals(np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1))


def _covered(found: intervals.Intervals, mus: FloatArray) -> float:
    return float(np.mean((found.low <= mus) & (mus <= found.high)))


def measure(rng: np.random.Generator, cell: Cell, datasets: int, reference: bool) -> Coverage:
    mus, passes = simulate(rng, cell, datasets)
    # What summarize reports: Wilson's for one rollout, else the betting interval of the means.
    if cell.rollouts == 1:
        found = intervals.beta_binomial_score(passes, 1)
    else:
        found = intervals.betting(passes / cell.rollouts)
    above, below = mus > found.high, mus < found.low
    clustered = known = beta = None
    if cell.rollouts > 1:
        beta = _covered(intervals.beta_binomial_score(passes, cell.rollouts), mus)
    if reference:
        means = passes / cell.rollouts
        clustered = _covered(intervals.clustered_wilson(means, cell.rollouts), mus)
        known = _covered(wilson_known_deff(means, cell), mus)
    return Coverage(
        covered=float(1 - above.mean() - below.mean()),
        above=float(above.mean()),
        below=float(below.mean()),
        width=float(np.mean(found.high - found.low)),
        clustered=clustered,
        reference=known,
        beta_binomial=beta,
    )


BOUNDED_NS = (20, 50, 100)
#: Datasets per cell of the --bounded grid unless ``--datasets`` says otherwise: one cell's
#: coverage near 95% is then +-0.3 points at two standard errors.
BOUNDED_DATASETS = 20_000
#: The goal in every cell.
FLOOR = 0.94


@dataclass(frozen=True)
class BoundedCell:
    n: int
    kind: str
    rate: float
    datasets: int
    seed: tuple[int, int]

    def label(self) -> str:
        return f"n={self.n:<4d} {self.kind:13s} mu={self.rate:<5g}"


def bounded_cell(cell: BoundedCell) -> tuple[BoundedCell, dict[str, float]]:
    """Coverage and mean width of the betting interval, and the coverage of the clustered
    Wilson interval, in one cell (its own seed: figures do not depend on the other cells)."""
    rng = np.random.default_rng(cell.seed)
    truth, means = reward_draws.bounded(rng, cell.n, cell.kind, cell.rate, cell.datasets)
    unit = reward_draws.on_unit_scale(cell.kind, means)
    found = intervals.betting(unit)
    low = reward_draws.from_unit_scale(cell.kind, found.low)
    high = reward_draws.from_unit_scale(cell.kind, found.high)
    wilson = intervals.clustered_wilson(unit, 4 if cell.kind != "judge" else 1)
    scaled = reward_draws.on_unit_scale(cell.kind, truth)
    return cell, {
        "betting": float(np.mean((low <= truth) & (truth <= high))),
        "width": float(np.mean(found.high - found.low)),
        "clustered-wilson": _covered(wilson, scaled),
        "clustered-wilson width": float(np.mean(wilson.high - wilson.low)),
    }


def short_of(covered: float, datasets: int, level: float) -> bool:
    """Whether a coverage measured over ``datasets`` is significantly below ``level`` (exact
    binomial test, one-sided p < 0.01), not only below it by Monte Carlo noise."""
    return bool(stats.binom.cdf(round(covered * datasets), datasets, level) < 0.01)


def bounded_grid(datasets: int, seed: int, processes: int) -> None:
    """The grid of rewards other than 0/1 (see the module docstring)."""
    error = 2 * np.sqrt(0.95 * 0.05 / datasets)
    print(
        f"rewards other than 0/1: {datasets} datasets per cell (a coverage near 95% is "
        f"+-{100 * error:.1f} points at two standard errors, near 99% +-"
        f"{200 * np.sqrt(0.99 * 0.01 / datasets):.2f})"
    )
    cells = [
        BoundedCell(n, kind, rate, datasets, (seed, index))
        for index, (n, kind, rate) in enumerate(
            itertools.product(BOUNDED_NS, reward_draws.KINDS, RATES)
        )
    ]
    results: list[tuple[BoundedCell, dict[str, float]]] = []
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        for cell, found in pool.imap(bounded_cell, cells):
            results.append((cell, found))
            print(
                f"{cell.label()}  betting {found['betting']:.3f} (width {found['width']:.3f})"
                f"  clustered-wilson {found['clustered-wilson']:.3f} (width "
                f"{found['clustered-wilson width']:.3f})",
                flush=True,
            )
    print()
    for name in ("betting", "clustered-wilson"):
        covered = [found[name] for _, found in results]
        below = [(cell, found[name]) for cell, found in results if found[name] < FLOOR]
        short = [cell for cell, found in results if short_of(found[name], datasets, 0.95)]
        print(
            f"{name}: {min(covered):.3f}-{max(covered):.3f}, mean {np.mean(covered):.3f}; "
            f"{len(below)} cells below {FLOOR:.0%}, {len(short)} significantly below 95% "
            "(p < 0.01)"
        )
        for cell, value in sorted(below, key=lambda item: item[1])[:12]:
            print(f"  {cell.label()}  {value:.3f}")
    for n in BOUNDED_NS:
        ratio = [
            found["width"] / found["clustered-wilson width"]
            for cell, found in results
            if cell.n == n and found["clustered-wilson"] >= FLOOR
        ]
        if ratio:
            print(
                f"n={n}: betting width / clustered-wilson width where the latter covers "
                f">= {FLOOR:.0%}: median {np.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})"
            )


def _kappa(text: str) -> float | str | None:
    if text == "alike":
        return None
    return text if text == TWO_POINT else float(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--datasets",
        type=int,
        help=f"per cell (default 3000; with --bounded {BOUNDED_DATASETS})",
    )
    parser.add_argument("--seed", type=int, default=20261127)
    parser.add_argument(
        "--reference", action="store_true", help="also Wilson with the true design effect"
    )
    parser.add_argument("--bounded", action="store_true", help="the grid of rewards other than 0/1")
    parser.add_argument(
        "--processes", type=int, default=2, help="worker processes for --bounded (default 2)"
    )
    parser.add_argument(
        "--ns", default=",".join(map(str, NS)), help=f"pass/fail grid: n (default {NS})"
    )
    parser.add_argument(
        "--spreads",
        default=",".join("alike" if k is None else str(k) for k in KAPPAS),
        help="pass/fail grid: how examples differ, alike, k or two-point (default all)",
    )
    args = parser.parse_args()
    if args.bounded:
        bounded_grid(args.datasets or BOUNDED_DATASETS, args.seed, args.processes)
        return
    args.datasets = args.datasets or 3000
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    results: dict[Cell, Coverage] = {}
    ns = tuple(int(n) for n in args.ns.split(","))
    kappas = tuple(_kappa(k) for k in args.spreads.split(","))
    for n, r, rate, kappa in itertools.product(ns, ROLLOUTS, RATES, kappas):
        cell = Cell(n, r, rate, kappa)
        if r == 1 and kappa is not None:
            continue  # one pass/fail rollout is Bernoulli(mu) however examples differ
        result = measure(rng, cell, args.datasets, args.reference)
        results[cell] = result
        ref = (
            ""
            if result.reference is None
            else f"  clustered-wilson {result.clustered:.3f}  true-deff {result.reference:.3f}"
        )
        if result.beta_binomial is not None:
            ref += f"  beta-binomial {result.beta_binomial:.3f}"
        print(
            f"{cell.label()}  coverage {result.covered:.3f}  above {result.above:.3f}"
            f"  below {result.below:.3f}  width {result.width:.4f}{ref}"
        )
    elapsed = time.perf_counter() - started
    print(f"\n{len(results)} cells x {args.datasets} datasets in {elapsed:.1f} s")
    print("\ncoverage, smallest-largest, by (n, r):")
    for n, r in itertools.product(ns, ROLLOUTS):
        row = [v for c, v in results.items() if c.n == n and c.rollouts == r]
        if not row:
            continue
        low, high = min(v.covered for v in row), max(v.covered for v in row)
        line = f"  n={n:<4d} r={r:<3d} {low:.3f}-{high:.3f}"
        if args.reference:
            wilson = [v.clustered for v in row if v.clustered is not None]
            refs = [v.reference for v in row if v.reference is not None]
            line += f"   clustered-wilson {min(wilson):.3f}-{max(wilson):.3f}"
            line += f"   true-deff {min(refs):.3f}-{max(refs):.3f}"
        print(line)
    # Wilson's (one rollout) aims at 95%; the betting interval (several) is conservative by
    # design: only its shortfalls count.
    outside = sorted(
        (
            (c, v.covered)
            for c, v in results.items()
            if v.covered < TARGET[0] or (c.rollouts == 1 and v.covered > TARGET[1])
        ),
        key=lambda item: item[1],
    )
    print(
        f"\ncells outside {TARGET[0]:.0%}-{TARGET[1]:.0%} (several rollouts: below "
        f"{TARGET[0]:.0%}): {len(outside)}"
    )
    for cell, covered in outside:
        print(f"  {cell.label()}  {covered:.3f}")


if __name__ == "__main__":
    main()

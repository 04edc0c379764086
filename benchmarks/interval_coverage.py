"""Coverage of the reported interval for pass/fail rewards over the full simulation grid.

For every cell of the grid -- examples n, rollouts r, true mean reward mu, and how much examples
differ (each example's own rate drawn from Beta(mu k, (1 - mu) k); k = None: all alike) --
``--datasets`` datasets are simulated and summarised by
:func:`pytest_modal_eval.stats.intervals.beta_binomial_score`, the code ``summarize`` reports
pass/fail rewards with. Each dataset's true mean is jittered by +-20% of its distance to the
nearer end of [0, 1], as in tests/test_interval_coverage.py, so a binomial interval's lattice
of possible counts averages out.

Printed per cell: the coverage, the share of datasets whose true mean lies above the interval
and below it, and the mean width; with ``--reference`` also the coverage of the clustered
Wilson interval (the design effect estimated from the spread of example means, which
``summarize`` uses for partial credit) and of Wilson's interval given the *true* design effect
1 + (r - 1) / (k + 1), the best an interval of that form could do.
Then, for each (n, r), the smallest and largest coverage, and the cells outside 93-97%.

With ``--partial``, the partial-credit grid instead: n in {20, 30, 50} examples, 4 rollouts
of 4 checks each, the nine rates, examples alike or k = 10, 3, 1. Printed per cell: the
coverage of the interval ``summarize`` reports for such rewards (the beta-binomial score
interval over each example's 16 checks, ``beta-binomial-checks``) when the checks of a rollout
are independent given the example's rate, and when they are not (each rollout draws its own
rate from Beta(2 p, 2 (1 - p)) around the example's p, so its checks pass or fail together),
and the coverage of the clustered Wilson interval on the same independent-checks datasets;
then, for each interval, its smallest, largest and mean coverage, the cells below 94% (the
goal) and the cells significantly below 95% (exact binomial test, p < 0.01). Each cell draws
from its own seed, in ``--processes`` worker processes. The default 20,000 datasets per cell
make one cell's figure +-0.3 points at two standard errors: at 2,000, +-1 point, a cell that
covers 95% reads anywhere from 94% to 96%, and the smallest of 108 such cells is expected near
93.7% by chance alone.

Run: ``.venv/bin/python -m benchmarks.interval_coverage`` (seeded; about 5 minutes at the
default 3,000 datasets per cell on one quiet core); ``--partial``: about 15 CPU-minutes, shared
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

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

NS = (30, 100)
ROLLOUTS = (1, 2, 4, 8, 32)
RATES = (0.02, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98)
KAPPAS: tuple[float | None, ...] = (None, 20.0, 10.0, 3.0, 1.0)
TARGET = (0.93, 0.97)


@dataclass(frozen=True)
class Cell:
    n: int
    rollouts: int
    rate: float
    kappa: float | None

    def label(self) -> str:
        kappa = "alike" if self.kappa is None else f"k={self.kappa:g}"
        return f"n={self.n:<4d} r={self.rollouts:<3d} mu={self.rate:<5g} {kappa}"


@dataclass(frozen=True)
class Coverage:
    covered: float
    above: float  # true mean above the interval
    below: float
    width: float
    clustered: float | None  # the clustered Wilson interval
    reference: float | None  # Wilson's, with the true design effect


def simulate(rng: np.random.Generator, cell: Cell, datasets: int) -> tuple[FloatArray, IntArray]:
    """True means (datasets,) and passes per example (datasets, n) of pass/fail rollouts."""
    spread = min(cell.rate, 1 - cell.rate) * 0.2
    mus = rng.uniform(cell.rate - spread, cell.rate + spread, size=(datasets, 1))
    if cell.kappa is None:
        rates = np.broadcast_to(mus, (datasets, cell.n))
    else:
        rates = rng.beta(mus * cell.kappa, (1 - mus) * cell.kappa, size=(datasets, cell.n))
    return mus[:, 0], rng.binomial(cell.rollouts, rates)


def wilson_known_deff(means: FloatArray, cell: Cell) -> intervals.Intervals:
    """Wilson's interval with n * r / deff rollouts, deff the true design effect."""
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
    found = intervals.beta_binomial_score(passes, cell.rollouts)
    above, below = mus > found.high, mus < found.low
    clustered = known = None
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
    )


PARTIAL_NS = (20, 30, 50)
CHECKS = 4
PARTIAL_ROLLOUTS = 4
#: Datasets per partial-credit cell unless ``--datasets`` says otherwise: one cell's coverage
#: near 95% is then +-0.3 points at two standard errors.
PARTIAL_DATASETS = 20_000
#: The partial-credit interval's goal in every cell.
PARTIAL_FLOOR = 0.94
#: The partial-credit intervals measured, as printed.
PARTIAL_NAMES = ("beta-binomial-checks", "checks together", "clustered-wilson")


@dataclass(frozen=True)
class PartialCell:
    n: int
    rate: float
    kappa: float | None
    datasets: int
    seed: tuple[int, int]

    def label(self) -> str:
        return Cell(self.n, PARTIAL_ROLLOUTS, self.rate, self.kappa).label()


def partial_cell(cell: PartialCell) -> tuple[PartialCell, dict[str, float], float]:
    """Coverage of each of :data:`PARTIAL_NAMES` in one cell, and the mean width of the first.

    Every cell draws from its own seed, so its figures do not depend on the other cells or on
    how many processes share the grid."""
    rng = np.random.default_rng(cell.seed)
    datasets, n = cell.datasets, cell.n
    trials = CHECKS * PARTIAL_ROLLOUTS
    spread = min(cell.rate, 1 - cell.rate) * 0.2
    mus = rng.uniform(cell.rate - spread, cell.rate + spread, size=(datasets, 1))
    rates = (
        np.broadcast_to(mus, (datasets, n))
        if cell.kappa is None
        else rng.beta(mus * cell.kappa, (1 - mus) * cell.kappa, size=(datasets, n))
    )
    passes = rng.binomial(trials, rates)
    own = np.clip(rates[..., None], 1e-9, 1 - 1e-9)
    rollout_rates = rng.beta(2 * own, 2 * (1 - own), size=(datasets, n, PARTIAL_ROLLOUTS))
    together = rng.binomial(CHECKS, rollout_rates).sum(-1)
    checks = intervals.beta_binomial_score(passes, trials)
    found = {
        PARTIAL_NAMES[0]: _covered(checks, mus[:, 0]),
        PARTIAL_NAMES[1]: _covered(intervals.beta_binomial_score(together, trials), mus[:, 0]),
        PARTIAL_NAMES[2]: _covered(
            intervals.clustered_wilson(passes / trials, PARTIAL_ROLLOUTS), mus[:, 0]
        ),
    }
    return cell, found, float(np.mean(checks.high - checks.low))


def short_of(covered: float, datasets: int, level: float) -> bool:
    """Whether a coverage measured over ``datasets`` is significantly below ``level`` (exact
    binomial test, one-sided p < 0.01), not only below it by Monte Carlo noise."""
    return bool(stats.binom.cdf(round(covered * datasets), datasets, level) < 0.01)


def partial_credit(datasets: int, seed: int, processes: int) -> None:
    """The partial-credit grid (see the module docstring)."""
    error = 2 * np.sqrt(0.95 * 0.05 / datasets)
    print(
        f"partial credit: {PARTIAL_ROLLOUTS} rollouts x {CHECKS} checks, {datasets} datasets "
        f"per cell (a coverage near 95% is +-{100 * error:.1f} points at two standard errors)"
    )
    cells = [
        PartialCell(n, rate, kappa, datasets, (seed, index))
        for index, (n, rate, kappa) in enumerate(
            itertools.product(PARTIAL_NS, RATES, (None, 10.0, 3.0, 1.0))
        )
    ]
    results: list[tuple[PartialCell, dict[str, float]]] = []
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        for cell, found, width in pool.imap(partial_cell, cells):
            results.append((cell, found))
            print(
                f"{cell.label()}  beta-binomial-checks {found[PARTIAL_NAMES[0]]:.3f}"
                f" (width {width:.3f})  checks of a rollout together "
                f"{found[PARTIAL_NAMES[1]]:.3f}  clustered-wilson {found[PARTIAL_NAMES[2]]:.3f}",
                flush=True,
            )
    print()
    for name in PARTIAL_NAMES:
        covered = [found[name] for _, found in results]
        short = [cell for cell, found in results if short_of(found[name], datasets, 0.95)]
        below = [cell for cell, found in results if found[name] < PARTIAL_FLOOR]
        print(
            f"{name}: {min(covered):.3f}-{max(covered):.3f}, mean {np.mean(covered):.3f}; "
            f"{len(below)} cells below {PARTIAL_FLOOR:.0%}, {len(short)} significantly "
            f"below 95% (p < 0.01)"
        )
        for cell in short:
            print(f"  {cell.label()}  {dict(results)[cell][name]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--datasets",
        type=int,
        help=f"per cell (default 3000; with --partial {PARTIAL_DATASETS})",
    )
    parser.add_argument("--seed", type=int, default=20261127)
    parser.add_argument(
        "--reference", action="store_true", help="also Wilson with the true design effect"
    )
    parser.add_argument(
        "--partial", action="store_true", help="the partial-credit grid (4 rollouts x 4 checks)"
    )
    parser.add_argument(
        "--processes", type=int, default=2, help="worker processes for --partial (default 2)"
    )
    args = parser.parse_args()
    if args.partial:
        partial_credit(args.datasets or PARTIAL_DATASETS, args.seed, args.processes)
        return
    args.datasets = args.datasets or 3000
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    results: dict[Cell, Coverage] = {}
    for n, r, rate, kappa in itertools.product(NS, ROLLOUTS, RATES, KAPPAS):
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
        print(
            f"{cell.label()}  coverage {result.covered:.3f}  above {result.above:.3f}"
            f"  below {result.below:.3f}  width {result.width:.4f}{ref}"
        )
    elapsed = time.perf_counter() - started
    print(f"\n{len(results)} cells x {args.datasets} datasets in {elapsed:.1f} s")
    print("\ncoverage, smallest-largest, by (n, r):")
    for n, r in itertools.product(NS, ROLLOUTS):
        row = [v for c, v in results.items() if c.n == n and c.rollouts == r]
        low, high = min(v.covered for v in row), max(v.covered for v in row)
        line = f"  n={n:<4d} r={r:<3d} {low:.3f}-{high:.3f}"
        if args.reference:
            wilson = [v.clustered for v in row if v.clustered is not None]
            refs = [v.reference for v in row if v.reference is not None]
            line += f"   clustered-wilson {min(wilson):.3f}-{max(wilson):.3f}"
            line += f"   true-deff {min(refs):.3f}-{max(refs):.3f}"
        print(line)
    outside = sorted(
        ((c, v.covered) for c, v in results.items() if not TARGET[0] <= v.covered <= TARGET[1]),
        key=lambda item: item[1],
    )
    print(f"\ncells outside {TARGET[0]:.0%}-{TARGET[1]:.0%}: {len(outside)}")
    for cell, covered in outside:
        print(f"  {cell.label()}  {covered:.3f}")


if __name__ == "__main__":
    main()

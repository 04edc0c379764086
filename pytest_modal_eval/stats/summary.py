"""Noise-aware statistics for eval rewards: a clustered summary and a paired regression test.

Both functions take rewards keyed by example id, so the unit of analysis is the *example*, never
the single rollout:

- :func:`summarize` reports the mean reward with a cluster-robust standard error and an interval
  within the rewards' range (:mod:`pytest_modal_eval.stats.intervals`).
- :func:`compare_paired` decides whether a run is worse than a stored baseline on the examples
  both have scored, and lists what flipped.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import special

from pytest_modal_eval.stats import intervals, power

# scipy.special's distribution functions, not scipy.stats: the same numbers from the same
# library (tests/test_stats.py checks them against scipy.stats and statsmodels), without the
# ~45 MB that importing scipy.stats adds to every evaluation process.

SOLVED_THRESHOLD = 0.5
"""An example counts as solved when its mean reward is at least this."""


def diff_confidence(alpha: float) -> float:
    """Two-sided level of a comparison's interval for a one-sided test at ``alpha``: 1 - 2
    alpha, so its upper end is the test's one-sided 1 - alpha bound, and "regressed" goes with
    an interval entirely below 0 (0.90 at the default alpha 0.05)."""
    return 1.0 - 2.0 * alpha


TEST_MCNEMAR = "mcnemar-exact"
TEST_PAIRED_T = "paired-t"

# Spread below this (relative to the values' magnitude) is float round-off, not variation: scipy
# would warn about precision loss or divide 0 by 0, so such data is handled as exactly constant.
_ZERO_SPREAD = 1e-12

FloatArray = npt.NDArray[np.float64]


def natural_key(example_id: str) -> tuple[tuple[int, str], ...]:
    """Sort key that orders numeric runs numerically: ``"2" < "10"``, ``"q2" < "q10"``."""
    parts = re.split(r"(\d+)", example_id)
    # Split parts alternate text/number, so position i always holds the same kind; the trailing
    # raw id breaks ties such as "01" vs "1".
    key = tuple((int(p), "") if i % 2 else (0, p) for i, p in enumerate(parts))
    return (*key, (0, example_id))


def _plain_decimals(ids: Iterable[str]) -> bool:
    """True when every id is a decimal number without sign or leading zero that fits int64;
    such ids sort by ``int`` exactly as by :func:`natural_key`."""
    return all(
        i.isascii() and i.isdigit() and (i[0] != "0" or i == "0") and len(i) <= 18 for i in ids
    )


_CHUNK = 8192  # examples per piece when a column is turned into text


class ExampleMeans(Mapping[str, float]):
    """Example id -> mean reward, held as two columns in natural id order.

    A run's or a stored baseline's ids are plain decimal numbers (a dataset's row ids), kept as
    an int64 array; any other ids are kept as a sorted list of str. Either way it reads like a
    ``{str id: mean}`` dict in :func:`natural_key` order. At 100,000 examples a dict held
    ~13 MB of keys and floats where these columns hold 1.6 MB, and comparing two of them
    intersects arrays instead of building sets of strings.
    """

    def __init__(self, ids: npt.NDArray[np.int64] | list[str], means: FloatArray) -> None:
        # Use the constructors: they sort, check lengths and choose the id column's kind.
        self.ids, self.means = ids, means
        self._rows: dict[str, int] | None = None

    @classmethod
    def from_columns(cls, ids: npt.ArrayLike, means: npt.ArrayLike) -> ExampleMeans:
        """From integer ids (a run's) and their means, in any order."""
        int_ids = np.asarray(ids, dtype=np.int64)
        values = np.asarray(means, dtype=np.float64)
        if int_ids.shape != values.shape or int_ids.ndim != 1:
            raise ValueError("ids and means must be 1-D and of the same length")
        if len(int_ids) and int_ids.min() < 0:  # "-3" sorts as text, not as a number
            return cls.from_pairs([str(i) for i in int_ids.tolist()], values)
        if np.all(int_ids[1:] > int_ids[:-1]):
            return cls(int_ids, values)
        order = np.argsort(int_ids, kind="stable")
        int_ids = int_ids[order]
        if np.any(int_ids[1:] == int_ids[:-1]):
            raise ValueError("example ids must be distinct")
        return cls(int_ids, values[order])

    @classmethod
    def from_pairs(cls, ids: list[str], means: npt.ArrayLike) -> ExampleMeans:
        """From distinct str ids and their means, in any order (``ids`` may be reordered)."""
        values = np.asarray(means, dtype=np.float64)
        if len(ids) != len(values) or values.ndim != 1:
            raise ValueError("ids and means must be 1-D and of the same length")
        if _plain_decimals(ids):
            return cls.from_columns(np.fromiter(map(int, ids), np.int64, len(ids)), values)
        if len(set(ids)) != len(ids):
            raise ValueError("example ids must be distinct")
        order = sorted(range(len(ids)), key=lambda row: natural_key(ids[row]))
        return cls([ids[row] for row in order], values[order])

    @classmethod
    def of(cls, mapping: Mapping[str, float]) -> ExampleMeans:
        """``mapping`` itself when it is one already, else its columns."""
        if isinstance(mapping, ExampleMeans):
            return mapping
        return cls.from_pairs(list(mapping), np.fromiter(mapping.values(), np.float64))

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[str]:
        if isinstance(self.ids, list):
            return iter(self.ids)
        return (str(i) for i in self.ids.tolist())

    def __getitem__(self, example_id: str) -> float:
        if self._rows is None:
            self._rows = {key: row for row, key in enumerate(self)}
        return float(self.means[self._rows[example_id]])

    def paired_with(
        self, other: ExampleMeans
    ) -> tuple[npt.NDArray[np.int64] | list[str], FloatArray, FloatArray]:
        """The ids both hold (natural order; ints when both sides' are), with this side's and
        ``other``'s means of them."""
        if not isinstance(self.ids, list) and not isinstance(other.ids, list):
            if np.array_equal(self.ids, other.ids):  # the usual case: the same examples
                return self.ids, self.means, other.means
            shared, mine, theirs = np.intersect1d(
                self.ids, other.ids, assume_unique=True, return_indices=True
            )
            return shared, self.means[mine], other.means[theirs]
        rows = {key: row for row, key in enumerate(other)}
        pairs = [(key, row, rows[key]) for row, key in enumerate(self) if key in rows]
        shared_ids = [key for key, _, _ in pairs]
        mine_rows = np.fromiter((row for _, row, _ in pairs), np.intp, len(pairs))
        theirs_rows = np.fromiter((row for _, _, row in pairs), np.intp, len(pairs))
        return shared_ids, self.means[mine_rows], other.means[theirs_rows]

    def json_members(self, indent: str) -> list[str]:
        """The members of a JSON object of these means, one per line as ``json.dumps`` with
        ``indent`` writes them, in pieces of a few thousand lines (with the ``",\\n"`` between
        pieces as pieces of their own) for one ``"".join`` -- not one string per line."""
        if not np.all(np.isfinite(self.means)):
            raise ValueError("Out of range float values are not JSON compliant")
        pieces: list[str] = []
        for start in range(0, len(self.means), _CHUNK):
            ids = self.ids[start : start + _CHUNK]
            keys = (
                map(json.dumps, ids) if isinstance(ids, list) else map('"{}"'.format, ids.tolist())
            )
            values = self.means[start : start + _CHUNK].tolist()
            if pieces:
                pieces.append(",\n")
            pieces.append(
                ",\n".join(
                    f"{indent}{key}: {value!r}" for key, value in zip(keys, values, strict=True)
                )
            )
        return pieces


def _json_float(value: float) -> float | None:
    # JSON has no NaN; None (null) is the documented stand-in for "undefined".
    return None if math.isnan(value) else value


def _nan_to_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _json_float(v) if isinstance(v, float) else v for k, v in data.items()}


def _is_constant(values: FloatArray) -> bool:
    scale = max(1.0, float(np.max(np.abs(values))))
    return float(np.ptp(values)) <= _ZERO_SPREAD * scale


def _mean(values: Sequence[float]) -> float:
    """One example's mean reward: math.fsum is accurately rounded and ~30x faster than np.mean
    on a short list (100,000 examples: 0.37 s -> 0.01 s). inf - inf is NaN, as np.mean gives."""
    try:
        return math.fsum(values) / len(values)
    except (ValueError, OverflowError):
        return math.nan


class ExampleRewards(Mapping[str, Sequence[float]]):
    """Rewards of examples that all have the same number of rollouts, held in two arrays.

    ``ids[i]`` is an example id and ``rewards[i]`` its rollouts' rewards, in rollout order.
    As a mapping it reads like ``{str(id): [reward, ...]}`` in ``ids`` order, but a run of
    100,000 examples holds 16 bytes per single-rollout example here where a dict of lists
    with str keys held ~200 (~20 MB at the end of every such run). :func:`summarize` and
    :meth:`pytest_modal_eval.gate.baseline.Baseline.from_rewards` read the arrays directly.
    """

    def __init__(self, ids: npt.ArrayLike, rewards: npt.ArrayLike) -> None:
        self.ids: npt.NDArray[np.int64] = np.asarray(ids, dtype=np.int64)
        self.rewards: FloatArray = np.asarray(rewards, dtype=np.float64)
        if self.ids.ndim != 1 or self.rewards.ndim != 2 or len(self.rewards) != len(self.ids):
            raise ValueError("ids must be 1-D and rewards 2-D with one row per id")
        if self.rewards.shape[1] < 1:
            raise ValueError("every example needs at least one rollout")
        # Ids in increasing order (a run's usually are) are distinct without sorting a copy.
        if not np.all(self.ids[1:] > self.ids[:-1]) and len(np.unique(self.ids)) != len(self.ids):
            raise ValueError("example ids must be distinct")
        self._rows: dict[str, int] | None = None

    @classmethod
    def empty(cls) -> ExampleRewards:
        return cls(np.empty(0, np.int64), np.empty((0, 1)))

    @property
    def rollouts(self) -> int:
        return int(self.rewards.shape[1])

    def means(self) -> FloatArray:
        """Each example's mean reward, exactly as :func:`summarize` computes it."""
        if self.rollouts == 1:  # fsum([x]) / 1 is x: a read-only view, not a copy
            column = self.rewards[:, 0]
            column.flags.writeable = False
            return column
        return np.fromiter((_mean(row) for row in self.rewards), np.float64, len(self.ids))

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[str]:
        return (str(example_id) for example_id in self.ids.tolist())

    def __getitem__(self, example_id: str) -> list[float]:
        if self._rows is None:
            self._rows = {key: row for row, key in enumerate(self)}
        rewards: list[float] = self.rewards[self._rows[example_id]].tolist()
        return rewards


def _check_finite(name: str, values: FloatArray) -> None:
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} contains NaN or infinite rewards")


def _check_probability(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value!r}")


@dataclass(frozen=True)
class RewardSummary:
    """Mean reward over examples, its cluster-robust standard error and an interval.

    ``interval`` names the method (see :func:`summarize`). ``stderr`` is NaN for a single
    example (no spread to estimate), as are ``ci_low``/``ci_high`` when the rewards' range is
    unknown; :meth:`to_dict` turns NaN into ``None`` so the result is valid JSON.
    """

    mean: float
    stderr: float
    ci_low: float
    ci_high: float
    confidence: float
    n_examples: int
    n_rollouts: int
    rollouts_per_example: int
    interval: str = intervals.METHOD_WILSON
    reward_range: tuple[float, float] | None = None  # the range the interval lies within

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict; undefined (NaN) figures become ``None``."""
        data = _nan_to_none(asdict(self))
        data["reward_range"] = list(self.reward_range) if self.reward_range else None
        return data


def summarize(
    per_example: Mapping[str, Sequence[float]] | ExampleRewards,
    confidence: float = 0.95,
    *,
    bounds: tuple[float, float] | None = None,
) -> RewardSummary:
    """Summarize rewards given as example id -> rewards of that example's rollouts.

    Why clustering matters: the r rollouts of one example share its difficulty, so they are
    correlated (an easy item is solved by most rollouts, a hard one by few). Treating all n*r
    rollouts as independent divides the spread by sqrt(n*r) and understates the standard error by
    up to sqrt(r). Here each example is one observation -- its mean reward -- so ``mean`` weighs
    every example equally and ``stderr = sd(example means, ddof=1) / sqrt(n)``. For a balanced
    design this is exactly the CR1 cluster-robust standard error of the mean (examples as
    clusters); extra rollouts still help by making each example's mean less noisy.

    The interval always lies within the rewards' range:

    - every reward 0 or 1 (with ``bounds``, at one end or the other of them: pass/fail), one
      rollout per example: Wilson's interval of a proportion (``interval == "wilson"``).
    - other rewards within [0, 1] or ``bounds`` (the range rewards can take by construction,
      rescaled to [0, 1]; partial credit, continuous scores, a judge's probabilities,
      payoffs), and pass/fail rewards with several rollouts (each example's mean is then a
      fraction): the betting interval of the example means
      (:func:`~pytest_modal_eval.stats.intervals.betting`, ``interval == "betting"``), whose
      coverage does not depend on how the example means are distributed. A model of how
      examples differ (the beta-binomial score interval) is about half as wide but covers as
      little as 72% where examples' rates sit at two values, as a judge-like benchmark's do
      (docs/trust.md).
    - otherwise the range is unknown: a t interval clipped to the smallest and largest reward
      observed (``interval == "t-clipped"``).

    Raises ``ValueError`` for no examples, an example without rollouts, or non-finite rewards.
    """
    _check_probability("confidence", confidence)
    if bounds is not None and not bounds[0] < bounds[1]:
        raise ValueError(f"bounds must be (low, high) with low < high, got {bounds!r}")
    if not per_example:
        raise ValueError("cannot summarize rewards of zero examples")
    if isinstance(per_example, ExampleRewards):
        # Columns already: no per-example Python objects (100,000 examples at a run's end).
        means = per_example.means()
        n_rollouts = per_example.rewards.size
        most_rollouts = per_example.rollouts
        counts = np.full(len(means), most_rollouts, dtype=np.int64)
        _check_finite("per_example", per_example.rewards)
        binary = _is_binary(per_example.rewards)
        lowest, highest = float(per_example.rewards.min()), float(per_example.rewards.max())
        flat = per_example.rewards
    else:
        empty = [example_id for example_id, rewards in per_example.items() if len(rewards) == 0]
        if empty:
            raise ValueError(f"examples without any rollout: {sorted(empty, key=natural_key)[:5]}")
        means = np.array([_mean(rewards) for rewards in per_example.values()], dtype=np.float64)
        counts = np.fromiter((len(r) for r in per_example.values()), np.int64, len(means))
        n_rollouts, most_rollouts = int(counts.sum()), int(counts.max())
        _check_finite("per_example", means)
        flat = np.fromiter(
            (x for rewards in per_example.values() for x in rewards), np.float64, n_rollouts
        )
        binary = _is_binary(flat)
        lowest, highest = float(flat.min()), float(flat.max())
    _check_finite("per_example", means)
    n = len(means)
    mean = float(np.mean(means))
    stderr = _sem(means) if n > 1 else math.nan
    if n > 1 and _is_constant(means):
        stderr = 0.0

    if bounds is None and (binary or (lowest >= 0.0 and highest <= 1.0)):
        bounds = (0.0, 1.0)
    if bounds is not None:
        if lowest < bounds[0] or highest > bounds[1]:
            raise ValueError(f"rewards [{lowest}, {highest}] lie outside bounds {bounds!r}")
        low, width = bounds[0], bounds[1] - bounds[0]
        if bounds != (0.0, 1.0):  # pass/fail: every reward at one end of the range
            binary = _is_binary((np.asarray(flat) - low) / width)
        if binary and most_rollouts == 1:
            # One pass/fail rollout per example: its mean is its pass (exactly, for 0/1).
            passes = np.rint((means - low) / width).astype(np.int64)
            found = intervals.beta_binomial_score(passes, counts, confidence=confidence)
            method = intervals.METHOD_WILSON
        else:
            found = intervals.betting((means - low) / width, confidence=confidence)
            method = intervals.METHOD_BETTING
        ci_low = low + width * float(found.low)
        ci_high = low + width * float(found.high)
        reward_range: tuple[float, float] = (float(bounds[0]), float(bounds[1]))
    else:
        found = intervals.clipped_t(means, lowest, highest, confidence=confidence)
        ci_low, ci_high = float(found.low), float(found.high)
        method, reward_range = intervals.METHOD_T, (lowest, highest)

    return RewardSummary(
        mean=mean,
        stderr=stderr,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=confidence,
        n_examples=n,
        n_rollouts=n_rollouts,
        rollouts_per_example=most_rollouts,
        interval=method,
        reward_range=reward_range,
    )


def summarize_within(
    rewards: ExampleRewards, reward_range: Sequence[float] | None, confidence: float = 0.95
) -> RewardSummary:
    """:func:`summarize` of a run's rewards, its interval within ``reward_range`` (the range
    the benchmark declares its rewards lie in, ``gate.reward_range``) when every reward lies
    in it; otherwise, or with none declared, within what :func:`summarize` finds."""
    if reward_range is not None and len(rewards):
        low, high = float(reward_range[0]), float(reward_range[1])
        if low <= float(rewards.rewards.min()) and float(rewards.rewards.max()) <= high:
            return summarize(rewards, confidence, bounds=(low, high))
    return summarize(rewards, confidence)


@dataclass(frozen=True)
class PairedComparison:
    """A run compared with a baseline on the examples both scored.

    ``diff`` is ``run_mean - baseline_mean``; ``p_value`` is one-sided for "run is worse".
    Undefined figures (NaN) become ``None`` in :meth:`to_dict`.
    """

    test: str
    n_shared: int
    baseline_mean: float
    run_mean: float
    diff: float
    diff_ci_low: float
    diff_ci_high: float
    p_value: float
    alpha: float
    max_drop: float
    regressed: bool
    # Two-sided level of diff_ci_low/high: 1 - 2 alpha (see diff_confidence).
    confidence: float = 0.90
    solved_to_missed: list[str] = field(default_factory=list)
    missed_to_solved: list[str] = field(default_factory=list)
    only_in_baseline: int = 0
    only_in_run: int = 0
    # The smallest drop this test detects with 80% power at n_shared and alpha (see
    # stats.power); NaN when no drop is detectable at this n.
    detectable_drop: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict; undefined (NaN) figures become ``None``."""
        return _nan_to_none(asdict(self))


def _is_binary(values: FloatArray) -> bool:
    return bool(np.all((values == 0.0) | (values == 1.0)))


def _mcnemar_p(n_solved_to_missed: int, n_missed_to_solved: int, n: int, margin: float) -> float:
    """Exact conditional test of H0: difference >= -``margin`` over ``n`` pairs. Given the d
    discordant pairs the difference is (d / n)(1 - 2 t), t the share of them going down, so H0
    is t <= t0 = (1 + n margin / d) / 2 and the p-value is P(X >= down), X ~ Binomial(d, t0):
    exact McNemar at margin 0 (t0 = 1/2). It is below alpha exactly when the Clopper-Pearson
    inversion (:func:`_exact_paired_interval`) at 1 - 2 alpha lies below -``margin``."""
    discordant = n_solved_to_missed + n_missed_to_solved
    if discordant == 0:
        return 1.0
    if n_solved_to_missed == 0:
        return 1.0
    share = (1.0 + n * margin / discordant) / 2 if margin > 0.0 else 0.5
    if share >= 1.0:  # even every discordant pair going down is no larger drop than the margin
        return 1.0
    # P(X >= b) = P(X > b - 1) for X ~ Binomial(d, t0).
    return float(special.bdtrc(n_solved_to_missed - 1, discordant, share))


def _tango_p(down: int, up: int, n: int, margin: float) -> float:
    """Tango's score test of H0: difference >= -``margin`` (one-sided, lower tail), the test
    :func:`_tango_interval` inverts: below alpha exactly when that interval at 1 - 2 alpha
    lies below -``margin``."""
    if margin >= 1.0:
        return 1.0
    gap, var = _tango_score(down, up, n, -margin)
    if var <= 0.0:
        return 0.0 if gap < 0.0 else 1.0
    return float(special.ndtr(gap / math.sqrt(var)))


def _paired_t(
    run: FloatArray, base: FloatArray, width: float, confidence: float, margin: float
) -> tuple[float, float, float]:
    """One-sided p (H0: mean(run - base) >= -``margin``) and the two-sided ``confidence``
    interval of mean(run - base), within [-width, width] (``width``: the reward range's
    length)."""
    diffs = run - base
    n = len(diffs)
    if n == 1:
        return math.nan, math.nan, math.nan
    if _is_constant(diffs):
        return _uniform_shift(float(np.mean(diffs)), n, width, confidence, margin)
    # The lower tail of the t statistic of the mean shifted by the margin is the one-sided p;
    # the interval is two-sided.
    df = n - 1
    mean, stderr = float(np.mean(diffs)), _sem(diffs)
    half = _t_quantile(confidence, df) * stderr
    low, high = max(mean - half, -width), min(mean + half, width)
    return float(special.stdtr(df, (mean + margin) / stderr)), low, high


def _uniform_shift(
    shift: float, n: int, width: float, confidence: float, margin: float
) -> tuple[float, float, float]:
    """One-sided p (H0: mean difference >= -``margin``) and two-sided interval of the mean
    difference when each of the ``n`` differences is ``shift``, differences lying within
    [-width, width].

    The mean can be -margin or more only if some share of all examples differs from ``shift``,
    by at most up to ``width``: at least pi0 = (-margin - shift) / (width - shift) of them.
    None of ``n`` doing so has probability (1 - pi0)^n, the exact binomial p. The share that
    may differ unseen is at most 1 - ((1 - confidence) / 2)^(1 / n), the Clopper-Pearson upper
    end for 0 of n (at confidence 1 - 2 alpha the interval lies below -margin exactly when
    p < alpha); it may move to -width or to +width, which gives the interval's ends.
    """
    p = ((width + margin) / (width - shift)) ** n if shift < -margin else 1.0
    unseen = -math.expm1(math.log((1.0 - confidence) / 2) / n)
    low = shift - unseen * (shift + width)
    high = shift + unseen * (width - shift)
    return p, max(low, -width), min(high, width)


def _tango_score(down: int, up: int, n: int, delta: float) -> tuple[float, float]:
    """Tango's score statistic of the paired difference ``delta`` as (numerator, variance):
    up - down - n delta and n (2 q + delta (1 - delta)), q being the maximum-likelihood
    probability of a pair going down given delta."""
    same = n - down - up
    # Maximum likelihood of P(down) = q with P(up) = q + delta, the root of
    # 2 n q^2 - b q - down delta (1 - delta) = 0 that is a probability.
    b = up * (1 - delta) + down * (1 - 3 * delta) - 2 * same * delta
    q = (b + math.sqrt(max(b * b + 8 * n * down * delta * (1 - delta), 0.0))) / (4 * n)
    return up - down - n * delta, n * (2 * q + delta * (1 - delta))


def _tango_interval(down: int, up: int, n: int, confidence: float) -> tuple[float, float]:
    """Tango's asymptotic score interval (Stat Med 1998;17:891) of the difference of paired
    proportions, run - baseline = (up - down) / n: ``down`` pairs went solved -> missed, ``up``
    missed -> solved. A difference delta is inside when (up - down - n delta)^2 <= z^2 n
    (2 q + delta (1 - delta)), q being the maximum-likelihood probability of a pair going down
    given delta. Within [-1, 1]; never of zero width."""
    z2 = float(special.ndtri(0.5 + confidence / 2)) ** 2

    def inside(delta: float) -> bool:
        gap, var = _tango_score(down, up, n, delta)
        return gap * gap <= z2 * max(var, 0.0) + 1e-12 * n * n

    estimate = (up - down) / n

    def end(outside: float) -> float:
        if inside(outside):
            return outside
        found, beyond = estimate, outside
        for _ in range(60):
            middle = (found + beyond) / 2
            found, beyond = (middle, beyond) if inside(middle) else (found, middle)
        return found

    return end(-1.0), end(1.0)


def _exact_paired_interval(down: int, up: int, n: int, confidence: float) -> tuple[float, float]:
    """The difference (up - down) / n's interval by inverting the exact McNemar test: given the
    d = down + up discordant pairs, the share going down has the Clopper-Pearson interval
    [t_lo, t_hi] at ``confidence``, and the difference is (d / n)(1 - 2 t). Its upper end is
    below 0 exactly when the exact one-sided p is below (1 - confidence) / 2."""
    discordant = down + up
    if discordant == 0:
        return 0.0, 0.0
    tail = (1.0 - confidence) / 2
    share_low = float(special.betaincinv(down, up + 1, tail)) if down > 0 else 0.0
    share_high = float(special.betaincinv(down + 1, up, 1.0 - tail)) if up > 0 else 1.0
    scale = discordant / n
    return scale * (1.0 - 2.0 * share_high), scale * (1.0 - 2.0 * share_low)


def _sem(values: FloatArray) -> float:
    """Standard error of the mean (sample standard deviation, ddof=1)."""
    return float(np.std(values, ddof=1)) / math.sqrt(len(values))


def _t_quantile(confidence: float, df: int) -> float:
    """Half-width multiplier of a two-sided t interval at ``confidence``."""
    return float(special.stdtrit(df, 0.5 + confidence / 2))


def _reward_width(base: FloatArray, new: FloatArray, bounds: tuple[float, float] | None) -> float:
    """The length of the rewards' range: ``bounds`` when given; 1 when every example mean of
    both sides lies within [0, 1]; else the span of the example means seen, or, when they are
    all the same value, the larger of 1 and its magnitude. Always more than 0."""
    lowest, highest = min(base.min(), new.min()), max(base.max(), new.max())
    if bounds is not None:
        if not bounds[0] < bounds[1]:
            raise ValueError(f"bounds must be (low, high) with low < high, got {bounds!r}")
        if lowest < bounds[0] or highest > bounds[1]:
            raise ValueError(f"rewards [{lowest}, {highest}] lie outside bounds {bounds!r}")
        return float(bounds[1] - bounds[0])
    if lowest >= 0.0 and highest <= 1.0:
        return 1.0
    if highest > lowest:
        return float(highest - lowest)
    return max(1.0, float(abs(lowest)))


def compare_paired(
    baseline: Mapping[str, float],
    run: Mapping[str, float],
    *,
    baseline_binary_single: bool,
    run_binary_single: bool,
    alpha: float = 0.05,
    max_drop: float = 0.0,
    bounds: tuple[float, float] | None = None,
) -> PairedComparison:
    """Test whether ``run`` is worse than ``baseline`` over the example ids they share.

    Inputs are per-example *mean* rewards. The comparison is paired because both sides score the
    same examples: example difficulty is shared, so testing per-example differences removes it
    and is far more sensitive than comparing two independent means (an unpaired test on paired
    data can report p=0.08 where McNemar gives p=0.008).

    Test selection:

    - both sides 0/1 rewards with one rollout per example (``*_binary_single``): exact McNemar,
      i.e. a binomial test on the discordant pairs. Exact, so valid for few flips.
    - otherwise: a one-sided paired t-test on per-example means.
      Chosen over a paired bootstrap because per-example means are bounded and eval sets have
      dozens to thousands of examples, where the t distribution of the mean difference is
      accurate; it is deterministic without a seed, its interval matches its test, and a
      percentile bootstrap under-covers at exactly the small n where the choice matters.

    One-sided (H1: run is worse) because the gate asks a directional question -- did this change
    make things worse? A two-sided test would spend half of ``alpha`` on improvements, which never
    fail the gate, and so lose power against real regressions.

    The null hypothesis is "the run is at most ``max_drop`` worse" (difference >= -``max_drop``,
    a non-inferiority margin), so ``p_value`` is against that margin and ``regressed`` (``p_value
    < alpha``) says the drop is significantly *larger* than the one you tolerate: exactly when
    the interval's upper end lies below ``-max_drop``. A drop whose point estimate exceeds
    ``max_drop`` but whose interval still allows a smaller one does not regress. An improvement
    (``diff >= 0``) never regresses. With ``max_drop = 0`` these are the plain one-sided tests.
    For McNemar with ``max_drop > 0`` the p-value is the larger of the exact conditional test at
    the margin (the share of discordant pairs going down, Binomial at t0 = (1 + n max_drop / d)
    / 2 instead of 1/2) and Tango's score test at the margin, the two the interval joins; for
    the t-test it is the t statistic of the mean difference plus ``max_drop``.

    ``diff_ci_low/high`` is a two-sided interval at 1 - 2 ``alpha`` (its upper end the
    one-sided 1 - alpha bound the test decides by) of the mean paired difference within
    [-w, w], w the length of the rewards' range (``bounds``; else 1 when every example mean
    lies in [0, 1], else the span of the means seen, or the larger of 1 and their magnitude
    when they are all one value): for McNemar, Tango's score interval of the difference of
    paired proportions, widened to hold the interval that inverts the exact test (so that it
    lies below -max_drop exactly when p < alpha); for the t-test, its t interval clipped to
    [-w, w].
    When every difference is the same value d the t-test has no spread to use; then (exact
    binomial) p = (1 - pi0)^n when d < -max_drop, pi0 = (-max_drop - d) / (w - d) being the
    smallest share of examples that, differing by up to +w unseen, would make the mean
    difference -max_drop, and p = 1 otherwise; the interval is [d - pi (d + w), d + pi (w - d)],
    pi = 1 - (0.025)^(1/n) the Clopper-Pearson upper end of the share of examples that differ,
    for 0 of n seen.

    Raises ``ValueError`` when no id is shared, rewards are not finite or lie outside
    ``bounds``, a ``*_binary_single`` side holds values other than 0/1, or
    ``alpha``/``max_drop`` are out of range.
    """
    if not 0.0 < alpha < 0.5:
        raise ValueError(
            f"alpha must be strictly between 0 and 0.5 (a one-sided test), got {alpha!r}"
        )
    if not (math.isfinite(max_drop) and max_drop >= 0.0):
        raise ValueError(f"max_drop must be a finite number >= 0, got {max_drop!r}")
    shared, base, new = ExampleMeans.of(baseline).paired_with(ExampleMeans.of(run))
    if len(shared) == 0:
        raise ValueError(
            f"baseline ({len(baseline)} examples) and run ({len(run)} examples) share no "
            "example id; were they made from different datasets or id schemes?"
        )
    _check_finite("baseline", base)
    _check_finite("run", new)
    for name, flag, values in (
        ("baseline", baseline_binary_single, base),
        ("run", run_binary_single, new),
    ):
        if flag and not _is_binary(values):
            raise ValueError(f"{name}_binary_single=True but {name} has rewards other than 0/1")

    base_solved = base >= SOLVED_THRESHOLD
    new_solved = new >= SOLVED_THRESHOLD
    solved_to_missed = [str(shared[j]) for j in np.flatnonzero(base_solved & ~new_solved).tolist()]
    missed_to_solved = [str(shared[j]) for j in np.flatnonzero(~base_solved & new_solved).tolist()]

    width = _reward_width(base, new, bounds)
    confidence = diff_confidence(alpha)
    if baseline_binary_single and run_binary_single:
        test = TEST_MCNEMAR
        down, up = len(solved_to_missed), len(missed_to_solved)
        p_value = _mcnemar_p(down, up, len(shared), max_drop)
        if max_drop > 0.0:
            # The interval is the union of Tango's and the exact one, so the drop is beyond the
            # margin only when both tests say so. At margin 0 Tango's is the asymptotic McNemar
            # test, and the exact p alone is reported.
            p_value = max(p_value, _tango_p(down, up, len(shared), max_drop))
        tango = _tango_interval(down, up, len(shared), confidence)
        exact = _exact_paired_interval(down, up, len(shared), confidence)
        ci_low, ci_high = min(tango[0], exact[0]), max(tango[1], exact[1])
    else:
        test = TEST_PAIRED_T
        p_value, ci_low, ci_high = _paired_t(new, base, width, confidence, max_drop)

    diff = float(np.mean(new) - np.mean(base))
    if test == TEST_MCNEMAR:
        # Chance flips are measured by the flips *up*: a drop adds flips down, not up.
        detectable = power.detectable_drop_mcnemar(
            len(shared), len(missed_to_solved) / len(shared), alpha
        )
    else:
        if len(shared) > 1 and _is_constant(new - base):
            detectable = power.detectable_uniform_drop(len(shared), alpha, width)
        else:
            spread = float(np.std(new - base, ddof=1)) if len(shared) > 1 else math.nan
            detectable = power.detectable_drop_t(len(shared), spread, alpha, width=width)
    return PairedComparison(
        test=test,
        n_shared=len(shared),
        baseline_mean=float(np.mean(base)),
        run_mean=float(np.mean(new)),
        diff=diff,
        diff_ci_low=ci_low,
        diff_ci_high=ci_high,
        p_value=p_value,
        alpha=alpha,
        max_drop=max_drop,
        # NaN < alpha is False, so an undefined test (one shared example) never regresses. The
        # test and the interval are each other's inverse; requiring both keeps the verdict
        # from contradicting the interval printed with it even at a rounding boundary.
        regressed=bool(p_value < alpha and ci_high < -max_drop),
        confidence=confidence,
        solved_to_missed=solved_to_missed,
        missed_to_solved=missed_to_solved,
        only_in_baseline=len(baseline) - len(shared),
        only_in_run=len(run) - len(shared),
        detectable_drop=detectable,
    )

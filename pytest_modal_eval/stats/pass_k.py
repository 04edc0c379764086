"""pass@k: the chance that at least one of k rollouts of an example gets full reward.

With n rollouts of an example of which c got full reward, the unbiased estimator of pass@k is
``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021): the share of the k-subsets of the n rollouts
that hold at least one success. Drawing only k rollouts would estimate the same number with more
noise; using all n is why ``rollouts >= k`` is asked for, not ``== k``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# numpy is imported where the estimates are computed: the naming helpers below are used while
# benchmark files are validated at collection, which should not pay for numpy.

FULL_REWARD = 1.0
"""A rollout is a success for pass@k when its reward is at least this."""


@dataclass(frozen=True)
class PassAtK:
    """pass@k averaged over examples, with the standard error of that mean (NaN for one example)."""

    k: int
    mean: float
    stderr: float
    n_examples: int

    @property
    def name(self) -> str:
        return metric_name(self.k)


def metric_name(k: int) -> str:
    """``pass@8``: how pass@k is named in summaries, metadata, JUnit and ``gate.min_metrics``."""
    return f"pass@{k}"


def parse_metric_name(name: str) -> int | None:
    """k of a ``pass@k`` name, or None when ``name`` is not one."""
    head, sep, tail = name.partition("@")
    if head != "pass" or not sep or not tail.isdigit() or tail.startswith("0"):
        return None
    return int(tail)


def default_ks(rollouts: int) -> list[int]:
    """1 and the powers of two up to ``rollouts``: 1, 2, 4, ... ."""
    ks, k = [], 1
    while k <= rollouts:
        ks.append(k)
        k *= 2
    return ks


def per_example(rewards: npt.ArrayLike, k: int) -> npt.NDArray[np.float64]:
    """Each example's unbiased pass@k from a (examples x rollouts) array of rewards."""
    import numpy as np

    table = np.asarray(rewards, dtype=np.float64)
    if table.ndim != 2:
        raise ValueError("rewards must be 2-D: one row of rollouts per example")
    n = table.shape[1]
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} rollouts per example, got {n}")
    successes = np.count_nonzero(table >= FULL_REWARD, axis=1)
    # All examples have n rollouts, so the estimate depends on c alone: one exact value per c
    # (Python integers, no overflow or cancellation), looked up for every example.
    total = math.comb(n, k)
    by_successes = np.array([1.0 - math.comb(n - c, k) / total for c in range(n + 1)])
    estimates: npt.NDArray[np.float64] = by_successes[successes]
    return estimates


def pass_at_k(rewards: npt.ArrayLike, ks: Iterable[int]) -> list[PassAtK]:
    """pass@k for each k in ``ks`` over the examples of a (examples x rollouts) reward array."""
    import numpy as np

    table = np.asarray(rewards, dtype=np.float64)
    found = []
    for k in sorted(set(ks)):
        values = per_example(table, k)
        m = len(values)
        stderr = float(np.std(values, ddof=1)) / math.sqrt(m) if m > 1 else math.nan
        found.append(PassAtK(k, float(np.mean(values)) if m else math.nan, stderr, m))
    return found

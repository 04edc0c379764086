"""What a benchmark's gate will decide on, and can detect, before anything runs: the plan that
``pytest --collect-only -v`` prints.

The smallest drop a comparison with the stored baseline detects depends on the noise between
the run and the baseline, which only the run shows (``compare_paired`` measures it after).
Before the run the noise is taken as if the run's answers were independent of the
baseline's at the baseline's own rate: the flips of one 0/1 rollout per example at the rate
``p (1 - p)`` (``p`` the baseline's solved share), else per-example differences with
``sqrt(2)`` times the spread of the baseline's per-example means. A run of a similar model
agrees with the baseline more than that, and then detects smaller drops: the figure is the
most the gate needs, not a promise of less.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_modal_eval.exceptions import BaselineError

if TYPE_CHECKING:
    from pytest_modal_eval.config.schema import GateConfig
    from pytest_modal_eval.gate.baseline import Baseline

#: The comparisons' tests, as ``compare_paired`` names them.
MCNEMAR, PAIRED_T = "mcnemar-exact", "paired-t"


@dataclass(frozen=True)
class PlannedComparison:
    """The comparison with a stored baseline that a run of ``n_shared`` examples would make."""

    shown: str  # the baseline's file, as messages show it
    baseline: Baseline
    n_shared: int  # the run's examples the baseline also has
    test: str
    detectable_drop: float  # NaN: no drop within the rewards' range is detectable

    def describe(self, gate: GateConfig) -> list[str]:
        """The comparison in lines: the baseline, the test, the drop it detects (indented
        under the first)."""
        from pytest_modal_eval.stats.format import fmt
        from pytest_modal_eval.stats.power import POWER

        b = self.baseline
        lines = [
            f"baseline {self.shown}: model {b.model}, mean {fmt(b.mean)} over {b.n_examples} "
            "examples",
            f"  compared on the {self.n_shared} examples both have ({self.test}, alpha "
            f"{gate.alpha:g})",
        ]
        if not math.isfinite(self.detectable_drop):
            return [*lines, "  no drop within the rewards' range is detectable at this many"]
        lines.append(
            f"  smallest drop detected with {POWER:.0%} power: {fmt(self.detectable_drop)} (if "
            "the run's answers were independent of the baseline's; a similar model's agree "
            "more, and smaller drops are detected)"
        )
        if gate.max_drop < self.detectable_drop:
            lines.append(
                f"  gate.max_drop {gate.max_drop:g} is below it: a drop in between may pass "
                "unnoticed; evaluate more examples or tolerate a larger drop"
            )
        return lines


def planned_comparison(
    path: Path, shown: str, example_ids: Sequence[int], rollouts: int, gate: GateConfig
) -> PlannedComparison | str | None:
    """The comparison with the baseline stored at ``path`` that a run of ``example_ids`` with
    ``rollouts`` rollouts each would make; a sentence when it cannot be made (the file is
    unreadable, or shares no example); None when no baseline is stored."""
    import numpy as np

    from pytest_modal_eval.gate.baseline import Baseline
    from pytest_modal_eval.stats import power

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"baseline {shown} cannot be read: {exc}"
    try:
        baseline = Baseline.from_json(text, source=shown)
    except BaselineError as exc:
        return str(exc)
    stored = baseline.per_example
    values = np.array([stored[key] for i in example_ids if (key := str(i)) in stored], float)
    n = len(values)
    if n == 0:
        return (
            f"baseline {shown} shares no example with this benchmark's selection; refresh it "
            "with --snapshot-update"
        )
    low, high = gate.rewards_bounds
    if baseline.binary_single and rollouts == 1:
        solved = float(np.mean(values))
        drop = power.detectable_drop_mcnemar(n, solved * (1.0 - solved), gate.alpha)
        test = MCNEMAR
    else:
        spread = float(np.std(values, ddof=1)) if n > 1 else math.nan
        if spread == 0.0:
            drop = power.detectable_uniform_drop(n, gate.alpha, high - low)
        else:
            drop = power.detectable_drop_t(n, math.sqrt(2.0) * spread, gate.alpha, width=high - low)
        test = PAIRED_T
    return PlannedComparison(shown, baseline, n, test, drop)


def gate_lines(gate: GateConfig, several_models: bool) -> list[str]:
    """What the gate fails a run on, one line per part (empty: the gate fails on nothing but
    an example that cannot be evaluated)."""
    lines = []
    if gate.min_avg_reward is not None:
        lines.append(f"mean reward >= {gate.min_avg_reward:g} (gate.min_avg_reward)")
    for metric, minimum in sorted(gate.min_metrics.items()):
        lines.append(f"metric {metric} >= {minimum:g} (gate.min_metrics)")
    lines.append(
        "errored examples: none tolerated (gate.max_error_rate 0)"
        if gate.max_error_rate == 0
        else f"errored examples: at most {gate.max_error_rate:.1%} (gate.max_error_rate)"
    )
    if gate.vs_reference is not None and several_models:
        lines.append(
            "each model after the first: not significantly worse than the first by more than "
            f"{gate.vs_reference.max_drop:g} (gate.vs_reference, alpha {gate.vs_reference.alpha:g})"
        )
    if gate.early_stop:
        lines.append(
            "gate.early_stop: examples are sent in a seeded random order until the gate is "
            "decided, so fewer may be evaluated"
        )
    return lines

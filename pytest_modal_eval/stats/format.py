"""How numbers and comparisons are written for people: the summary, failure messages, notes."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_modal_eval.stats.summary import PairedComparison, RewardSummary


class Scored(Protocol):
    """What :func:`describe_score` reads: a run's outcome (``runs.outcome.RunOutcome``)."""

    @property
    def summary(self) -> RewardSummary | None: ...


#: How many flipped example ids a message lists before "and N more".
FLIPS_SHOWN = 20


def fmt(value: float | None, digits: int = 3) -> str:
    """A figure with ``digits`` decimals; ``n/a`` for a missing or undefined one."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def fmt_any(value: Any, digits: int = 3) -> str:
    """:func:`fmt` for a value of any type (a property that crossed xdist, a JSON value):
    ``n/a`` unless it reads as a finite number."""
    try:
        return fmt(float(value), digits)
    except (TypeError, ValueError):
        return "n/a"


def fmt_interval(low: Any, high: Any, digits: int = 3) -> str:
    """``[0.671, 0.753]``: an interval's ends as :func:`fmt_any` writes them."""
    return f"[{fmt_any(low, digits)}, {fmt_any(high, digits)}]"


def describe_attempts(attempts: Any) -> str | None:
    """A seat's ``attempts`` as ``metadata.json`` records them (plays per rollout, all plays):
    ``3 attempts per rollout (15 plays), reward the mean over them``; None for a seat every
    rollout played once (or a value that is not such a record)."""
    if not isinstance(attempts, dict):
        return None
    span, plays = attempts.get("per_rollout"), attempts.get("plays")
    if not (isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span)):
        return None
    fewest, most = span
    each = str(most) if fewest == most else f"{fewest}-{most}"
    total = f" ({plays} plays)" if isinstance(plays, int) else ""
    return f"{each} attempts per rollout{total}, reward the mean over them"


def ci_label(confidence: float) -> str:
    """``95% CI`` for 0.95."""
    return f"{confidence * 100:g}% CI"


def describe_score(outcome: Scored) -> str:
    """``0.712 ± 0.021 (95% CI [0.671, 0.753], clustered-wilson)``."""
    s = outcome.summary
    if s is None:
        return "no example evaluated"
    return (
        f"{fmt(s.mean)} ± {fmt(s.stderr)} "
        f"({ci_label(s.confidence)} [{fmt(s.ci_low)}, {fmt(s.ci_high)}], {s.interval})"
    )


def describe_comparison(
    c: PairedComparison, before: str = "baseline", after: str = "run"
) -> list[str]:
    """A paired comparison in a few lines: means, difference with CI, p, what the test can
    detect, what flipped. ``before``/``after`` name the two sides (baseline and run, or the
    reference model and another)."""

    lines = [
        f"{before} {fmt(c.baseline_mean)} -> {after} {fmt(c.run_mean)} over {c.n_shared} shared "
        f"examples: diff {c.diff:+.3f} ({ci_label(c.confidence)} "
        f"[{fmt(c.diff_ci_low)}, {fmt(c.diff_ci_high)}]), "
        f"one-sided p = {fmt(c.p_value, 4)} ({c.test}; alpha {c.alpha:g}, "
        f"max_drop {c.max_drop:g}{_against(c)}); {describe_detectable(c)}"
    ]
    for label, ids in (
        ("solved -> missed", c.solved_to_missed),
        ("missed -> solved", c.missed_to_solved),
    ):
        if ids:
            shown = ", ".join(ids[:FLIPS_SHOWN])
            more = f" and {len(ids) - FLIPS_SHOWN} more" if len(ids) > FLIPS_SHOWN else ""
            lines.append(f"{label} ({len(ids)}): {shown}{more}")
    return lines


def _against(c: PairedComparison) -> str:
    """What p is tested against when a drop is tolerated: that drop, not no difference."""
    return f", p against a drop of {c.max_drop:g}" if c.max_drop > 0 else ""


def describe_detectable(c: PairedComparison) -> str:
    """``a drop under 0.214 is not detectable at 30 examples (80% power)``."""
    from pytest_modal_eval.stats.power import POWER

    if not math.isfinite(c.detectable_drop):
        return f"no drop within the reward range is detectable at {c.n_shared} examples"
    return (
        f"a drop under {fmt(c.detectable_drop)} is not detectable at {c.n_shared} examples "
        f"({POWER:.0%} power)"
    )

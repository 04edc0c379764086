"""How numbers and comparisons are written for people: the summary, failure messages, notes."""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
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


#: The most decimals :func:`outward` writes to keep an end on its side of a threshold.
MAX_DIGITS = 17


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _rounded(value: float, digits: int, *, up: bool) -> Decimal:
    step = Decimal(1).scaleb(-digits)
    shown = Decimal(repr(value)).quantize(step, rounding=ROUND_CEILING if up else ROUND_FLOOR)
    return shown.copy_abs() if shown == 0 else shown  # no "-0.000"


def outward(
    low: Any, high: Any, digits: int = 3, *, threshold: float | None = None
) -> tuple[Decimal | None, Decimal | None]:
    """An interval's ends as written for people: the lower rounded down and the upper rounded
    up to ``digits`` decimals, so the interval written holds the one computed. With a
    ``threshold`` (a gate's minimum, ``-max_drop`` of a comparison), an end rounded onto the
    other side of it than the end computed (at or above, or below) gets more decimals until it
    is back on its side: a sequence whose upper end 0.59998 lies below a minimum of 0.6 is
    written ``0.59998``, not ``0.600``. None for an end that is missing or not finite."""
    edge = None if threshold is None else Decimal(repr(float(threshold)))
    ends: list[Decimal | None] = []
    for value, up in ((_finite(low), False), (_finite(high), True)):
        if value is None:
            ends.append(None)
            continue
        places, shown = digits, _rounded(value, digits, up=up)
        if edge is not None:
            above = Decimal(repr(value)) >= edge
            while (shown >= edge) != above and places < MAX_DIGITS:
                places += 1
                shown = _rounded(value, places, up=up)
        ends.append(shown)
    return ends[0], ends[1]


def outward_values(
    low: Any, high: Any, digits: int = 6, *, threshold: float | None = None
) -> tuple[float | None, float | None]:
    """:func:`outward` as numbers (JUnit properties)."""
    found = outward(low, high, digits, threshold=threshold)
    return tuple(None if end is None else float(end) for end in found)  # type: ignore[return-value]


def fmt_interval(
    low: Any, high: Any, digits: int = 3, *, threshold: float | None = None, signed: bool = False
) -> str:
    """``[0.671, 0.753]``: an interval's ends rounded outward (:func:`outward`), ``n/a`` for a
    missing one; ``signed`` writes a difference's sign (``[-0.107, -0.051]``, ``[+0.012, ...``)."""
    style = "+f" if signed else "f"
    ends = outward(low, high, digits, threshold=threshold)
    return "[" + ", ".join("n/a" if end is None else format(end, style) for end in ends) + "]"


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
        f"({ci_label(s.confidence)} {fmt_interval(s.ci_low, s.ci_high)}, {s.interval})"
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
        f"{fmt_interval(c.diff_ci_low, c.diff_ci_high, threshold=-c.max_drop)}), "
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

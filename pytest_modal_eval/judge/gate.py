"""The verdict of one benchmark: thresholds, error rate, and (with a baseline) regression."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_modal_eval.report.format import (
    describe_comparison,
    describe_detectable,
    describe_score,
    fmt,
)

if TYPE_CHECKING:
    from pytest_modal_eval.config.schema import GateConfig
    from pytest_modal_eval.runs.evaluation import RunOutcome
    from pytest_modal_eval.stats.summary import PairedComparison


@dataclass(frozen=True)
class ReferenceComparison:
    """This item's model against the session's reference model (the first ``--model``)."""

    model: str  # the reference model
    comparison: PairedComparison


#: Warn when more than this share of rollouts hit max_tokens.
TRUNCATION_WARN_SHARE = 0.5


@dataclass
class Verdict:
    passed: bool
    reasons: list[str] = field(default_factory=list)  # why it failed
    warnings: list[str] = field(default_factory=list)


def _unrounded(value: float, threshold: float) -> str:
    """The value in full when, rounded, it reads as the threshold it is below."""
    return f" (unrounded: {value!r})" if fmt(value) == fmt(threshold) else ""


def undetectable_warning(c: PairedComparison, field: str) -> str | None:
    """A warning when the tolerated drop ``field`` is below what the test can detect: a drop
    between the two would pass unnoticed, so a green gate says less than it seems to."""
    if math.isfinite(c.detectable_drop) and c.max_drop >= c.detectable_drop:
        return None
    return (
        f"{field} {c.max_drop:g} is below the smallest drop this comparison can detect "
        f"({describe_detectable(c)}): a drop in between passes unnoticed; evaluate more "
        f"examples or tolerate a larger drop"
    )


def judge(
    outcome: RunOutcome,
    gate: GateConfig,
    comparison: PairedComparison | None = None,
    reference: ReferenceComparison | None = None,
) -> Verdict:
    """The gate's verdict on one item; ``comparison`` is against its stored baseline,
    ``reference`` against the reference model (failing it only with ``gate.vs_reference``)."""
    verdict = Verdict(passed=True)
    if comparison is not None:
        if comparison.regressed:
            verdict.reasons.append(
                "significant drop from the stored baseline: "
                + "; ".join(describe_comparison(comparison))
            )
        elif (warning := undetectable_warning(comparison, "gate.max_drop")) is not None:
            verdict.warnings.append(f"baseline: {warning}")
    if reference is not None and gate.vs_reference is not None:
        c = reference.comparison
        if c.regressed:
            verdict.reasons.append(
                f"significantly worse than the reference model {reference.model} "
                "(gate.vs_reference): "
                + "; ".join(describe_comparison(c, "reference", "this model"))
            )
        elif (warning := undetectable_warning(c, "gate.vs_reference.max_drop")) is not None:
            verdict.warnings.append(f"vs reference {reference.model}: {warning}")
    summary = outcome.summary
    if outcome.errored and outcome.error_rate > gate.max_error_rate:
        verdict.reasons.append(
            f"{len(outcome.errored)} of {outcome.n_selected} examples could not be evaluated "
            f"(error rate {outcome.error_rate:.1%} > gate.max_error_rate "
            f"{gate.max_error_rate:.1%}); first: example {min(outcome.errored)}: "
            f"{outcome.errored[min(outcome.errored)]}"
        )
    if summary is None:
        verdict.reasons.append("no example was evaluated")
    else:
        if gate.min_avg_reward is not None and summary.mean < gate.min_avg_reward:
            verdict.reasons.append(
                f"mean reward {describe_score(outcome)} < gate.min_avg_reward "
                f"{gate.min_avg_reward:g}{_unrounded(summary.mean, gate.min_avg_reward)}"
            )
        metrics = {**outcome.metric_means, **{p.name: p.mean for p in outcome.pass_at_k}}
        for metric, threshold in sorted(gate.min_metrics.items()):
            value = metrics.get(metric)
            if value is None:
                known = ", ".join(sorted(metrics)) or "none"
                verdict.reasons.append(
                    f"gate.min_metrics.{metric}: the environment reports no such metric "
                    f"(metrics: {known})"
                )
            elif value < threshold:
                verdict.reasons.append(
                    f"metric {metric} = {fmt(value)} < gate.min_metrics.{metric} {threshold:g}"
                    f"{_unrounded(value, threshold)}"
                )
    rollouts_total = (summary.n_examples * outcome.rollouts) if summary else 0
    if rollouts_total and outcome.truncated_rollouts / rollouts_total > TRUNCATION_WARN_SHARE:
        verdict.warnings.append(
            f"{outcome.truncated_rollouts} of {rollouts_total} rollouts were truncated at "
            "sampling.max_tokens: the score measures the token limit, not the model; raise it"
        )
    verdict.passed = not verdict.reasons
    return verdict

"""The verdict of one benchmark: thresholds, error rate, and (with a baseline) regression."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_modal_eval.report.format import describe_comparison, describe_score, fmt

if TYPE_CHECKING:
    from pytest_modal_eval.config.schema import GateConfig
    from pytest_modal_eval.runs.evaluation import RunOutcome
    from pytest_modal_eval.stats.summary import PairedComparison

#: Warn when more than this share of rollouts hit max_tokens.
TRUNCATION_WARN_SHARE = 0.5


@dataclass
class Verdict:
    passed: bool
    reasons: list[str] = field(default_factory=list)  # why it failed
    warnings: list[str] = field(default_factory=list)


def judge(
    outcome: RunOutcome, gate: GateConfig, comparison: PairedComparison | None = None
) -> Verdict:
    verdict = Verdict(passed=True)
    if comparison is not None and comparison.regressed:
        verdict.reasons.append(
            "significant drop from the stored baseline: "
            + "; ".join(describe_comparison(comparison))
        )
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
                f"{gate.min_avg_reward:g}"
            )
        for metric, threshold in sorted(gate.min_metrics.items()):
            value = outcome.metric_means.get(metric)
            if value is None:
                known = ", ".join(sorted(outcome.metric_means)) or "none"
                verdict.reasons.append(
                    f"gate.min_metrics.{metric}: the environment reports no such metric "
                    f"(metrics: {known})"
                )
            elif value < threshold:
                verdict.reasons.append(
                    f"metric {metric} = {fmt(value)} < gate.min_metrics.{metric} {threshold:g}"
                )
    rollouts_total = (summary.n_examples * outcome.rollouts) if summary else 0
    if rollouts_total and outcome.truncated_rollouts / rollouts_total > TRUNCATION_WARN_SHARE:
        verdict.warnings.append(
            f"{outcome.truncated_rollouts} of {rollouts_total} rollouts were truncated at "
            "sampling.max_tokens: the score measures the token limit, not the model; raise it"
        )
    verdict.passed = not verdict.reasons
    return verdict

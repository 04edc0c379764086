"""The verdict of one benchmark: thresholds, error rate, and (with a baseline) regression."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_modal_eval.report.terminal import fmt

if TYPE_CHECKING:
    from pytest_modal_eval.config.schema import GateConfig
    from pytest_modal_eval.runs.evaluation import RunOutcome
    from pytest_modal_eval.stats.summary import PairedComparison

#: How many flipped example ids a message lists before "and N more".
FLIPS_SHOWN = 20

#: Warn when more than this share of rollouts hit max_tokens.
TRUNCATION_WARN_SHARE = 0.5


@dataclass
class Verdict:
    passed: bool
    reasons: list[str] = field(default_factory=list)  # why it failed
    warnings: list[str] = field(default_factory=list)


def describe_score(outcome: RunOutcome) -> str:
    """``0.712 ± 0.021 (95% CI [0.671, 0.753])``."""
    s = outcome.summary
    if s is None:
        return "no example evaluated"
    method = ", Wilson" if s.interval == "wilson" else ""
    return f"{fmt(s.mean)} ± {fmt(s.stderr)} (95% CI [{fmt(s.ci_low)}, {fmt(s.ci_high)}]{method})"


def describe_comparison(c: PairedComparison) -> list[str]:
    """The baseline comparison in a few lines: means, difference with CI, p, what flipped."""
    lines = [
        f"baseline {fmt(c.baseline_mean)} -> run {fmt(c.run_mean)} over {c.n_shared} shared "
        f"examples: diff {c.diff:+.3f} (95% CI [{fmt(c.diff_ci_low)}, {fmt(c.diff_ci_high)}]), "
        f"one-sided p = {fmt(c.p_value, 4)} ({c.test}; alpha {c.alpha:g}, "
        f"max_drop {c.max_drop:g})"
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

"""The verdict of one benchmark: thresholds, error rate, and (with a baseline) regression."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.runs.early_stop import (
    BASELINE,
    REFERENCE,
    REWARD,
    failure_reasons,
    gated_thresholds,
)
from pytest_modal_eval.stats.format import (
    describe_comparison,
    describe_detectable,
    describe_score,
    fmt,
)

if TYPE_CHECKING:
    from pytest_modal_eval.config.schema import GateConfig
    from pytest_modal_eval.runs.outcome import RunOutcome
    from pytest_modal_eval.stats.summary import PairedComparison


def reference_figures(comparison: PairedComparison) -> dict[str, Any]:
    """A paired comparison's figures as every JSON a user reads them from names them
    (``vs_reference`` in ``metadata.json``, ``compare --json``): the side compared with is the
    reference (``reference_mean``, ``only_in_reference``), the other the run (``run_mean``)."""
    from pytest_modal_eval.stats.power import POWER

    figures = {
        key.replace("baseline", "reference"): value for key, value in comparison.to_dict().items()
    }
    return {**figures, "diff_ci_level": comparison.confidence, "detectable_drop_power": POWER}


@dataclass(frozen=True)
class ReferenceComparison:
    """This item's model against the session's reference model (the first ``--model``)."""

    model: str  # the reference model
    comparison: PairedComparison
    run_dir: str | None = None  # the reference's run
    run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The comparison as ``metadata.json`` records it (``vs_reference``): the reference's
        model and run, then :func:`reference_figures`."""
        return {
            "reference_model": self.model,
            "reference_run_id": self.run_id,
            "reference_run_dir": self.run_dir,
            **reference_figures(self.comparison),
        }

    @classmethod
    def from_dict(cls, figures: dict[str, Any]) -> ReferenceComparison:
        """A comparison as :meth:`to_dict` recorded it, read back (``null`` figures are the
        undefined ones, NaN)."""
        from dataclasses import fields

        from pytest_modal_eval.stats.summary import PairedComparison

        names = {f.name for f in fields(PairedComparison)}
        values: dict[str, Any] = {
            name: math.nan if value is None else value
            for key, value in figures.items()
            if (name := key.replace("reference", "baseline")) in names
        }
        return cls(
            model=str(figures.get("reference_model")),
            comparison=PairedComparison(**values),
            run_dir=figures.get("reference_run_dir"),
            run_id=figures.get("reference_run_id"),
        )


#: Warn when more than this share of rollouts hit max_tokens.
TRUNCATION_WARN_SHARE = 0.5


#: The parts of a gate that can fail it, as the summary row (``FAIL: baseline``), the JUnit
#: property ``gate_failed`` and ``metadata.json`` (``gate_failed``) name them:
#: ``gate.min_avg_reward``,
THRESHOLD = "threshold"
#: ``gate.min_metrics``,
METRICS = "metrics"
#: ``gate.max_error_rate`` (or no example evaluated at all),
ERRORS = "errors"
#: a significant drop from the stored baseline (``gate.max_drop``),
DROP_FROM_BASELINE = "baseline"
#: and ``gate.vs_reference``.
VS_REFERENCE = "vs_reference"


def verdict_label(passed: bool, failed_by: Sequence[str] = ()) -> str:
    """The verdict as every report words it: ``PASS``, or ``FAIL`` with what failed it
    (``FAIL: baseline``, ``FAIL: threshold, errors``); plain ``FAIL`` when that is not known
    (a run recorded without it)."""
    if passed:
        return "PASS"
    return f"FAIL: {', '.join(failed_by)}" if failed_by else "FAIL"


@dataclass
class Verdict:
    passed: bool
    reasons: list[str] = field(default_factory=list)  # why it failed
    warnings: list[str] = field(default_factory=list)
    # The mean reward the gate asked for (gate.min_avg_reward), read here once: the JUnit
    # properties, metadata.json and the HTML report take it from the verdict.
    threshold: float | None = None
    # Which parts of the gate failed it (THRESHOLD, METRICS, ERRORS, DROP_FROM_BASELINE,
    # VS_REFERENCE), each once, in the order of its first reason.
    failed_by: list[str] = field(default_factory=list)

    def fail(self, part: str, reason: str) -> None:
        """The gate fails, by ``part`` (one of the names above), for ``reason``."""
        self.passed = False
        self.reasons.append(reason)
        if part not in self.failed_by:
            self.failed_by.append(part)

    @property
    def label(self) -> str:
        """``PASS``, or ``FAIL: <what failed it>`` (:func:`verdict_label`)."""
        return verdict_label(self.passed, self.failed_by)


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


def _below_thresholds(
    scored: Any, metrics: dict[str, float], gate: GateConfig
) -> list[tuple[str, str]]:
    """Why ``scored``'s mean reward (its ``summary``) and ``metrics`` miss the gate's
    thresholds (min_avg_reward, min_metrics), each with the part of the gate it fails; empty
    when they do not."""
    reasons = []
    summary = scored.summary
    if gate.min_avg_reward is not None and summary.mean < gate.min_avg_reward:
        reasons.append(
            (
                THRESHOLD,
                f"mean reward {describe_score(scored)} < gate.min_avg_reward "
                f"{gate.min_avg_reward:g}{_unrounded(summary.mean, gate.min_avg_reward)}",
            )
        )
    for metric, threshold in sorted(gate.min_metrics.items()):
        value = metrics.get(metric)
        if value is None:
            known = ", ".join(sorted(metrics)) or "none"
            reasons.append(
                (
                    METRICS,
                    f"gate.min_metrics.{metric}: the environment reports no such metric "
                    f"(metrics: {known})",
                )
            )
        elif value < threshold:
            reasons.append(
                (
                    METRICS,
                    f"metric {metric} = {fmt(value)} < gate.min_metrics.{metric} {threshold:g}"
                    f"{_unrounded(value, threshold)}",
                )
            )
    return reasons


def decide(
    outcome: RunOutcome,
    gate: GateConfig,
    comparison: PairedComparison | None = None,
    reference: ReferenceComparison | None = None,
) -> Verdict:
    """The gate's verdict on one item; ``comparison`` is against its stored baseline,
    ``reference`` against the reference model (failing it only with ``gate.vs_reference``)."""
    verdict = Verdict(passed=True, threshold=gate.min_avg_reward)
    early = outcome.early_decision
    # A comparison decided by early stop is judged by its sequence (its reason comes with the
    # sequences' below), not by a test on the random subset that was evaluated.
    decided_early = {
        name for name in (BASELINE, REFERENCE) if early and early.regressed(name) is not None
    }
    if comparison is not None and BASELINE not in decided_early:
        if comparison.regressed:
            verdict.fail(
                DROP_FROM_BASELINE,
                "significant drop from the stored baseline: "
                + "; ".join(describe_comparison(comparison)),
            )
        elif (warning := undetectable_warning(comparison, "gate.max_drop")) is not None:
            verdict.warnings.append(f"baseline: {warning}")
    if reference is not None and gate.vs_reference is not None and REFERENCE not in decided_early:
        c = reference.comparison
        if c.regressed:
            verdict.fail(
                VS_REFERENCE,
                f"significantly worse than the reference model {reference.model} "
                "(gate.vs_reference): "
                + "; ".join(describe_comparison(c, "reference", "this model")),
            )
        elif (warning := undetectable_warning(c, "gate.vs_reference.max_drop")) is not None:
            verdict.warnings.append(f"vs reference {reference.model}: {warning}")
    summary = outcome.summary
    if outcome.errored and outcome.error_rate > gate.max_error_rate:
        verdict.fail(
            ERRORS,
            f"{len(outcome.errored)} of {outcome.n_sent} examples "
            f"{'sent ' if outcome.unsent else ''}could not be evaluated "
            f"(error rate {outcome.error_rate:.1%} > gate.max_error_rate "
            f"{gate.max_error_rate:.1%}); first: example {min(outcome.errored)}: "
            f"{outcome.errored[min(outcome.errored)]}",
        )
    plan = outcome.seat_plan
    if summary is None:
        verdict.fail(ERRORS, "no example was evaluated")
    elif early is not None:
        # Decided on a random subset by confidence sequences: their verdict, not the subset's
        # means against the thresholds (see runs/early_stop.py for its error bound).
        thresholds = gated_thresholds(gate.min_avg_reward, gate.min_metrics)
        parts = [THRESHOLD if name == REWARD else METRICS for name in early.failed]
        parts += [
            DROP_FROM_BASELINE if p.name == BASELINE else VS_REFERENCE
            for p in early.paired
            if p.regressed
        ]
        # failure_reasons gives one reason per failed sequence, in this order.
        for part, reason in zip(parts, failure_reasons(early, thresholds), strict=True):
            verdict.fail(part, reason)
    else:
        metrics = {**outcome.metric_means, **{p.name: p.mean for p in outcome.pass_at_k}}
        # With several seats, the figures above are the headline seat's: say which.
        prefix = f"seat {plan.headline}: " if plan.seats else ""
        for part, reason in _below_thresholds(outcome, metrics, gate):
            verdict.fail(part, prefix + reason)
    if summary is not None and early is None:
        for seat in plan.gated():
            figures = outcome.seats[seat]
            if figures.summary is None:
                continue
            # pass@k is the headline seat's; the other seats are gated on their own metrics.
            own = {k: v for k, v in gate.min_metrics.items() if "@" not in k}
            reasons = _below_thresholds(
                figures, figures.metric_means, gate.model_copy(update={"min_metrics": own})
            )
            for part, reason in reasons:
                verdict.fail(part, f"seat {seat}: {reason}")
    rollouts_total = (summary.n_examples * outcome.rollouts) if summary else 0
    if rollouts_total and outcome.truncated_rollouts / rollouts_total > TRUNCATION_WARN_SHARE:
        verdict.warnings.append(
            f"{outcome.truncated_rollouts} of {rollouts_total} rollouts were truncated at "
            "sampling.max_tokens: the score measures the token limit, not the model; raise it"
        )
    verdict.passed = not verdict.reasons
    return verdict

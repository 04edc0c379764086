"""Per-benchmark figures as JUnit properties (``user_properties``, which also cross xdist)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.stats.format import outward_values

if TYPE_CHECKING:
    import pytest

    from pytest_modal_eval.gate.verdict import ReferenceComparison, Verdict
    from pytest_modal_eval.runs.outcome import RunOutcome
    from pytest_modal_eval.stats.summary import PairedComparison

#: Properties are named plainly in JUnit XML; this prefix marks the few internal ones.
PROPERTY_PREFIX = "modal_eval_"
#: Set on a benchmark item when its setup starts, so a summary row can name an item that
#: errored before it had figures.
BENCHMARK_PROPERTY = f"{PROPERTY_PREFIX}benchmark"
#: Set with it: the item's model, for the same row.
MODEL_PROPERTY = f"{PROPERTY_PREFIX}model"
# Present when the item's server figures are the run's record from an earlier session.
SERVER_RECORDED_PROPERTY = f"{PROPERTY_PREFIX}server_recorded"
#: The value of a figure that is undefined (the standard error of one example): what the
#: summary shows, where metadata.json has null.
UNDEFINED = "n/a"


def record_properties(
    item: pytest.Item,
    outcome: RunOutcome,
    verdict: Verdict,
    model: str,
    comparison: PairedComparison | None = None,
    reference: ReferenceComparison | None = None,
) -> None:
    """Attach the figures as ``user_properties`` (str/int/float only: they cross xdist)."""
    s = outcome.summary
    threshold = verdict.threshold
    props: list[tuple[str, Any]] = [
        ("benchmark", item.benchmark.name),  # type: ignore[attr-defined]
        ("model", model),
        ("avg_reward", _num(s.mean) if s else UNDEFINED),
        ("stderr", _num(s.stderr) if s else UNDEFINED),
        *_bounds("ci", s.ci_low if s else None, s.ci_high if s else None),
        ("ci_level", s.confidence if s else UNDEFINED),
        ("n_examples", outcome.n_selected),
        ("rollouts", outcome.rollouts),
        ("errors", len(outcome.errored)),
        ("truncated_rollouts", outcome.truncated_rollouts),
        ("threshold", threshold if threshold is not None else "none"),
        ("verdict", "pass" if verdict.passed else "fail"),
        # What failed the gate (gate.verdict's parts, comma-separated): "" when it passed.
        ("gate_failed", ",".join(verdict.failed_by)),
        ("eval_s", round(outcome.eval_s, 1)),  # the run's evaluation time (runs.times)
        ("run_dir", str(outcome.run_dir)),
        ("run_id", outcome.run_id),
        ("resumed_examples", outcome.resumed_examples),
        ("reused_answers", outcome.reused_answers),
        *example_statuses(outcome),
    ]
    props += seat_properties(outcome, threshold)
    serving = outcome.serving or {}
    for name in ("server_startup_s", "server_s", "gpu", "gpu_hours", "est_cost_usd"):
        if serving.get(name) is not None:
            props.append((name, serving[name]))
    if comparison is not None:
        props += [
            ("baseline_mean", _num(comparison.baseline_mean)),
            ("baseline_diff", _num(comparison.diff)),
            *_bounds(
                "baseline_diff_ci",
                comparison.diff_ci_low,
                comparison.diff_ci_high,
                -comparison.max_drop,
            ),
            ("baseline_diff_ci_level", comparison.confidence),
            ("baseline_max_drop", comparison.max_drop),
            ("baseline_p_value", _num(comparison.p_value)),
            ("baseline_test", comparison.test),
            ("baseline_shared_examples", comparison.n_shared),
            ("solved_to_missed", ",".join(comparison.solved_to_missed)),
            ("missed_to_solved", ",".join(comparison.missed_to_solved)),
            ("baseline_detectable_drop", _num(comparison.detectable_drop)),
        ]
    early = outcome.early_decision
    if early is not None:
        props += [
            ("early_stop", early.describe()),
            ("early_stop_verdict", "pass" if early.passed else "fail"),
            ("early_stop_after", early.after),
            ("early_stop_level", early.level),
        ]
        for name, (low, high) in early.intervals.items():
            props += _bounds(f"early_stop_{name}", low, high, early.thresholds.get(name))
    for p in outcome.pass_at_k:
        props += [(p.name, _num(p.mean)), (f"{p.name}_stderr", _num(p.stderr))]
    if reference is not None:
        c = reference.comparison
        props += [
            ("reference_model", reference.model),
            ("reference_mean", _num(c.baseline_mean)),
            ("reference_diff", _num(c.diff)),
            *_bounds("reference_diff_ci", c.diff_ci_low, c.diff_ci_high, -c.max_drop),
            ("reference_diff_ci_level", c.confidence),
            ("reference_p_value", _num(c.p_value)),
            ("reference_test", c.test),
            ("reference_shared_examples", c.n_shared),
            ("reference_solved_to_missed", ",".join(c.solved_to_missed)),
            ("reference_missed_to_solved", ",".join(c.missed_to_solved)),
            ("reference_detectable_drop", _num(c.detectable_drop)),
        ]
    if serving and not outcome.server_used:
        props.append((SERVER_RECORDED_PROPERTY, "true"))
    for warning in verdict.warnings:
        props.append((f"{PROPERTY_PREFIX}warning", warning))
    item.user_properties.extend(props)


#: The figures each seat of an environment with several seats has, as ``NAME[SEAT]``.
SEAT_FIGURES = ("avg_reward", "stderr", "ci_low", "ci_high", "threshold")


def seat_properties(outcome: RunOutcome, threshold: float | None) -> list[tuple[str, Any]]:
    """With several seats: ``seat`` (the headline seat, whose figures the plain properties
    are), ``seats`` (all, comma-separated) and each seat's figures as ``avg_reward[SEAT]``,
    ``stderr[SEAT]``, ``ci_low[SEAT]``, ``ci_high[SEAT]``, ``threshold[SEAT]`` (``none``
    where the gate does not apply to that seat)."""
    plan = outcome.seat_plan
    if not outcome.seats:
        return []
    gated = {plan.headline, *plan.gated()}
    props: list[tuple[str, Any]] = [("seat", plan.headline), ("seats", ",".join(outcome.seats))]
    for seat, figures in outcome.seats.items():
        s = figures.summary
        (_, low), (_, high) = _bounds("ci", s.ci_low if s else None, s.ci_high if s else None)
        values = (
            _num(s.mean) if s else UNDEFINED,
            _num(s.stderr) if s else UNDEFINED,
            low,
            high,
            threshold if threshold is not None and seat in gated else "none",
        )
        props += [
            (f"{name}[{seat}]", value) for name, value in zip(SEAT_FIGURES, values, strict=True)
        ]
    return props


#: How many missed example ids the ``missed_examples`` property lists before "and N more".
MISSED_IDS_SHOWN = 100


def example_statuses(outcome: RunOutcome) -> list[tuple[str, int | str]]:
    """How many examples were solved, partial, missed and errored, and which were missed.

    pytest's JUnit XML has one ``testcase`` per item: subtest reports of passed examples add no
    element of their own, so the statuses ``-v`` shows per example are summed up here, as
    properties of the benchmark's testcase. A miss is no ``failure`` or ``skipped`` element: it
    is a measurement, and only the gate's verdict fails the testcase.
    """
    rewards = outcome.per_example_rewards
    n_missed = n_solved = 0
    missed_ids: list[str] = []
    if len(rewards):
        missed = rewards.rewards.max(axis=1) <= 0.0
        n_missed, n_solved = int(missed.sum()), int((rewards.rewards.min(axis=1) >= 1.0).sum())
        missed_ids = [str(i) for i in rewards.ids[missed][: MISSED_IDS_SHOWN + 1].tolist()]
    shown = ",".join(missed_ids[:MISSED_IDS_SHOWN])
    if n_missed > MISSED_IDS_SHOWN:
        shown += f" and {n_missed - MISSED_IDS_SHOWN} more"
    return [
        ("examples_solved", n_solved),
        ("examples_partial", len(rewards) - n_solved - n_missed),
        ("examples_missed", n_missed),
        ("examples_errored", len(outcome.errored)),
        ("missed_examples", shown),
    ]


def _num(value: float) -> float | str:
    return round(value, 6) if math.isfinite(value) else UNDEFINED


def _bounds(
    name: str, low: float | None, high: float | None, threshold: float | None = None
) -> list[tuple[str, float | str]]:
    """``NAME_low`` and ``NAME_high``, rounded outward to 6 decimals and, with a
    ``threshold``, kept on its side (:func:`~pytest_modal_eval.stats.format.outward`)."""
    ends = outward_values(low, high, threshold=threshold)
    return [
        (f"{name}_{side}", UNDEFINED if end is None else end)
        for side, end in zip(("low", "high"), ends, strict=True)
    ]

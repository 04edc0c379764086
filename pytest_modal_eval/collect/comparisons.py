"""An item's comparisons: with its stored baseline (``--snapshot-update`` records one) and with
the session's reference model (the first ``--model``'s item of the same benchmark)."""

from __future__ import annotations

from typing import Any

from pytest_modal_eval.collect.context import EvalContext
from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.exceptions import BaselineError, EvalProblem
from pytest_modal_eval.gate.baseline import (
    Baseline,
    BaselineStatus,
    StoredBaseline,
    check_baseline,
)
from pytest_modal_eval.gate.reference import NoReference, ReferenceBoard
from pytest_modal_eval.gate.verdict import ReferenceComparison
from pytest_modal_eval.runs.outcome import RunOutcome
from pytest_modal_eval.stats.summary import PairedComparison, compare_paired


def is_reference(session: EvalContext, item: BenchmarkItem) -> bool:
    """The first model's item of a benchmark, when several models are compared."""
    return len(session.settings.models) > 1 and item.model == session.settings.models[0]


def reference_board(session: EvalContext) -> ReferenceBoard:
    assert session.references_dir is not None
    return ReferenceBoard(session.references_dir)


def results_of(item: BenchmarkItem, outcome: RunOutcome) -> Baseline | None:
    """The run's per-example means as a baseline record (what a baseline or a reference is)."""
    if not outcome.per_example_rewards:
        return None
    return Baseline.from_rewards(
        benchmark=item.benchmark.name,
        model=item.model or "",
        config_hash=outcome.baseline_hash,
        rewards=outcome.per_example_rewards,
    )


def baseline_comparison(
    item: BenchmarkItem,
    current: Baseline | None,
    snapshot: Any,
    stored_file: StoredBaseline,
) -> tuple[PairedComparison | None, str | None, bool]:
    """Record (--snapshot-update) or load the stored baseline and compare with it; the last
    value says whether a baseline was written."""
    if current is None:
        return None, None, False
    try:
        found = check_baseline(snapshot, current, stored_file, item.reference)
    except BaselineError as exc:
        raise EvalProblem(f"{item.benchmark.name}: {exc}") from None
    recorded = found.status in (BaselineStatus.RECORDED, BaselineStatus.UPDATED)
    if found.status is BaselineStatus.NOT_COMPARED and not reference_selected(item):
        return (
            None,
            (
                f"no baseline recorded: {stored_file.shown} is recorded from the reference model "
                f"{item.reference} only, which this session does not evaluate (deselected); "
                "select its item too (e.g. drop the -k that excludes it)"
            ),
            False,
        )
    if not found.comparable or found.stored is None:
        return None, found.message, recorded
    stored, gate = found.stored, item.benchmark.config.gate
    comparison = compare_paired(
        stored.per_example,
        current.per_example,
        baseline_binary_single=stored.binary_single,
        run_binary_single=current.binary_single,
        alpha=gate.alpha,
        max_drop=gate.max_drop,
    )
    return comparison, None, recorded


def reference_selected(item: BenchmarkItem) -> bool:
    """Whether the session evaluates the item of this item's reference model."""
    nodeid = item.reference_nodeid
    return nodeid is not None and nodeid in {other.nodeid for other in item.session.items}


def reference_comparison(
    session: EvalContext, item: BenchmarkItem, current: Baseline | None
) -> tuple[ReferenceComparison | None, str | None]:
    """Compare with the reference model's results of this session (see gate/reference.py)."""
    if item.reference is None or item.reference_nodeid is None or current is None:
        return None, None
    model, nodeid = item.reference, item.reference_nodeid
    if not reference_selected(item):
        return None, (
            f"the reference model {model} was not evaluated in this session (deselected): "
            "no comparison"
        )
    # Under xdist the reference may be running on another worker: wait for it. In one process
    # it ran before this item (collection order), unless a plugin reordered the items.
    found = reference_board(session).read(nodeid, wait=hasattr(session.config, "workerinput"))
    if found is None:
        return None, f"the reference model {model} had not been evaluated yet: no comparison"
    if isinstance(found, NoReference):
        return None, f"no results of the reference model {model} ({found.reason}): no comparison"
    # No configuration check: both items come from the same YAML and overrides in this session,
    # so what can differ is each model's own (its chat template, its weights), which is what is
    # being compared.
    gate = item.benchmark.config.gate.vs_reference
    results = found.results
    comparison = compare_paired(
        results.per_example,
        current.per_example,
        baseline_binary_single=results.binary_single,
        run_binary_single=current.binary_single,
        alpha=gate.alpha if gate else 0.05,
        max_drop=gate.max_drop if gate else 0.0,
    )
    return ReferenceComparison(model, comparison, found.run_dir, found.run_id), None

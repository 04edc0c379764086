"""Which paired comparisons ``gate.early_stop`` decides with the gate, found before the run.

A stored baseline's per-example means are known before the run (its file); a reference
model's only once its item has finished in this session. A comparison whose other side is not
known yet, or whose every example is needed (recording a baseline, being the reference the
session's other models are compared with), keeps the run going to the end: that is the
reason returned. A reference comparison gates the run only with ``gate.vs_reference``; without
it the comparison is shown, over the examples evaluated, and decides nothing.
"""

from __future__ import annotations

from pytest_modal_eval.collect.comparisons import is_reference
from pytest_modal_eval.collect.context import EvalContext
from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.gate.baseline import StoredBaseline
from pytest_modal_eval.gate.reference import ReferenceBoard, ReferenceResults
from pytest_modal_eval.runs.early_stop import BASELINE, REFERENCE, PairedGate


def early_comparisons(
    session: EvalContext, item: BenchmarkItem, stored: StoredBaseline
) -> tuple[tuple[PairedGate, ...], str | None]:
    """The comparisons to decide early, and why one is open that cannot be (or None)."""
    if getattr(session.config.option, "update_snapshots", False):
        return (), "--snapshot-update records a baseline, which needs every example"
    if is_reference(session, item):
        return (), "the session's other models are compared with this one"
    gate = item.benchmark.config.gate
    gates: list[PairedGate] = []
    if stored.exists:
        baseline = stored.baseline
        if baseline is None:  # the item fails on it after the run; nothing to decide early
            return (), f"the stored baseline {stored.shown} could not be read"
        if baseline.benchmark == item.benchmark.name:  # else it is not compared with
            gates.append(
                PairedGate(
                    BASELINE,
                    f"the stored baseline {stored.shown}",
                    baseline.per_example,
                    gate.max_drop,
                    gate.alpha,
                    "gate.max_drop",
                    config_hash=baseline.config_hash,
                )
            )
    vs = gate.vs_reference
    nodeid = item.reference_nodeid
    if item.reference is not None and nodeid is not None and vs is not None:
        selected = nodeid in {other.nodeid for other in item.session.items}
        found = (
            ReferenceBoard(session.references_dir).read(nodeid, wait=False)
            if selected and session.references_dir is not None
            else None
        )
        if isinstance(found, ReferenceResults):
            gates.append(
                PairedGate(
                    REFERENCE,
                    f"the reference model {item.reference}",
                    found.results.per_example,
                    vs.max_drop,
                    vs.alpha,
                    "gate.vs_reference.max_drop",
                )
            )
        elif found is None and selected:
            return (), (
                f"a comparison with the reference model {item.reference} is open: its run has "
                "not finished in this session"
            )
        # Deselected or without results: no comparison is made (the gate fails without it).
    return tuple(gates), None

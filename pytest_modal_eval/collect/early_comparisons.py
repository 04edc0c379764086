"""Which paired comparisons ``gate.early_stop`` decides with the gate, found before the run.

A stored baseline's per-example means are known before the run (its file); a reference
model's only once its item has finished in this session. A reference still running (under
xdist, on another worker) is waited for while the run goes on: the run's sequences look for its
results as examples finish and take them up when they are there (a
:class:`~pytest_modal_eval.runs.early_stop.PendingPaired`). A comparison whose every example is
needed (recording a baseline, being the reference the session's other models are compared
with) keeps the run going to the end: that is the reason returned. A reference comparison
gates the run only with ``gate.vs_reference``; without it the comparison is shown, over the
examples evaluated, and decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_modal_eval.collect.comparisons import is_reference
from pytest_modal_eval.collect.context import EvalContext
from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.gate.baseline import StoredBaseline
from pytest_modal_eval.gate.reference import ReferenceBoard, ReferenceResults
from pytest_modal_eval.runs.early_stop import BASELINE, REFERENCE, PairedGate, PendingPaired


def early_comparisons(
    session: EvalContext, item: BenchmarkItem, stored: StoredBaseline
) -> tuple[tuple[PairedGate | PendingPaired, ...], str | None]:
    """The comparisons to decide early, and why one is open that cannot be (or None)."""
    if getattr(session.config.option, "update_snapshots", False):
        return (), "--snapshot-update records a baseline, which needs every example"
    if is_reference(session, item):
        return (), "the session's other models are compared with this one"
    gate = item.benchmark.config.gate
    gates: list[PairedGate | PendingPaired] = []
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
        board = ReferenceBoard(session.references_dir) if session.references_dir else None
        found = board.read(nodeid, wait=False) if selected and board is not None else None
        label = f"the reference model {item.reference}"
        if isinstance(found, ReferenceResults):
            gates.append(
                PairedGate(
                    REFERENCE,
                    label,
                    found.results.per_example,
                    vs.max_drop,
                    vs.alpha,
                    "gate.vs_reference.max_drop",
                )
            )
        elif found is None and selected and board is not None:
            gates.append(
                PendingPaired(
                    REFERENCE,
                    label,
                    vs.max_drop,
                    vs.alpha,
                    "gate.vs_reference.max_drop",
                    poll=lambda: _reference_means(board, nodeid),
                    waiting=(
                        f"a comparison with {label} stayed open: its run had not finished "
                        "in this session"
                    ),
                )
            )
        # Deselected or without results: no comparison is made (the gate fails without it).
    return tuple(gates), None


def _reference_means(board: ReferenceBoard, nodeid: str) -> Mapping[str, float] | str | None:
    """The reference item's per-example means once it has left them; why it has none; or None
    while it is still running."""
    try:
        found = board.read(nodeid, wait=False)
    except (OSError, ValueError) as exc:
        return f"the reference's results could not be read ({exc})"
    if isinstance(found, ReferenceResults):
        return found.results.per_example
    return found.reason if found is not None else None

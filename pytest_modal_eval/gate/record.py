"""The gate's verdict in the run's ``metadata.json``, where every command and the report read it."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_modal_eval.exceptions import RecordingError, RunFileError
from pytest_modal_eval.gate.verdict import ReferenceComparison, Verdict
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.store import write_json_atomic


def record_verdict(
    run_dir: Path, verdict: Verdict, reference: ReferenceComparison | None = None
) -> None:
    """The gate's verdict in the run's ``metadata.json`` (what ``runs``, ``show``, the report
    and ``pytest_modal_eval_finished`` hooks read): the one of the latest session that judged
    the run, with the threshold it applied (``threshold``, gate.min_avg_reward) and the parts
    of the gate that failed it (``gate_failed``: threshold, metrics, errors, baseline,
    vs_reference); with its
    comparison with the reference model (``vs_reference``) when it made one. A file that
    cannot be written leaves a warning, not an error."""
    paths = RunPaths(run_dir)
    try:
        metadata = paths.read_metadata()
        if metadata is None:  # not finished (an aborted run has no metadata.json)
            return
        metadata["verdict"] = "pass" if verdict.passed else "fail"
        metadata["gate_reasons"] = list(verdict.reasons)
        metadata["gate_failed"] = list(verdict.failed_by)
        metadata["threshold"] = verdict.threshold
        if reference is not None:
            figures = reference.to_dict()
            if figures["reference_run_dir"] is not None:
                # Relative to this run: it holds when the output directory is moved or
                # shared, and names no directory of this machine.
                figures["reference_run_dir"] = os.path.relpath(
                    figures["reference_run_dir"], run_dir
                )
            metadata["vs_reference"] = figures
        write_json_atomic(paths.metadata, metadata)
    except (OSError, RecordingError, RunFileError) as exc:
        # A read-only copy of a finished run: the verdict stands regardless.
        verdict.warnings.append(f"the verdict could not be recorded in {paths.metadata}: {exc}")

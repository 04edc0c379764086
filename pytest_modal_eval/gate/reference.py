"""A benchmark's reference results, handed from the first model's item to the other models'.

With several ``--model``, each benchmark has one item per model and every model is compared
with the first (the reference) on the examples both scored. The reference item leaves its
per-example means -- a :class:`~pytest_modal_eval.gate.baseline.Baseline`, the same record a
stored baseline is -- as a file in a directory of the session; a challenger item reads it.
Files rather than memory because under xdist the two items may run on different workers; the
controller names the directory and hands it to its workers.

Without xdist the reference item runs first (items are collected in ``--model`` order), so its
file is there when a challenger looks. Under xdist a challenger waits for it: the reference
item always leaves a file, its results or why there are none, when it finishes or fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_modal_eval.exceptions import BaselineError
from pytest_modal_eval.gate.baseline import Baseline

#: Seconds between looks for the reference's file while waiting for it.
POLL_INTERVAL_S = 0.25


@dataclass(frozen=True)
class ReferenceResults:
    """The reference item's per-example means and the run directory they come from."""

    results: Baseline
    run_dir: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class NoReference:
    """Why there is nothing to compare with."""

    reason: str


class ReferenceBoard:
    """The session's reference results, one file per reference item."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, nodeid: str) -> Path:
        return self.directory / f"{hashlib.sha256(nodeid.encode()).hexdigest()[:24]}.json"

    def _run_path(self, nodeid: str) -> Path:
        return self._path(nodeid).with_suffix(".run.json")

    def post(self, nodeid: str, results: Baseline, run_dir: Path, run_id: str) -> None:
        """Leave the reference item's results (written whole, then renamed into place); the
        run they come from first, so that it is there when a reader sees the results."""
        self._write(self._run_path(nodeid), json.dumps({"run_dir": str(run_dir), "run_id": run_id}))
        self._write(self._path(nodeid), results.to_json())

    def post_failure(self, nodeid: str, reason: str) -> None:
        """Say the reference item has no results, unless it already left them."""
        if not self._path(nodeid).exists():
            self._write(self._path(nodeid), json.dumps({"no_results": reason}) + "\n")

    def _write(self, path: Path, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)

    def read(self, nodeid: str, *, wait: bool) -> ReferenceResults | NoReference | None:
        """The reference's results, why it has none, or None when it has not finished (after
        waiting for it when ``wait``)."""
        path = self._path(nodeid)
        while not path.exists():
            if not wait:
                return None
            time.sleep(POLL_INTERVAL_S)
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
        if isinstance(data, dict) and "no_results" in data:
            return NoReference(str(data["no_results"]))
        try:
            results = Baseline.from_dict(data, source=f"results of {nodeid}")
        except BaselineError as exc:
            return NoReference(str(exc))
        try:
            run = json.loads(self._run_path(nodeid).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            run = {}
        return ReferenceResults(results, run.get("run_dir"), run.get("run_id"))

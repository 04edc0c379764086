"""A benchmark's reference results, handed from the first model's item to the other models'.

With several ``--model``, each benchmark has one item per model and every model is compared
with the first (the reference) on the examples both scored. The reference item leaves its
per-example means -- a :class:`~pytest_modal_eval.judge.baseline.Baseline`, the same record a
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
from pytest_modal_eval.judge.baseline import Baseline

#: Seconds between looks for the reference's file while waiting for it.
POLL_INTERVAL_S = 0.25


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

    def post(self, nodeid: str, results: Baseline) -> None:
        """Leave the reference item's results (written whole, then renamed into place)."""
        self._write(nodeid, results.to_json())

    def post_failure(self, nodeid: str, reason: str) -> None:
        """Say the reference item has no results, unless it already left them."""
        if not self._path(nodeid).exists():
            self._write(nodeid, json.dumps({"no_results": reason}) + "\n")

    def _write(self, nodeid: str, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(nodeid)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)

    def read(self, nodeid: str, *, wait: bool) -> Baseline | NoReference | None:
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
            return Baseline.from_dict(data, source=f"results of {nodeid}")
        except BaselineError as exc:
            return NoReference(str(exc))

"""The layout of the output directory: where each run's files are, and what "complete" means.

``{output}/{benchmark}--{model slug}/{run_id}/`` holds one run:

- ``run_config.json``: the resolved configuration and answer key, written when the run starts;
  a directory without it is not a run.
- ``checkpoint.jsonl`` / ``checkpoint_meta.json``: finished and errored rollouts, appended as
  they complete (what resume reads), and the run's progress in a few bytes.
- ``answers.journal``: answers received for examples not finished yet.
- ``results.jsonl`` / ``metadata.json``: the final files, written when every selected example
  has an outcome; ``metadata.json`` is written last.
- ``logs/``: the run's own logs and links to its server's.

This module is the single definition of those names and of the run states; everything that
reads or writes a run directory goes through :class:`RunPaths`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

RUN_CONFIG = "run_config.json"
CHECKPOINT = "checkpoint.jsonl"
CHECKPOINT_META = "checkpoint_meta.json"
ANSWERS = "answers.journal"
RESULTS = "results.jsonl"
METADATA = "metadata.json"
LOGS = "logs"


class RunStatus(StrEnum):
    """Where a run stands, read from its files."""

    COMPLETE = "complete"  # every selected example finished, none errored
    WITH_ERRORS = "with errors"  # every selected example has an outcome; some errored
    INCOMPLETE = "incomplete"  # started, not finished (interrupted, or still running)


@dataclass(frozen=True)
class RunPaths:
    """One run directory and its files."""

    dir: Path

    @property
    def run_id(self) -> str:
        return self.dir.name

    @property
    def run_config(self) -> Path:
        return self.dir / RUN_CONFIG

    @property
    def checkpoint(self) -> Path:
        return self.dir / CHECKPOINT

    @property
    def checkpoint_meta(self) -> Path:
        return self.dir / CHECKPOINT_META

    @property
    def answers(self) -> Path:
        return self.dir / ANSWERS

    @property
    def results(self) -> Path:
        return self.dir / RESULTS

    @property
    def metadata(self) -> Path:
        return self.dir / METADATA

    @property
    def logs(self) -> Path:
        return self.dir / LOGS

    def is_run(self) -> bool:
        return self.run_config.is_file()

    def finished(self) -> bool:
        """Every selected example has an outcome: the final files were written."""
        return self.metadata.is_file()

    def read_metadata(self) -> dict[str, Any] | None:
        """``metadata.json``, or None while the run is not finished (or the file is unreadable)."""
        return _read_json(self.metadata)

    def read_run_config(self) -> dict[str, Any] | None:
        return _read_json(self.run_config)

    def status(self) -> RunStatus:
        metadata = self.read_metadata()
        if metadata is None:
            return RunStatus.INCOMPLETE
        return RunStatus.WITH_ERRORS if metadata.get("errors") else RunStatus.COMPLETE

    def complete(self) -> bool:
        """Finished with no errored example: the one meaning of "complete"."""
        return self.status() is RunStatus.COMPLETE


def benchmark_dir(output_dir: Path, benchmark: str, model_slug: str) -> Path:
    """The directory holding every run of one benchmark with one model."""
    return output_dir / f"{benchmark}--{model_slug}"


def iter_runs(output_dir: Path) -> Iterator[RunPaths]:
    """Every run directory under ``output_dir`` (one with ``run_config.json``), sorted by path."""
    if not output_dir.is_dir():
        return
    for config_path in sorted(output_dir.glob(f"*/*/{RUN_CONFIG}")):
        yield RunPaths(config_path.parent)


def runs_in(benchmark_dir: Path) -> Iterator[RunPaths]:
    """The runs of one benchmark and model (see :func:`benchmark_dir`), sorted by path."""
    if not benchmark_dir.is_dir():
        return
    for config_path in sorted(benchmark_dir.glob(f"*/{RUN_CONFIG}")):
        yield RunPaths(config_path.parent)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None

"""The layout of the output directory: where each run's files are, and what "complete" means.

``{output}/{benchmark}--{model slug}/{run_id}/`` holds one run:

- ``run_config.json``: the resolved configuration and answer key, written when the run starts;
  a directory without it is not a run.
- ``checkpoint.jsonl`` / ``checkpoint_meta.json``: finished and errored rollouts, appended as
  they complete (what resume reads), and the run's progress in a few bytes.
- ``answers.journal``: answers received for examples not finished yet.
- ``results.jsonl`` / ``metadata.json``: the final files, written when every selected example
  has an outcome; ``metadata.json`` is written last. A session that evaluates more of the run
  removes them first (:meth:`RunPaths.discard_final_files`), so a run is finished exactly when
  its last session ended.
- ``logs/``: the run's own logs and links to its server's.

This module is the single definition of those names and of the run states; everything that
reads or writes a run directory goes through :class:`RunPaths`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
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

    def discard_final_files(self) -> None:
        """Remove ``metadata.json``, then ``results.jsonl``: a session is about to evaluate
        more of the run, which makes them stale (a resumed session that is killed must read as
        incomplete, not as the outcome of the session that wrote them). Nothing finished is
        lost: both are made from the checkpoint again when the session ends. ``metadata.json``
        goes first, so a crash in between leaves a run that reads as unfinished."""
        self.metadata.unlink(missing_ok=True)
        self.results.unlink(missing_ok=True)

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

    def read_checkpoint_meta(self) -> dict[str, Any] | None:
        """``checkpoint_meta.json``: the run's progress (replaced atomically while it runs)."""
        return _read_json(self.checkpoint_meta)

    def records(self) -> Iterator[dict[str, Any]]:
        """The run's rollout records: ``results.jsonl`` once finished, else the checkpoint
        (lines a kill tore are skipped)."""
        source = self.results if self.finished() and self.results.is_file() else self.checkpoint
        try:
            handle = source.open("rb")
        except OSError:
            return
        with handle:
            for raw in handle:
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict) and "example_id" in record:
                    yield record


@dataclass(frozen=True)
class RunListing:
    """One run as ``pytest-modal-eval runs`` lists it, read from its small files only
    (run_config.json, checkpoint_meta.json, metadata.json), never the checkpoint or results."""

    paths: RunPaths
    status: RunStatus
    benchmark: str
    model: str
    done: int | None  # finished examples, when known
    total: int | None  # selected examples
    errors: int
    avg_reward: float | None
    stderr: float | None
    ci: tuple[float | None, float | None] | None
    verdict: str | None
    started_at: datetime | None
    duration_s: float | None

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @property
    def state_text(self) -> str:
        if self.status is RunStatus.INCOMPLETE:
            done = "?" if self.done is None else str(self.done)
            return f"incomplete {done} of {self.total if self.total is not None else '?'}"
        if self.status is RunStatus.WITH_ERRORS:
            return f"with errors ({self.errors})"
        return str(self.status)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "dir": str(self.paths.dir),
            "benchmark": self.benchmark,
            "model": self.model,
            "state": str(self.status),
            "done": self.done,
            "total": self.total,
            "errors": self.errors,
            "avg_reward": self.avg_reward,
            "stderr": self.stderr,
            "ci": list(self.ci) if self.ci else None,
            "verdict": self.verdict,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "duration_s": self.duration_s,
        }


def read_listing(paths: RunPaths) -> RunListing:
    config = paths.read_run_config() or {}
    metadata = paths.read_metadata()
    status = RunStatus.INCOMPLETE
    if metadata is not None:
        status = RunStatus.WITH_ERRORS if metadata.get("errors") else RunStatus.COMPLETE
    meta = paths.read_checkpoint_meta() or {} if metadata is None else {}
    started = parse_time(config.get("started_at")) or parse_time(meta.get("start_time"))
    total = _int(config.get("num_examples"))
    if metadata is not None:
        done = _int(metadata.get("n_evaluated"))
        total = _int(metadata.get("num_examples")) or total
        seconds = metadata.get("time_ms")
        duration = float(seconds) / 1000 if isinstance(seconds, (int, float)) else None
    else:
        ids = meta.get("completed_example_ids")
        done = len(ids) if isinstance(ids, list) else None
        total = _int(meta.get("total_examples")) or total
        last = parse_time(meta.get("last_checkpoint_time"))
        duration = (last - started).total_seconds() if last and started else None
    data = metadata or {}
    ci = data.get("ci")
    verdict = data.get("verdict")
    return RunListing(
        paths=paths,
        status=status,
        benchmark=str(config.get("benchmark") or data.get("benchmark") or "?"),
        model=str(config.get("model_id") or data.get("model") or meta.get("model") or "?"),
        done=done,
        total=total,
        errors=_int(data.get("errors")) or 0,
        avg_reward=_float(data.get("avg_reward")),
        stderr=_float(data.get("stderr")),
        ci=(_float(ci[0]), _float(ci[1])) if isinstance(ci, list) and len(ci) == 2 else None,
        verdict=str(verdict) if verdict is not None else None,
        started_at=started,
        duration_s=duration,
    )


def list_runs(
    output_dir: Path,
    *,
    benchmark: str | None = None,
    model: str | None = None,
    limit: int | None = None,
) -> list[RunListing]:
    """Runs under ``output_dir``, newest first (run ids start with their UTC start time)."""
    found = []
    for paths in sorted(iter_runs(output_dir), key=lambda p: p.run_id, reverse=True):
        listing = read_listing(paths)
        if benchmark is not None and listing.benchmark != benchmark:
            continue
        if model is not None and listing.model != model:
            continue
        found.append(listing)
        if limit is not None and len(found) >= limit:
            break
    return found


def find_run(run: str, output_dir: Path) -> RunPaths | None:
    """A run named by its directory, or by its id (or a unique prefix of it) in ``output_dir``."""
    given = Path(run).expanduser()
    if given.is_dir() and RunPaths(given).is_run():
        return RunPaths(given.resolve())
    matches = [p for p in iter_runs(output_dir) if p.run_id == run] or [
        p for p in iter_runs(output_dir) if p.run_id.startswith(run)
    ]
    return matches[0] if len(matches) == 1 else None


def parse_time(text: object) -> datetime | None:
    """An ISO time as the run files write it (UTC when it names no zone); None if it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


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

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
- ``writer.lock`` / ``writer.json``: the lock held by the process evaluating the run, and who
  that is (see :mod:`pytest_modal_eval.runs.writer_lock`).

Beside the runs of one benchmark and model, ``choosing.lock`` is held while a process picks
which of them it continues.

This module is the single definition of those names and of the run states; everything that
reads or writes a run directory goes through :class:`RunPaths`, which reads the files through
:mod:`~pytest_modal_eval.runs.reader` (a damaged file is a
:class:`~pytest_modal_eval.exceptions.RunFileError`). Finding runs is
:mod:`~pytest_modal_eval.runs.locate`'s.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.model_names import earlier_model_slugs, model_slug
from pytest_modal_eval.redact import REDACTED
from pytest_modal_eval.runs import reader

RUN_CONFIG = "run_config.json"
CHECKPOINT = "checkpoint.jsonl"
CHECKPOINT_META = "checkpoint_meta.json"
ANSWERS = "answers.journal"
RESULTS = "results.jsonl"
METADATA = "metadata.json"
LOGS = "logs"
WRITER_LOCK = "writer.lock"
WRITER = "writer.json"
CHOOSING_LOCK = "choosing.lock"


class RunStatus(StrEnum):
    """Where a run stands, read from its files."""

    COMPLETE = "complete"  # every selected example finished, none errored
    WITH_ERRORS = "with errors"  # every selected example has an outcome; some errored
    INCOMPLETE = "incomplete"  # started, not finished (interrupted, or still running)
    # gate.early_stop decided the gate on a random subset; a run without it sends the rest
    STOPPED_EARLY = "stopped early"


def status_of(metadata: dict[str, Any] | None) -> RunStatus:
    """A run's status from its ``metadata.json`` (None: not written, so not finished)."""
    if metadata is None:
        return RunStatus.INCOMPLETE
    if isinstance(early := metadata.get("early_stop"), dict) and early.get("decided"):
        return RunStatus.STOPPED_EARLY
    return RunStatus.WITH_ERRORS if metadata.get("errors") else RunStatus.COMPLETE


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

    @property
    def writer_lock(self) -> Path:
        return self.dir / WRITER_LOCK

    @property
    def writer(self) -> Path:
        return self.dir / WRITER

    def is_run(self) -> bool:
        return self.run_config.is_file()

    def finished(self) -> bool:
        """Every selected example has an outcome: the final files were written. (Anything named
        ``metadata.json`` counts, so a damaged one is read, and reported, not passed over.)"""
        return os.path.lexists(self.metadata)

    def discard_final_files(self) -> None:
        """Remove ``metadata.json``, then ``results.jsonl``: a session is about to evaluate
        more of the run, which makes them stale (a resumed session that is killed must read as
        incomplete, not as the outcome of the session that wrote them). Nothing finished is
        lost: both are made from the checkpoint again when the session ends. ``metadata.json``
        goes first, so a crash in between leaves a run that reads as unfinished."""
        self.metadata.unlink(missing_ok=True)
        self.results.unlink(missing_ok=True)

    def read_metadata(self) -> dict[str, Any] | None:
        """``metadata.json``, or None while the run is not finished; RunFileError if damaged."""
        return reader.read_metadata(self.metadata)

    def read_run_config(self) -> dict[str, Any] | None:
        """``run_config.json`` (None if missing); RunFileError if damaged."""
        return reader.read_run_config(self.run_config)

    def status(self) -> RunStatus:
        return status_of(self.read_metadata())

    def complete(self) -> bool:
        """Finished with no errored example: the one meaning of "complete". A damaged
        ``metadata.json`` is not complete: the next session evaluates the run and rewrites it."""
        try:
            return self.status() is RunStatus.COMPLETE
        except RunFileError:
            return False

    def read_checkpoint_meta(self) -> dict[str, Any] | None:
        """``checkpoint_meta.json``: the run's progress (replaced atomically while it runs)."""
        return reader.read_checkpoint_meta(self.checkpoint_meta)

    def records_source(self) -> Path:
        """Where the run's records are: ``results.jsonl`` once finished, else the checkpoint."""
        return self.results if self.finished() else self.checkpoint

    def records(self) -> Iterator[dict[str, Any]]:
        """The run's rollout records, checked (:func:`~.reader.iter_records`): ``results.jsonl``
        once finished, else the checkpoint, whose torn last line (a killed run) is left out:
        :meth:`torn_checkpoint` tells whether there is one."""
        if self.finished():
            if not os.path.lexists(self.results):
                raise RunFileError(
                    f"{self.results}: missing although {METADATA} is there; {reader.FIX}"
                )
            for _, record in reader.iter_records(self.results):
                yield record
            return
        for _, record in reader.iter_records(
            self.checkpoint, torn_tail=True, fix=reader.CHECKPOINT_FIX
        ):
            yield record

    def torn_checkpoint(self) -> bool:
        """The checkpoint ends in a torn line: the run was killed while writing it."""
        return not self.finished() and reader.has_torn_tail(self.checkpoint)


@dataclass(frozen=True)
class RunListing:
    """One run as ``pytest-modal-eval runs`` lists it, read from its small files only
    (run_config.json, checkpoint_meta.json, metadata.json), never the checkpoint or results."""

    paths: RunPaths
    status: RunStatus
    benchmark: str
    model: str
    model_slug: str | None
    done: int | None  # finished examples, when known
    total: int | None  # selected examples
    errors: int
    avg_reward: float | None
    stderr: float | None
    ci: tuple[float | None, float | None] | None
    verdict: str | None
    started_at: datetime | None
    eval_s: float | None  # evaluation time, all sessions (see runs.times)
    server_s: float | None  # server time (start-up included), when a server was used

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
        if self.status is RunStatus.STOPPED_EARLY:
            done = "?" if self.done is None else f"{self.done:,}"
            total = "?" if self.total is None else f"{self.total:,}"
            return f"stopped early {done} of {total}"
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
            "eval_s": self.eval_s,
            "server_s": self.server_s,
        }


def read_listing(paths: RunPaths) -> RunListing:
    config = paths.read_run_config() or {}
    metadata = paths.read_metadata()
    status = status_of(metadata)
    meta = paths.read_checkpoint_meta() or {} if metadata is None else {}
    started = parse_time(config.get("started_at")) or parse_time(meta.get("start_time"))
    total = _int(config.get("num_examples"))
    if metadata is not None:
        done = _int(metadata.get("n_evaluated"))
        total = _int(metadata.get("num_examples")) or total
        seconds = metadata.get("time_ms")
        eval_s = float(seconds) / 1000 if isinstance(seconds, (int, float)) else None
        server_s = _float((metadata.get("serving") or {}).get("server_s"))
    else:
        ids = meta.get("completed_example_ids")
        done = len(ids) if isinstance(ids, list) else None
        total = _int(meta.get("total_examples")) or total
        eval_s, server_s = _float(meta.get("eval_s")), _float(meta.get("server_s")) or None
    data = metadata or {}
    ci = data.get("ci")
    verdict = data.get("verdict")
    return RunListing(
        paths=paths,
        status=status,
        benchmark=str(config.get("benchmark") or data.get("benchmark") or "?"),
        model=str(config.get("model_id") or data.get("model") or meta.get("model") or "?"),
        model_slug=config.get("model_slug"),
        done=done,
        total=total,
        errors=_int(data.get("errors")) or 0,
        avg_reward=_float(data.get("avg_reward")),
        stderr=_float(data.get("stderr")),
        ci=(_float(ci[0]), _float(ci[1])) if isinstance(ci, list) and len(ci) == 2 else None,
        verdict=str(verdict) if verdict is not None else None,
        started_at=started,
        eval_s=eval_s,
        server_s=server_s,
    )


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


def reported_run_dir(shown: str) -> Path:
    """The run directory a benchmark's report names (its ``run_dir`` user property), which
    the session's redactor rewrote when a secret is a part of the path (the model's name, a
    word of the output directory's): each ``[redacted]`` stands for any text of one path
    part, and the one existing directory that fits is the run's (else ``shown`` as it is)."""
    path = Path(shown)
    if REDACTED not in shown or path.is_dir():
        return path
    pattern = "*".join(glob.escape(part) for part in shown.split(REDACTED))
    found = [Path(match) for match in glob.glob(pattern) if os.path.isdir(match)]
    return found[0] if len(found) == 1 else path


def benchmark_dir(output_dir: Path, benchmark: str, slug: str) -> Path:
    """The directory holding every run of one benchmark with one model (``slug``: the model's
    ``model_names.model_slug``)."""
    return output_dir / f"{benchmark}--{slug}"


def model_run_dir(output_dir: Path, benchmark: str, model: str) -> tuple[str, Path]:
    """The slug and directory holding a benchmark's runs with ``model``: the slug's, unless
    only an earlier spelling's directory exists (``earlier_model_slugs``: its runs stay
    resumable)."""
    slug = model_slug(model)
    found = benchmark_dir(output_dir, benchmark, slug)
    if not found.exists():
        for earlier in earlier_model_slugs(model):
            old = benchmark_dir(output_dir, benchmark, earlier)
            if old.is_dir():
                return earlier, old
    return slug, found


def choosing_lock(benchmark_dir: Path) -> Path:
    """The lock held while a process picks which run of ``benchmark_dir`` it continues."""
    return benchmark_dir / CHOOSING_LOCK

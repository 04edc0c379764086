"""A run directory on disk: the checkpoint that makes resume possible, and the final files.

Layout: ``{output}/{benchmark}--{org}--{model}/{run_id}/`` with ``run_config.json``,
``checkpoint.jsonl`` (one line per rollout, appended and flushed as each example finishes),
``checkpoint_meta.json`` (replaced atomically), ``results.jsonl`` and ``metadata.json``
(written at the end from the checkpoint), and ``logs/``.

The checkpoint is the source of truth. A rollout is *finished* when it has a record with
no error; errored records are kept (for the report) but retried by the next run.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import time
import warnings
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy as np

from pytest_modal_eval.exceptions import RecordingError, RunFileError
from pytest_modal_eval.runs import reader
from pytest_modal_eval.runs.paths import RunPaths

CHECKPOINT_VERSION = 1
META_MIN_INTERVAL_S = 1.0


def new_run_id() -> str:
    """``YYYYMMDD-HHMMSS-mmmxxxxx``: the UTC start time to the millisecond, then five random
    hex digits. Sorting run ids sorts runs by start time, also runs started within one second
    (a session that only reuses finished runs takes a few milliseconds): the newest run, which
    baselines and ``show`` pick, is the last one."""
    now = datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{now.microsecond // 1000:03d}{secrets.token_hex(3)[:5]}"


def json_default(value: Any) -> Any:
    """Serialise what verifiers hands back (pydantic messages, paths, sets)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    return repr(value)


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, ±inf) replaced by None: JSON has no
    such numbers, and a file holding them is not JSON to any other reader."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, *, indent: int | None = None, ensure_ascii: bool = False) -> str:
    """JSON as every run file is written: strict (a number that is not finite is written as
    null, never as ``NaN``), UTF-8 text as is, and a lone surrogate (which a server's JSON can
    carry, and UTF-8 cannot encode) as a ``\\uXXXX`` escape, so any text round-trips."""
    try:
        text = json.dumps(
            value, default=json_default, ensure_ascii=ensure_ascii, indent=indent, allow_nan=False
        )
    except ValueError:
        text = json.dumps(
            finite(json.loads(json.dumps(value, default=json_default))),
            ensure_ascii=ensure_ascii,
            indent=indent,
            allow_nan=False,
        )
    if not ensure_ascii:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return dumps(value, indent=indent, ensure_ascii=True)
    return text


#: What to do when a run file cannot be written, by the reason.
_WRITE_FIXES = {
    errno.ENOSPC: "free disk space there (or point --eval-output-dir at another disk)",
    errno.EDQUOT: "free space within your disk quota (or point --eval-output-dir elsewhere)",
    errno.EFBIG: "raise the file-size limit (ulimit -f) or point --eval-output-dir elsewhere",
    errno.EACCES: "make the directory writable (or point --eval-output-dir elsewhere)",
    errno.EPERM: "make the directory writable (or point --eval-output-dir elsewhere)",
    errno.EROFS: "the disk is read-only: point --eval-output-dir at a writable one",
}
#: What a recording error adds: nothing finished is lost.
KEPT = "then run the same command again: finished examples are kept in the checkpoint"


def recording_error(path: Path, exc: OSError, then: str = KEPT) -> RecordingError:
    """One line for a run file that could not be written: the path, the reason, the fix."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    fix = _WRITE_FIXES.get(exc.errno or 0, "fix the cause")
    return RecordingError(f"could not write {path}: {reason}; {fix}, {then}")


@contextlib.contextmanager
def recording(path: Path, then: str = KEPT) -> Iterator[None]:
    """An OSError in the block becomes a :class:`RecordingError` naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise recording_error(path, exc, then) from None


@contextlib.contextmanager
def replaced_atomically(path: Path, then: str = KEPT, *, binary: bool = False) -> Iterator[IO[Any]]:
    """A text (or ``binary``) file that replaces ``path`` when the block ends: written to a
    temporary file of its own in the same directory (a unique name: concurrent writers never
    share one) and renamed, so a reader (or a crash) never sees half a file. On any failure the
    temporary file is removed and an OSError is a :class:`RecordingError` naming ``path``."""
    with recording(path, then):
        fd, tmp = _new_temporary(path)
        try:
            with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as out:
                yield out
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _new_temporary(path: Path) -> tuple[int, Path]:
    """A new file beside ``path`` with a unique name, open for writing. Created with mode 0o666
    less the umask, as ``open`` creates a file (``mkstemp``'s 0o600 would make every file written
    this way private, unlike the run's other files and the report's readers' expectations)."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def write_json_atomic(path: Path, value: Any) -> None:
    """Indented JSON, written and renamed so a reader (or a crash) never sees half a file."""
    text = dumps(value, indent=2, ensure_ascii=True)
    with replaced_atomically(path) as out:
        out.write(text + "\n")


#: Integers of an id column written per piece by :func:`write_json_line_atomic`.
ID_CHUNK = 8192


def write_json_line_atomic(path: Path, value: dict[str, Any]) -> None:
    """``json.dumps(value) + "\\n"``, written atomically, with integer arrays written in pieces.

    A value that is an integer ``numpy`` array (the completed example ids) is written
    :data:`ID_CHUNK` ids at a time, so its ids never all exist as Python ints and one string at
    once: ~5 MB at 100,000 ids, allocated and freed every second of a run, which set the
    run's peak RSS. The bytes are those ``json.dumps`` writes for the same ids as a list.
    """
    with replaced_atomically(path) as out:
        out.write("{")
        for number, (key, item) in enumerate(value.items()):
            out.write(f"{', ' if number else ''}{dumps(key, ensure_ascii=True)}: ")
            if isinstance(item, np.ndarray) and item.ndim == 1 and item.dtype.kind in "iu":
                out.write("[")
                for start in range(0, len(item), ID_CHUNK):
                    chunk = item[start : start + ID_CHUNK].tolist()
                    out.write(f"{', ' if start else ''}{', '.join(map(str, chunk))}")
                out.write("]")
            else:
                out.write(dumps(item, ensure_ascii=True))
        out.write("}\n")


class Checkpoint:
    """Append-only record of finished and errored rollouts, crash-safe line by line."""

    def __init__(self, run_dir: Path) -> None:
        paths = RunPaths(run_dir)
        self.path = paths.checkpoint
        self.meta_path = paths.checkpoint_meta
        self._handle: IO[str] | None = None
        self._since_sync = 0
        self._last_meta = 0.0

    def read(self) -> Iterator[dict[str, Any]]:
        """Yield every intact record; a torn line (a kill mid-write) or one that is not a
        rollout record (edited, damaged) is skipped with a warning: its example is re-run."""
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                try:
                    yield reader.parse_record(raw, self.path, number, reader.CHECKPOINT_FIX)
                except RunFileError as exc:
                    torn = not raw.endswith(b"\n")
                    warnings.warn(
                        f"{self.path}:{number}: ignoring a torn checkpoint line (the previous "
                        "run was killed while writing it); it will be re-run"
                        if torn
                        else f"ignoring a checkpoint line that is not a rollout record; it "
                        f"will be re-run: {exc}",
                        stacklevel=2,
                    )

    def open(self) -> None:
        with recording(self.path):
            self._truncate_torn_tail()
            self._handle = self.path.open("a", encoding="utf-8")

    def _truncate_torn_tail(self) -> None:
        # Appending after a torn line would glue the next record onto it; cut it off.
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as handle:
            data = handle.read()
            if data.endswith(b"\n"):
                return
            handle.truncate(data.rfind(b"\n") + 1)

    def append(self, records: Iterable[dict[str, Any]], sync_every: int) -> None:
        """Write one example's records and flush, so a killed process loses nothing finished."""
        assert self._handle is not None, "Checkpoint.open() first"
        with recording(self.path):
            self._handle.write("".join(dumps(r) + "\n" for r in records))
            self._handle.flush()
            self._since_sync += 1
            if self._since_sync >= sync_every:
                os.fsync(self._handle.fileno())  # survive power loss, not just a killed process
                self._since_sync = 0

    def write_meta(self, meta: Callable[[], dict[str, Any]], force: bool = False) -> bool:
        """Replace checkpoint_meta.json at most once a second (``meta`` is built only then);
        True when it was written."""
        now = time.monotonic()
        if force or now - self._last_meta >= META_MIN_INTERVAL_S:
            # One line: indenting puts each of 100,000 example ids on its own line, which
            # triples the cost of a write that repeats every second of a long run.
            write_json_line_atomic(self.meta_path, meta())
            self._last_meta = now
            return True
        return False

    def close(self) -> None:
        """Flush, sync and close; the file is closed even when that fails (RecordingError)."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        with recording(self.path):
            try:
                handle.flush()
                os.fsync(handle.fileno())
            finally:
                with contextlib.suppress(OSError):
                    # A flush that failed keeps its buffer; dropping it here is safe: the lines
                    # that reached the file end at a newline or are cut off when it is reopened.
                    handle.close()


def describe_error(error: Any) -> str:
    """A recorded rollout error in one line: its type, then the chain of errors with their
    messages (verifiers 0.3's ``error_chain_repr``: ``ModelError(...) ->
    InternalServerError('Error code: 500 - ...')``, which names the HTTP status and what the
    server said), else its message, else the chain's types."""
    if isinstance(error, Mapping):
        kind = error.get("error") or error.get("type") or "error"
        message = (
            error.get("error_chain_repr") or error.get("message") or error.get("error_chain_str")
        )
        return f"{kind}: {message}" if message else str(kind)
    return str(error)


def write_results(
    checkpoint: Checkpoint,
    results_path: Path,
    example_ids: Sequence[int],
    rollouts: int,
    seats: Sequence[str] = (),
) -> int:
    """Write results.jsonl: exactly one record per selected (example, rollout), in order; with
    several ``seats``, one per (example, rollout, seat): a rollout's seats side by side, in
    ``seats`` order.

    Only one 8-byte slot per record is held in memory (the chosen record's byte offset in the
    checkpoint), so this stays flat for large runs.
    """
    positions = Positions(example_ids)
    seat_index = {seat: i for i, seat in enumerate(seats)} if len(seats) > 1 else {}
    width = rollouts * max(1, len(seat_index))
    # offset * 2 + 1 for a finished record, offset * 2 for an errored one, -1 for none yet.
    chosen = array("q", [-1]) * (len(example_ids) * width)
    if checkpoint.path.exists():
        with checkpoint.path.open("rb") as handle:
            offset = 0
            for raw in handle:
                try:
                    record = reader.parse_json(raw)
                    example_id, rollout = int(record["example_id"]), int(record.get("rollout", 0))
                    seat = seat_index.get(record.get("agent")) if seat_index else 0
                except (UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError):
                    offset += len(raw)
                    continue
                position = positions.get(example_id)
                if position is not None and seat is not None and 0 <= rollout < rollouts:
                    slot = position * width + seat * rollouts + rollout
                    # The first finished record wins; until one exists, the newest error.
                    if chosen[slot] < 0 or not chosen[slot] & 1:
                        chosen[slot] = offset * 2 + (not record.get("error"))
                offset += len(raw)
    written = 0
    with recording(checkpoint.path):
        checkpoint.path.touch()
    with (
        replaced_atomically(results_path, binary=True) as out,
        checkpoint.path.open("rb") as source,
    ):
        for example_id in example_ids:
            first = positions[example_id] * width
            for slot in (
                first + seat + rollout
                for rollout in range(rollouts)
                for seat in range(0, width, rollouts)
            ):
                if chosen[slot] < 0:
                    continue
                source.seek(chosen[slot] >> 1)
                out.write(source.readline())
                written += 1
    return written


class Positions:
    """Each example id's first position in the selection; ``0, 1, 2, ...`` costs no memory."""

    def __init__(self, example_ids: Sequence[int]) -> None:
        self._count = len(example_ids)
        self._index: dict[int, int] | None = None
        if any(example_id != position for position, example_id in enumerate(example_ids)):
            self._index = {}
            for position, example_id in enumerate(example_ids):
                self._index.setdefault(example_id, position)

    @property
    def identity(self) -> bool:
        """Every id is its own position (ids ``0, 1, 2, ...``)."""
        return self._index is None

    def get(self, example_id: int) -> int | None:
        if self._index is not None:
            return self._index.get(example_id)
        return example_id if 0 <= example_id < self._count else None

    def __getitem__(self, example_id: int) -> int:
        position = self.get(example_id)
        if position is None:
            raise KeyError(example_id)
        return position

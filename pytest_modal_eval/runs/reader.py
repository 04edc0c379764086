"""The one reader of run files: ``results.jsonl``, ``checkpoint.jsonl``, ``metadata.json``,
``run_config.json`` and ``checkpoint_meta.json``, as every command and the HTML report read them.

Run files are data a user may copy, edit or receive from elsewhere, so nothing in them is
trusted:

- only regular files are opened (a link to ``/dev/zero`` or a FIFO is refused, never read),
  and no more than :data:`MAX_JSON_BYTES` of a JSON file or :data:`MAX_LINE_BYTES` of one
  line is read;
- JSON Lines are split on ``"\\n"`` alone: U+2028, U+2029 and U+0085 are text inside a record
  (``str.splitlines`` would split on them);
- ``NaN`` and ``Infinity`` are not JSON and are refused;
- each record is checked against the rollout record's schema
  (:class:`~pytest_modal_eval.runs.record.RolloutRecord`), each JSON file against the fields
  the commands use (:class:`Metadata`, :class:`RunConfig`, :class:`CheckpointMeta`);
- a problem is one :class:`~pytest_modal_eval.exceptions.RunFileError` naming the file, the
  line and the field, with the fix.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import IO, Annotated, Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.runs.record import RolloutRecord
from pytest_modal_eval.terminal_text import escape

#: The largest ``metadata.json`` / ``run_config.json`` / ``checkpoint_meta.json`` read (the
#: completed ids of a 1,000,000-example run take ~7 MB).
MAX_JSON_BYTES = 64 * 1024 * 1024
#: The longest line of ``results.jsonl`` or ``checkpoint.jsonl`` read.
MAX_LINE_BYTES = 256 * 1024 * 1024
#: Fields a rollout record must have; the others are checked when present (and a record with
#: no error must have a reward).
REQUIRED_FIELDS = ("example_id",)

#: The fix a damaged run file's error gives.
FIX = (
    "the file is damaged or was edited: restore it, or delete the run's metadata.json and "
    "results.jsonl and run the benchmark again (it rewrites both from checkpoint.jsonl)"
)
CHECKPOINT_FIX = (
    "the checkpoint is damaged or was edited: remove the line (its example is then evaluated "
    "again by the next run) or delete the run directory"
)


class _Checked(BaseModel):
    """Known fields typed; unknown ones kept. Strict: "0.5" for a number or 1 for true is an
    error, not silently coerced."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)


class Metadata(_Checked):
    """The fields of ``metadata.json`` the commands and the report read (others are kept)."""

    benchmark: str | None = None
    model: str | None = None
    run_id: str | None = None
    env_id: str | None = None
    num_examples: int | None = None
    rollouts_per_example: int | None = None
    time_ms: float | None = None
    avg_reward: float | None = None
    stderr: float | None = None
    ci: Annotated[list[float | None], Field(min_length=2, max_length=2)] | None = None
    ci_level: float | None = None
    ci_method: str | None = None
    n_evaluated: int | None = None
    errors: int | None = None
    errored_example_ids: list[int] | None = None
    truncated_rollouts: int | None = None
    avg_metrics: dict[str, float | None] | None = None
    verdict: str | None = None
    gate_failed: list[str] | None = None
    threshold: float | None = None
    serving: dict[str, Any] | None = None
    early_stop: dict[str, Any] | None = None
    vs_reference: dict[str, Any] | None = None


class RunConfig(_Checked):
    """The fields of ``run_config.json`` the commands read (others are kept)."""

    run_id: str | None = None
    model_id: str | None = None
    model_slug: str | None = None
    benchmark: str | None = None
    num_examples: int | None = None
    started_at: str | None = None
    answer_hash: str | None = None
    answer_fields: dict[str, Any] | None = None
    config: dict[str, Any] | None = None


class CheckpointMeta(_Checked):
    """The fields of ``checkpoint_meta.json`` the commands read (others are kept)."""

    model: str | None = None
    completed_example_ids: list[int] | None = None
    total_examples: int | None = None
    start_time: str | None = None
    last_checkpoint_time: str | None = None


@cache
def _record_model() -> type[BaseModel]:
    """:class:`RolloutRecord` as a strict pydantic model: the schema is the TypedDict's."""
    fields: dict[str, Any] = {}
    for name, hint in get_type_hints(RolloutRecord).items():
        fields[name] = (hint, ...) if name in REQUIRED_FIELDS else (hint, None)
    return create_model("RolloutRecordModel", __base__=_Checked, **fields)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(data: bytes | str) -> Any:
    """JSON as the run files hold it: ``NaN`` and ``Infinity`` are refused (``ValueError``)."""
    return json.loads(data, parse_constant=_refuse_constant)


def _open(path: Path, fix: str) -> IO[bytes]:
    """``path`` opened for reading when it is a regular file (checked on the open file, so a
    link swapped in between cannot slip past); O_NONBLOCK so a FIFO cannot block the open."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except IsADirectoryError:
        raise RunFileError(f"{path}: a directory, not read; {fix}") from None
    except OSError as exc:
        raise RunFileError(f"{path}: cannot be read ({exc.strerror}); {fix}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise RunFileError(f"{path}: {kind}, not read; {fix}")
    return os.fdopen(fd, "rb")


def _field_error(path: Path, line: int | None, exc: ValidationError, fix: str) -> RunFileError:
    first = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in first["loc"]) or "(the record)"
    given = repr(first.get("input"))
    given = given if len(given) <= 60 else given[:57] + "..."
    where = f"{path}:{line}" if line is not None else str(path)
    return RunFileError(escape(f"{where}: field {field}: {first['msg']} (got {given}); {fix}"))


def read_json_object(path: Path, schema: type[BaseModel]) -> dict[str, Any] | None:
    """A JSON object file checked against ``schema``; None when the file does not exist."""
    if not os.path.lexists(path):
        return None
    with _open(path, FIX) as handle:
        data = handle.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise RunFileError(f"{path}: larger than {MAX_JSON_BYTES // 2**20} MiB, not read; {FIX}")
    try:
        value = parse_json(data)
    except ValueError as exc:
        raise RunFileError(escape(f"{path}: not valid JSON ({exc}); {FIX}")) from None
    if not isinstance(value, dict):
        raise RunFileError(
            f"{path}: a JSON {type(value).__name__}, where a JSON object is expected; {FIX}"
        )
    try:
        schema.model_validate(value)
    except ValidationError as exc:
        raise _field_error(path, None, exc, FIX) from None
    return value


def read_metadata(path: Path) -> dict[str, Any] | None:
    return read_json_object(path, Metadata)


def read_run_config(path: Path) -> dict[str, Any] | None:
    return read_json_object(path, RunConfig)


def read_checkpoint_meta(path: Path) -> dict[str, Any] | None:
    return read_json_object(path, CheckpointMeta)


def parse_record(raw: bytes, path: Path, line: int, fix: str = FIX) -> dict[str, Any]:
    """One line of ``results.jsonl`` or ``checkpoint.jsonl``, checked against the schema."""
    try:
        value = parse_json(raw)
    except ValueError as exc:
        raise RunFileError(
            escape(f"{path}:{line}: not a JSON rollout record ({exc}); {fix}")
        ) from None
    if not isinstance(value, dict):
        raise RunFileError(
            f"{path}:{line}: a JSON {type(value).__name__}, where a rollout record (a JSON "
            f"object) is expected; {fix}"
        )
    try:
        _record_model().model_validate(value)
    except ValidationError as exc:
        raise _field_error(path, line, exc, fix) from None
    if "reward" not in value and not value.get("error"):
        raise RunFileError(
            f"{path}:{line}: field reward: missing from a record with no error; {fix}"
        )
    return value


def iter_records(
    path: Path, *, torn_tail: bool = False, fix: str = FIX
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSON Lines run file, in file order, one line in memory.

    A last line with no newline is torn (a process killed while writing it): an error, unless
    ``torn_tail`` (a checkpoint of a run that was killed), when it is left out. Blank lines are
    skipped. A missing file yields nothing.
    """
    if not os.path.lexists(path):
        return
    with _open(path, fix) as handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if not raw.endswith(b"\n"):
                if len(raw) > MAX_LINE_BYTES:
                    raise RunFileError(
                        f"{path}:{number}: a line longer than {MAX_LINE_BYTES // 2**20} MiB, "
                        f"not read; {fix}"
                    )
                if torn_tail:
                    return
                raise RunFileError(
                    f"{path}:{number}: the last line is cut off (no newline at its end: the "
                    f"file was truncated or its writer killed); {fix}"
                )
            if raw.strip():
                yield number, parse_record(raw, path, number, fix)


def has_torn_tail(path: Path) -> bool:
    """Whether a JSON Lines file ends in a line with no newline (a writer killed mid-line)."""
    try:
        with _open(path, FIX) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return False
            handle.seek(size - 1)
            return handle.read(1) != b"\n"
    except RunFileError:
        return False


def is_file(path: Path) -> bool:
    """``path`` is a regular file (not following it into a device)."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False

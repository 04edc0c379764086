"""Stored baselines: the per-example rewards of an accepted run, kept as a syrupy snapshot.

``pytest --snapshot-update`` records or refreshes a benchmark's baseline; every other run reads it
so the item can test for a regression with :func:`pytest_modal_eval.stats.summary.compare_paired`.
The file is small, key-ordered JSON with one example per line, so a pull request shows exactly which
examples flipped.

Where the files live, and why not in ``__snapshots__``: for a benchmark collected from
``evals/gsm8k.yaml`` and named ``gsm8k`` the baseline is ``evals/__baselines__/gsm8k.json``,
whichever model its item evaluates and however many ``--model`` the session has (the item is
``gsm8k--org--name`` with several; a baseline is compared across models). Any
syrupy extension in use (the default amber one comes with every ``snapshot`` fixture) walks
``<dir>/__snapshots__`` recursively and claims each file there; one that the session did not
assert on counts as unused, which fails a full run without ``--snapshot-update`` and deletes the
file with it. A baseline is routinely not asserted on (compare runs only read it; an item that
crashes never gets that far), so baselines live in a sibling directory that syrupy never scans
and :class:`BaselineExtension` reports no collections for discovery: syrupy writes and counts
baselines ("1 snapshot generated/updated"), but never flags or deletes one. Remove a stale
baseline with ``git rm``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, Self
from unicodedata import category

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from syrupy.assertion import SnapshotAssertion
from syrupy.data import SnapshotCollections
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.location import PyTestLocation
from syrupy.types import PropertyFilter, PropertyMatcher, SerializableData, SnapshotIndex

from pytest_modal_eval.exceptions import BaselineError
from pytest_modal_eval.stats.summary import ExampleMeans, ExampleRewards, summarize

FORMAT_VERSION = 1
REFRESH_HINT = "refresh it with --snapshot-update"
#: The attribute of a test item naming its baseline file (a benchmark item's: its benchmark's
#: name); an item without it is named after itself, as syrupy names a snapshot.
BASELINE_NAME_ATTR = "baseline_name"
#: Characters syrupy leaves out of a single-file snapshot's name (with control characters).
_UNSAFE_IN_NAMES = frozenset('\\/?*:|"<>')


@dataclass(frozen=True)
class Baseline:
    """Per-example record of an accepted run. ``stderr`` is NaN (JSON null) for one example."""

    benchmark: str
    model: str
    config_hash: str
    mean: float
    stderr: float
    n_examples: int
    rollouts_per_example: int
    binary_single: bool  # every example: exactly one rollout, reward 0 or 1 (McNemar applies)
    per_example: Mapping[str, float]  # example id -> mean reward over its rollouts
    # (an ExampleMeans when built here: columns in natural id order)

    @classmethod
    def from_rewards(
        cls,
        *,
        benchmark: str,
        model: str,
        config_hash: str,
        rewards: Mapping[str, Sequence[float]] | ExampleRewards,
    ) -> Self:
        """Build from example id -> rewards of that example's rollouts (as for ``summarize``)."""
        summary = summarize(rewards)
        if isinstance(rewards, ExampleRewards):
            means = rewards.means()
            binary_single = rewards.rollouts == 1 and bool(np.all((means == 0.0) | (means == 1.0)))
            per_example = ExampleMeans.from_columns(rewards.ids, means)
        else:
            binary_single = all(len(r) == 1 and r[0] in (0.0, 1.0) for r in rewards.values())
            per_example = ExampleMeans.of({k: math.fsum(r) / len(r) for k, r in rewards.items()})
        return cls(
            benchmark=benchmark,
            model=model,
            config_hash=config_hash,
            mean=summary.mean,
            stderr=summary.stderr,
            n_examples=summary.n_examples,
            rollouts_per_example=summary.rollouts_per_example,
            binary_single=binary_single,
            per_example=per_example,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able document: fixed key order, examples in natural id order, NaN as None."""
        return {**self._head(), "per_example": dict(ExampleMeans.of(self.per_example).items())}

    def _head(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "benchmark": self.benchmark,
            "model": self.model,
            "config_hash": self.config_hash,
            "mean": self.mean,
            "stderr": None if math.isnan(self.stderr) else self.stderr,
            "n_examples": self.n_examples,
            "rollouts_per_example": self.rollouts_per_example,
            "binary_single": self.binary_single,
        }

    def to_json(self) -> str:
        """``json.dumps(self.to_dict(), indent=2)`` and a newline: one example per line, which
        keeps pull-request diffs per example. The examples are written from the columns: with
        ``indent``, json's pure-Python encoder held ~5 string pieces per example (~27 MB at
        100,000 examples) before joining them."""
        head = json.dumps(self._head(), indent=2, allow_nan=False)
        members = ExampleMeans.of(self.per_example).json_members(" " * 4)
        opening, closing = ("{\n", "\n  }") if members else ("{", "}")
        head = head.removesuffix("\n}")
        return "".join([head, ',\n  "per_example": ', opening, *members, closing, "\n}\n"])

    @classmethod
    def from_dict(cls, data: Any, *, source: str | Path = "<baseline>") -> Self:
        """Validate a stored document; raise :class:`BaselineError` naming ``source``."""
        problems: list[str] = []
        head: _Head | None = None
        if not isinstance(data, dict):
            problems.append("(document): Input should be a valid dictionary")
        else:
            try:
                head = _Head.model_validate({k: v for k, v in data.items() if k != "per_example"})
            except ValidationError as exc:
                problems += [
                    f"{'.'.join(map(str, e['loc'])) or '(document)'}: {e['msg']}"
                    for e in exc.errors()
                ]
            if "per_example" not in data:
                problems.append("per_example: Field required")
        per_example = None
        if isinstance(data, dict) and "per_example" in data:
            per_example, bad = _per_example(data["per_example"])
            problems += bad
        if head is not None and per_example is not None:
            problems += _inconsistencies(head, per_example)
        if problems or head is None or per_example is None:
            listed = "\n".join(f"  {problem}" for problem in problems)
            raise BaselineError(f"malformed baseline {source}; {REFRESH_HINT}:\n{listed}")
        return cls(
            benchmark=head.benchmark,
            model=head.model,
            config_hash=head.config_hash,
            mean=head.mean,
            stderr=math.nan if head.stderr is None else head.stderr,
            n_examples=head.n_examples,
            rollouts_per_example=head.rollouts_per_example,
            binary_single=head.binary_single,
            per_example=per_example,
        )

    @classmethod
    def from_json(cls, text: str, *, source: str | Path = "<baseline>") -> Self:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BaselineError(
                f"malformed baseline {source}: not JSON ({exc}); {REFRESH_HINT}"
            ) from None
        return cls.from_dict(data, source=source)


class _Head(BaseModel):
    """Every field of a stored baseline but its examples (see :func:`_per_example`)."""

    # Strict: a hand-edited "0.8" string or true-for-1 is an error, not silently coerced.
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    version: Literal[1]
    benchmark: str
    model: str
    config_hash: str
    mean: float
    stderr: float | None = Field(ge=0)
    n_examples: int = Field(ge=1)
    rollouts_per_example: int = Field(ge=1)
    binary_single: bool


_SHOWN_PROBLEMS = 10


def _per_example(value: Any) -> tuple[ExampleMeans | None, list[str]]:
    """The stored examples as columns, or what is wrong with them (pydantic's wording).

    Checked here rather than as a ``dict[str, float]`` field: validation would copy the
    document's 100,000-entry dict, and the columns are what the comparison reads anyway.
    As in strict pydantic, a JSON integer counts as a number; a string or a bool does not.
    """
    if not isinstance(value, dict):
        return None, ["per_example: Input should be a valid dictionary"]
    if not value:
        return None, ["per_example: Dictionary should have at least 1 item after validation, not 0"]
    problems: list[str] = []
    values = value.values()
    if all(type(v) is float for v in values):  # what json.loads gives: no per-entry work
        means = np.fromiter(values, np.float64, len(value))
    else:
        means = np.empty(len(value))
        for row, (key, v) in enumerate(value.items()):
            try:
                if type(v) not in (float, int):
                    raise TypeError
                means[row] = float(v)
            except (TypeError, OverflowError):
                problems.append(f"per_example.{key}: Input should be a valid number")
    keys = list(value)
    problems += [f"per_example.{k!r}: keys should be strings" for k in keys if type(k) is not str]
    problems += [
        f"per_example.{keys[row]}: Input should be a finite number"
        for row in np.flatnonzero(~np.isfinite(means)).tolist()
        if type(value[keys[row]]) is float
    ]
    if problems:
        more = len(problems) - _SHOWN_PROBLEMS
        return None, problems[:_SHOWN_PROBLEMS] + ([f"... and {more} more"] if more > 0 else [])
    return ExampleMeans.from_pairs(keys, means), []


def _inconsistencies(head: _Head, per_example: ExampleMeans) -> list[str]:
    if len(per_example) != head.n_examples:
        return [f"n_examples is {head.n_examples} but per_example has {len(per_example)}"]
    if head.binary_single and (
        head.rollouts_per_example != 1
        or not bool(np.all((per_example.means == 0.0) | (per_example.means == 1.0)))
    ):
        return ["binary_single is true but rewards are not single 0/1 rollouts"]
    return []


class BaselineExtension(SingleFileSnapshotExtension):
    """Syrupy extension storing a :class:`Baseline` as ``<dir>/__baselines__/<name>.json``,
    ``<name>`` being the item's ``baseline_name`` (its benchmark's name) or else its own name.

    One baseline per benchmark whatever the assertion index, and invisible to syrupy's
    unused-snapshot discovery (see the module docstring).
    """

    _write_mode = WriteMode.TEXT
    file_extension = "json"
    baseline_dirname = "__baselines__"

    def serialize(
        self,
        data: SerializableData,
        *,
        exclude: PropertyFilter | None = None,
        include: PropertyFilter | None = None,
        matcher: PropertyMatcher | None = None,
    ) -> str:
        if not isinstance(data, Baseline):
            raise TypeError(f"BaselineExtension stores Baseline objects, not {type(data).__name__}")
        return data.to_json()

    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        return str(Path(test_location.filepath).parent / cls.baseline_dirname)

    @classmethod
    def discovery_dirname(cls, *, test_location: PyTestLocation) -> str:
        return cls.dirname(test_location=test_location)

    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        name = getattr(test_location.item, BASELINE_NAME_ATTR, None)
        if isinstance(name, str) and name:
            return cls.file_stem(name)
        return cls.item_snapshot_name(test_location)

    @classmethod
    def file_stem(cls, name: str) -> str:
        """A benchmark's baseline file's name without ``.json``: ``name`` cleaned as syrupy
        cleans an item's name, so that a benchmark's baseline recorded by its one-model item
        (named like the benchmark) is this same file."""
        stem = "".join(
            c for c in name if c not in _UNSAFE_IN_NAMES and not category(c).startswith("C")
        )
        return stem[: cls._max_stem_length()]

    @classmethod
    def item_snapshot_name(cls, test_location: PyTestLocation) -> str:
        """The name syrupy gives the item itself: where a baseline was stored when baselines
        were named per item (``gsm8k--org--name.json`` for an item of several models)."""
        return super().get_snapshot_name(test_location=test_location, index=0)

    @classmethod
    def matches_test_location(
        cls, *, test_location: PyTestLocation, snapshot_location: str
    ) -> bool:
        # Syrupy's check assumes __snapshots__/<module stem>/...; without this it warns on every
        # write, and under filterwarnings=error the warning fails the write.
        return Path(snapshot_location) == Path(
            cls.get_location(test_location=test_location, index=0)
        )

    def discover_snapshots(
        self,
        *,
        test_location: PyTestLocation,
        ignore_extensions: list[str] | None = None,
    ) -> SnapshotCollections:
        return SnapshotCollections()

    @classmethod
    def path_for(cls, snapshot: SnapshotAssertion) -> Path:
        """Where the baseline of ``snapshot``'s test item lives."""
        return Path(cls.get_location(test_location=snapshot.test_location, index=0))

    @classmethod
    def item_path_for(cls, snapshot: SnapshotAssertion) -> Path:
        """Where a baseline named after the item itself would be (see item_snapshot_name)."""
        location = snapshot.test_location
        name = cls.item_snapshot_name(location)
        return Path(cls.dirname(test_location=location)) / f"{name}.{cls.file_extension}"


def baseline_file(benchmark_path: Path, name: str) -> Path:
    """Where the stored baseline of benchmark ``name``, collected from the YAML at
    ``benchmark_path``, is: ``<its directory>/__baselines__/<name>.json``, the file its items'
    ``snapshot`` reads (read without one: before any item runs)."""
    folder = benchmark_path.parent / BaselineExtension.baseline_dirname
    return folder / f"{BaselineExtension.file_stem(name)}.{BaselineExtension.file_extension}"


class BaselineStatus(StrEnum):
    MISSING = "missing"  # none stored yet (compare run)
    LOADED = "loaded"  # stored, same configuration: compare against ``stored``
    CONFIG_CHANGED = "config-changed"  # stored under another config_hash or benchmark
    RECORDED = "recorded"  # update run: written for the first time
    UPDATED = "updated"  # update run: replaced a different stored baseline
    UNCHANGED = "unchanged"  # update run: stored baseline was already identical
    NOT_COMPARED = "not-compared"  # update run, another model than the reference: left alone


@dataclass(frozen=True)
class BaselineOutcome:
    """What :func:`check_baseline` found or did; ``stored`` is the baseline on disk before it."""

    status: BaselineStatus
    path: str
    stored: Baseline | None
    message: str

    @property
    def comparable(self) -> bool:
        """True when ``stored`` is a baseline the current run should be tested against."""
        return self.status is BaselineStatus.LOADED


@dataclass(frozen=True)
class StoredBaseline:
    """An item's baseline file as read by :func:`read_stored`, before the run."""

    path: Path
    shown: str  # the path as messages show it (relative to the rootdir)
    exists: bool
    baseline: Baseline | None  # None when missing or unreadable
    error: BaselineError | None  # why an existing file could not be read


def read_stored(snapshot: SnapshotAssertion) -> StoredBaseline:
    """Read (and validate) the item's stored baseline, if any: its benchmark's file, or when
    there is none, one named after the item itself (as an item of several models stored it
    when baselines were named per item; the next --snapshot-update writes the benchmark's).

    Done before the run, while the process is small: parsing a 100,000-example file briefly
    takes ~16 MB, and what is kept is two columns (1.6 MB).
    """
    path = BaselineExtension.path_for(snapshot)
    if not path.exists():
        item_path = BaselineExtension.item_path_for(snapshot)
        path = item_path if item_path.exists() else path
    shown = _display(path, snapshot)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return StoredBaseline(path, shown, False, None, None)
    try:
        return StoredBaseline(path, shown, True, Baseline.from_json(text, source=shown), None)
    except BaselineError as exc:
        return StoredBaseline(path, shown, True, None, exc)


def check_baseline(
    snapshot: SnapshotAssertion,
    current: Baseline,
    stored: StoredBaseline | None = None,
    reference_model: str | None = None,
) -> BaselineOutcome:
    """Compare with the item's stored baseline, or record ``current`` under ``--snapshot-update``.

    ``stored`` is what :func:`read_stored` found before the run (read now when not given).
    ``reference_model`` is the session's reference when the item evaluates another model: the
    benchmark's one baseline is then recorded from the reference's item only, and this item,
    under ``--snapshot-update``, neither writes it nor compares with it (``NOT_COMPARED``).
    Without ``--snapshot-update`` nothing is asserted through syrupy, so a missing baseline is an
    outcome (``MISSING``), never a syrupy failure. With it -- or with
    ``--snapshot-update-new-only`` when none is stored -- ``current`` is written through syrupy,
    which reports "1 snapshot generated/updated"; an unreadable stored file is replaced.
    Raises :class:`BaselineError` when a stored baseline is malformed and is not being replaced.
    """
    if stored is None:
        stored = read_stored(snapshot)
    path, shown = stored.path, stored.shown
    write = snapshot.update_snapshots or (snapshot.update_new_snapshots_only and not stored.exists)
    if write and reference_model is not None:
        return BaselineOutcome(
            BaselineStatus.NOT_COMPARED,
            str(path),
            None,
            f"baseline {shown} is recorded from the reference model {reference_model}; "
            "not compared while it is being recorded",
        )

    if not write:
        if not stored.exists:
            return BaselineOutcome(
                BaselineStatus.MISSING,
                str(path),
                None,
                f"no baseline yet ({shown}); record one with --snapshot-update",
            )
        baseline = stored.baseline
        if baseline is None:
            raise stored.error or BaselineError(f"unreadable baseline {shown}; {REFRESH_HINT}")
        for what, old, new in (
            ("configuration", baseline.config_hash, current.config_hash),
            ("benchmark", baseline.benchmark, current.benchmark),
        ):
            if old != new:
                return BaselineOutcome(
                    BaselineStatus.CONFIG_CHANGED,
                    str(path),
                    baseline,
                    f"baseline {shown} was made under a different {what} "
                    f"({old!r}, now {new!r}); {REFRESH_HINT}",
                )
        return BaselineOutcome(BaselineStatus.LOADED, str(path), baseline, f"baseline {shown}")

    note = " (replaced an unreadable file)" if stored.error is not None else ""
    written_to = BaselineExtension.path_for(snapshot)
    if path != written_to:
        note += f"; {shown} is no longer read: git rm it"
        shown = _display(written_to, snapshot)
    recorder = snapshot.use_extension(BaselineExtension)
    written = recorder == current  # syrupy compares and, in update mode, writes
    if not written:
        error = recorder.executions[recorder.num_executions - 1].exception
        raise BaselineError(f"could not write baseline {shown}: {error}") from error
    result = recorder.executions[recorder.num_executions - 1]
    status = (
        BaselineStatus.RECORDED
        if result.created
        else BaselineStatus.UPDATED
        if result.updated
        else BaselineStatus.UNCHANGED
    )
    return BaselineOutcome(status, str(path), stored.baseline, f"baseline {status} ({shown}){note}")


def _display(path: Path, snapshot: SnapshotAssertion) -> str:
    root = snapshot.session.pytest_session.config.rootpath
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

"""Stored baselines: the per-example rewards of an accepted run, kept as a syrupy snapshot.

``pytest --snapshot-update`` records or refreshes a benchmark's baseline; every other run reads it
so the item can test for a regression with :func:`pytest_modal_eval.stats.compare_paired`. The
file is small, key-ordered JSON with one example per line, so a pull request shows exactly which
examples flipped.

Where the files live, and why not in ``__snapshots__``: for an item collected from
``evals/gsm8k.yaml`` and named ``gsm8k`` the baseline is ``evals/__baselines__/gsm8k.json``. Any
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from syrupy.assertion import SnapshotAssertion
from syrupy.data import SnapshotCollections
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.location import PyTestLocation
from syrupy.types import PropertyFilter, PropertyMatcher, SerializableData, SnapshotIndex

from .stats import ExampleRewards, FloatArray, sort_ids, summarize

FORMAT_VERSION = 1
REFRESH_HINT = "refresh it with --snapshot-update"


class BaselineError(ValueError):
    """A stored baseline cannot be read; the message names the file."""


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
        per_example: Mapping[str, float]
        if isinstance(rewards, ExampleRewards):
            means = rewards.means()
            binary_single = rewards.rollouts == 1 and bool(np.all((means == 0.0) | (means == 1.0)))
            per_example = _ExampleMeans(rewards.ids, means)
        else:
            binary_single = all(len(r) == 1 and r[0] in (0.0, 1.0) for r in rewards.values())
            per_example = {k: math.fsum(r) / len(r) for k, r in rewards.items()}
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
            "per_example": {k: self.per_example[k] for k in sort_ids(self.per_example)},
        }

    def to_json(self) -> str:
        # indent puts one example per line, which keeps pull-request diffs per example.
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: Any, *, source: str | Path = "<baseline>") -> Self:
        """Validate a stored document; raise :class:`BaselineError` naming ``source``."""
        try:
            doc = _Document.model_validate(data)
        except ValidationError as exc:
            problems = "\n".join(
                f"  {'.'.join(map(str, e['loc'])) or '(document)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise BaselineError(
                f"malformed baseline {source}; {REFRESH_HINT}:\n{problems}"
            ) from None
        return cls(
            benchmark=doc.benchmark,
            model=doc.model,
            config_hash=doc.config_hash,
            mean=doc.mean,
            stderr=math.nan if doc.stderr is None else doc.stderr,
            n_examples=doc.n_examples,
            rollouts_per_example=doc.rollouts_per_example,
            binary_single=doc.binary_single,
            per_example=doc.per_example,  # validation built a new dict already
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


class _ExampleMeans(Mapping[str, float]):
    """Example id -> mean reward of a run, made a dict only when first read.

    A run checked against no stored baseline (none recorded yet, no ``--snapshot-update``)
    never reads its own baseline's examples; building them anyway cost 100,000 str keys and
    floats (~13 MB) at the end of a 100,000-example run. Once read, it is a plain dict.
    """

    def __init__(self, ids: npt.NDArray[np.int64], means: FloatArray) -> None:
        self._ids, self._means = ids, means
        self._dict: dict[str, float] | None = None

    def _data(self) -> dict[str, float]:
        if self._dict is None:
            self._dict = dict(zip(map(str, self._ids.tolist()), self._means.tolist(), strict=True))
        return self._dict

    def __getitem__(self, example_id: str) -> float:
        return self._data()[example_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return repr(self._data())


class _Document(BaseModel):
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
    per_example: dict[str, float] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if len(self.per_example) != self.n_examples:
            raise ValueError(
                f"n_examples is {self.n_examples} but per_example has {len(self.per_example)}"
            )
        if self.binary_single and (
            self.rollouts_per_example != 1
            or any(v not in (0.0, 1.0) for v in self.per_example.values())
        ):
            raise ValueError("binary_single is true but rewards are not single 0/1 rollouts")
        return self


class BaselineExtension(SingleFileSnapshotExtension):
    """Syrupy extension storing a :class:`Baseline` as ``<dir>/__baselines__/<item name>.json``.

    One baseline per item whatever the assertion index, and invisible to syrupy's
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


class BaselineStatus(StrEnum):
    MISSING = "missing"  # none stored yet (compare run)
    LOADED = "loaded"  # stored, same configuration: compare against ``stored``
    CONFIG_CHANGED = "config-changed"  # stored under another config_hash or benchmark
    RECORDED = "recorded"  # update run: written for the first time
    UPDATED = "updated"  # update run: replaced a different stored baseline
    UNCHANGED = "unchanged"  # update run: stored baseline was already identical


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


def check_baseline(snapshot: SnapshotAssertion, current: Baseline) -> BaselineOutcome:
    """Read the item's stored baseline, or record ``current`` under ``--snapshot-update``.

    Without ``--snapshot-update`` nothing is asserted through syrupy, so a missing baseline is an
    outcome (``MISSING``), never a syrupy failure. With it -- or with
    ``--snapshot-update-new-only`` when none is stored -- ``current`` is written through syrupy,
    which reports "1 snapshot generated/updated"; an unreadable stored file is replaced.
    Raises :class:`BaselineError` when a stored baseline is malformed and is not being replaced.
    """
    path = BaselineExtension.path_for(snapshot)
    shown = _display(path, snapshot)
    try:
        text: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    write = snapshot.update_snapshots or (snapshot.update_new_snapshots_only and text is None)

    if not write:
        if text is None:
            return BaselineOutcome(
                BaselineStatus.MISSING,
                str(path),
                None,
                f"no baseline yet ({shown}); record one with --snapshot-update",
            )
        stored = Baseline.from_json(text, source=shown)
        for what, old, new in (
            ("configuration", stored.config_hash, current.config_hash),
            ("benchmark", stored.benchmark, current.benchmark),
        ):
            if old != new:
                return BaselineOutcome(
                    BaselineStatus.CONFIG_CHANGED,
                    str(path),
                    stored,
                    f"baseline {shown} was made under a different {what} "
                    f"({old!r}, now {new!r}); {REFRESH_HINT}",
                )
        return BaselineOutcome(BaselineStatus.LOADED, str(path), stored, f"baseline {shown}")

    previous, note = None, ""
    if text is not None:
        try:
            previous = Baseline.from_json(text, source=shown)
        except BaselineError:
            note = " (replaced an unreadable file)"
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
    return BaselineOutcome(status, str(path), previous, f"baseline {status} ({shown}){note}")


def _display(path: Path, snapshot: SnapshotAssertion) -> str:
    root = snapshot.session.pytest_session.config.rootpath
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

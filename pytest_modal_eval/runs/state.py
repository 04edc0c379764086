"""What a run knows about its selected examples, held in columns: a few bytes per rollout.

One object per example (dicts of rewards, metrics and errors) cost ~660 bytes each for the
whole run, 66 MB at 100,000 examples. Here every (example, rollout) is a slot in flat arrays:
finished flag, reward, truncation flag, and one float column per metric; errors, which are
rare, live in a dict keyed by slot. An example id maps to its first position in the selection
(:class:`Positions`), so a duplicated id shares one state, as it shares one checkpoint entry.

An environment with several seats (a two-player game) records one record per seat per rollout
(its ``agent`` names the seat): each seat has its own ``rollouts`` slots of an example, and the
example is finished once every seat's every rollout is. Rewards, metrics and summaries are one
seat's (the headline seat, unless another is named); a missing rollout is one any seat misses.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytest_modal_eval.runs.store import Checkpoint, Positions, describe_error
from pytest_modal_eval.stats.summary import ExampleRewards


class RunState:
    def __init__(
        self,
        example_ids: Sequence[int],
        rollouts: int,
        seats: Sequence[str] = (),
        headline: str | None = None,
    ) -> None:
        self.example_ids = example_ids
        self.rollouts = rollouts
        # With several seats, seat i of an example holds slots i * rollouts .. of its width;
        # with one (or none), records are keyed by rollout alone, whatever their ``agent``.
        self.seats = list(seats) if len(seats) > 1 else []
        self._seat_index: dict[Any, int] = {seat: i for i, seat in enumerate(self.seats)}
        self.headline = headline if headline is not None else next(iter(self.seats), None)
        self.width = rollouts * max(1, len(self.seats))
        self.positions = Positions(example_ids)
        slots = len(example_ids) * self.width
        self._done = bytearray(slots)
        self._example_done = bytearray(len(example_ids))  # by position: every rollout finished
        self._rewards = array("d", bytes(8 * slots))
        self._truncated = bytearray(slots)
        self._metrics: dict[str, array[float]] = {}
        # Plays of a seat the episode played several times (the record's ``attempts``), per
        # slot; made when the first such record arrives (0: played once).
        self._plays: array[int] | None = None
        self._errors: dict[int, str] = {}  # slot -> last error of a rollout not yet finished
        self.finished_rollouts = 0

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: Checkpoint,
        example_ids: Sequence[int],
        rollouts: int,
        seats: Sequence[str] = (),
        headline: str | None = None,
    ) -> RunState:
        """Fold the checkpoint in: the first finished record of a rollout wins; until there is
        one, the newest error. Records of examples outside the selection are left on disk."""
        state = cls(example_ids, rollouts, seats, headline)
        state.add(checkpoint.read())
        return state

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            rollout = int(record.get("rollout", 0))
            position = self.positions.get(int(record["example_id"]))
            seat = self._seat_index.get(record.get("agent")) if self.seats else 0
            if position is None or seat is None or not 0 <= rollout < self.rollouts:
                continue
            first = position * self.width
            slot = first + seat * self.rollouts + rollout
            if self._done[slot]:
                continue  # a duplicate from a kill between write and bookkeeping
            if record.get("error"):
                self._errors[slot] = describe_error(record["error"])
                continue
            self._errors.pop(slot, None)
            self._done[slot] = 1
            if all(self._done[first : first + self.width]):
                self._example_done[position] = 1
            self._rewards[slot] = float(record.get("reward") or 0.0)
            self._truncated[slot] = bool(record.get("is_truncated"))
            if len(attempts := record.get("attempts") or ()) > 1:
                if self._plays is None:
                    self._plays = array("I", bytes(4 * len(self._done)))
                self._plays[slot] = len(attempts)
            for name, value in (record.get("metrics") or {}).items():
                self._set_metric(name, slot, value)
            self.finished_rollouts += 1

    def _set_metric(self, name: str, slot: int, value: Any) -> None:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return  # not a number: kept in the checkpoint, left out of the averages
        column = self._metrics.get(name)
        if column is None:
            column = self._metrics[name] = array("d", [math.nan]) * len(self._done)
        column[slot] = number

    def _column(self, seat: str | None) -> int:
        """The first of ``seat``'s slots within an example's (None: the headline seat's)."""
        if not self.seats:
            return 0
        name = self.headline if seat is None else seat
        return self._seat_index[name] * self.rollouts

    def _slots(self, example_id: int, seat: str | None = None) -> range:
        first = self.positions[example_id] * self.width + self._column(seat)
        return range(first, first + self.rollouts)

    def missing(self, example_id: int) -> list[int]:
        """The rollouts of this example some seat has no finished record of, in order."""
        first = self.positions[example_id] * self.width
        return [
            r
            for r in range(self.rollouts)
            if not all(self._done[first + s + r] for s in range(0, self.width, self.rollouts))
        ]

    def finished(self, example_id: int) -> bool:
        return bool(self._example_done[self.positions[example_id]])

    def rewards(self, example_id: int, seat: str | None = None) -> list[float]:
        """Rewards of a finished example's rollouts, in rollout order (one seat's: None is the
        headline seat)."""
        return [self._rewards[slot] for slot in self._slots(example_id, seat)]

    def error(self, example_id: int) -> str | None:
        """The error of this example's first unfinished rollout that has one (any seat's)."""
        first = self.positions[example_id] * self.width
        slots = range(first, first + self.width)
        return next((self._errors[s] for s in slots if s in self._errors), None)

    def any_error(self) -> str | None:
        return next(iter(self._errors.values()), None)

    def completed_ids(self) -> list[int]:
        """Finished examples, sorted by id."""
        completed: list[int] = self.completed_id_array().tolist()
        return completed

    def completed_id_array(self) -> npt.NDArray[np.int64]:
        """Finished examples, sorted by id, as an array (for checkpoint_meta.json, rewritten
        every second: vectorised, ~1 ms at 100,000 examples where a Python loop took ~60 ms)."""
        ids = np.asarray(self.example_ids, dtype=np.int64)
        ids = ids[np.frombuffer(self._example_done, dtype=np.bool_)]
        if not np.all(ids[1:] > ids[:-1]):  # usually already sorted and distinct
            ids = np.unique(ids)
        return ids

    def truncated(self, example_id: int) -> int:
        return sum(self._truncated[slot] for slot in self._slots(example_id))

    def metric_means(self, example_ids: Iterable[int]) -> dict[str, float]:
        """Each metric's mean over the headline seat's rollouts of the given examples that
        reported it."""
        positions = np.fromiter(map(self.positions.__getitem__, example_ids), np.intp)
        return self._metric_means(positions, None)

    def _metric_means(
        self, positions: npt.NDArray[np.intp] | None, seat: str | None
    ) -> dict[str, float]:
        """Metric means over ``seat``'s rollouts at ``positions`` (None: every position)."""
        means: dict[str, float] = {}
        for name, column in self._metrics.items():
            values = self._rows(np.frombuffer(column, dtype=np.float64), positions, seat).ravel()
            missing = np.isnan(values)
            if missing.any():
                values = values[~missing]
            if len(values):
                means[name] = math.fsum(_floats(values)) / len(values)
        return means

    def _rows(
        self,
        column: npt.NDArray[Any],
        positions: npt.NDArray[np.intp] | None,
        seat: str | None = None,
    ) -> Any:
        """A per-slot column as one row of ``seat``'s ``rollouts`` per position (None: a view
        of all positions)."""
        start = self._column(seat)
        rows = column.reshape(-1, self.width)
        if self.seats:
            rows = rows[:, start : start + self.rollouts]
        return rows if positions is None else rows[positions]

    def summary(self, seat: str | None = None) -> Summary:
        """What the end of a run reports, computed on the columns (``seat``'s rewards and
        metrics with several seats; None: the headline seat's).

        Per selected entry (an id selected twice counts twice, as its rollouts do), except the
        rewards, which hold each finished example once. No per-example Python objects: a dict
        of reward lists keyed by str id, and the lists of ids and slots behind the metric
        means, held ~30 MB at the end of a 100,000-example run. When every example finished
        (the usual end), the rewards are views of the run's own columns, not copies.
        """
        done = np.frombuffer(self._example_done, dtype=np.bool_)
        # A duplicated id shares its first position, the only one ever marked done.
        unique: npt.NDArray[np.intp] | None = None if done.all() else np.flatnonzero(done)
        if self.positions.identity:
            selected, unfinished = unique, np.flatnonzero(~done)
        else:
            selection = np.fromiter(map(self.positions.__getitem__, self.example_ids), np.intp)
            finished = done[selection]
            selected, unfinished = selection[finished], np.flatnonzero(~finished)
        errored = {}
        for index in unfinished.tolist():
            example_id = self.example_ids[index]
            errored[example_id] = self.error(example_id) or "not evaluated"
        ids = np.asarray(self.example_ids, dtype=np.int64)
        truncated = self._rows(np.frombuffer(self._truncated, dtype=np.uint8), selected, seat)
        attempts = None
        if self._plays is not None:
            plays = self._rows(np.frombuffer(self._plays, dtype=np.uint32), selected, seat)
            plays = np.maximum(plays.ravel(), 1)  # 0: the seat played once
            if len(plays) and plays.max() > 1:
                attempts = {
                    "per_rollout": [int(plays.min()), int(plays.max())],
                    "plays": int(plays.sum(dtype=np.int64)),
                }
        return Summary(
            rewards=ExampleRewards(
                ids if unique is None else ids[unique],
                self._rows(np.frombuffer(self._rewards, dtype=np.float64), unique, seat),
            ),
            errored=errored,
            truncated_rollouts=int(truncated.sum(dtype=np.int64)),
            metric_means=self._metric_means(selected, seat),
            attempts=attempts,
        )


def _floats(values: npt.NDArray[np.float64], chunk: int = 8192) -> Iterator[float]:
    """The values as Python floats, a chunk at a time: fsum over them is ~10x faster than over
    numpy scalars, and no list of every value (~3 MB at 100,000 rollouts) is made."""
    for start in range(0, len(values), chunk):
        yield from values[start : start + chunk].tolist()


@dataclass(frozen=True)
class Summary:
    rewards: ExampleRewards  # finished examples, each once, in selection order
    errored: dict[int, str]  # unfinished example -> its error, or "not evaluated"
    truncated_rollouts: int  # over finished selected entries
    metric_means: dict[str, float]  # over the rollouts of finished selected entries
    # A seat played several times in an episode (best-of-n's attempts): plays per rollout
    # (fewest, most) and all plays, over the rollouts of finished selected entries; None when
    # every rollout played it once.
    attempts: dict[str, Any] | None = None

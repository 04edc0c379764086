"""One sampling seed per rollout: rollout ``r`` of an example asks with ``sampling.seed + r``.

verifiers sends every rollout of a group with the same sampling arguments. With a fixed seed
(``sampling.seed`` is 0 unless set to null) vLLM draws every rollout of an example from the
same random stream, so at temperature > 0 the rollouts come back identical: 32 rollouts of an
AIME problem would be one answer counted 32 times, and the spread the extra rollouts are meant
to average out would never be seen. Offsetting the seed per rollout keeps a run reproducible
(the same seeds every time, and after a resume the rollouts still missing get theirs) while
each rollout samples on its own. Rollout 0 keeps the configured seed, so a single-rollout
benchmark sends exactly what it did before.

The adapter's worker opens a :class:`GroupRollouts` for the rollout indexes it is about to
run; each rollout takes the next index the first time it asks the model and keeps it for its
later turns. The index goes back with the rollout's output (a state column), so its checkpoint
record carries the rollout index its seed came from, whatever order the rollouts asked in.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: State columns verifiers hands back with each rollout's output: the rollout index its seed
#: came from, and how long its requests waited for a free request slot.
ROLLOUT_COLUMN = "pytest_modal_eval_rollout"
SLOT_WAIT_COLUMN = "pytest_modal_eval_slot_wait_s"

#: The rollouts of the group the current task runs (set by the adapter's worker).
current_group: contextvars.ContextVar[GroupRollouts | None] = contextvars.ContextVar(
    "pytest_modal_eval_group", default=None
)


class GroupRollouts:
    """Hands the rollout indexes of one group to its rollouts, one each, as they first ask."""

    def __init__(self, rollouts: Iterable[int]) -> None:
        self._free = list(rollouts)
        self._taken: dict[int, int] = {}  # id(rollout state) -> rollout index

    def index_of(self, rollout: object) -> int | None:
        """The rollout index of ``rollout`` (its state object); None for a state beyond the
        group's rollouts (one an environment makes for a side call)."""
        key = id(rollout)  # the states are alive for the whole group
        if key not in self._taken:
            if not self._free:
                return None
            self._taken[key] = self._free.pop(0)
        return self._taken[key]


def seeded(sampling_args: Mapping[str, Any], rollout: int | None) -> Mapping[str, Any]:
    """``sampling_args`` with rollout ``rollout``'s seed; unchanged without a seed."""
    seed = sampling_args.get("seed")
    if not rollout or not isinstance(seed, int) or isinstance(seed, bool):
        return sampling_args
    return {**sampling_args, "seed": seed + rollout}


def match_rollouts(claimed: Sequence[int | None], missing: Sequence[int]) -> list[int]:
    """The rollout index of each of a group's outputs, in output order.

    An output's index is the one its requests were seeded with (``claimed``), so a checkpoint
    record says which seed made it and a resume gives a missing rollout the seed it lacked;
    an output that never asked the model (or claimed nothing usable) takes the lowest index
    left over.
    """
    usable = set(missing)
    indexes: list[int | None] = []
    for index in claimed:
        if index is not None and index in usable:
            usable.discard(index)
            indexes.append(index)
        else:
            indexes.append(None)
    left = iter(sorted(usable))
    matched = []
    for index in indexes:
        if index is None and (index := next(left, None)) is None:
            break  # more outputs than rollouts asked for: the rest are not recorded
        matched.append(index)
    return matched


def match_seat_rollouts(
    outputs: Sequence[dict[str, Any]], missing: Sequence[int]
) -> list[tuple[dict[str, Any], int]]:
    """Each output of a group with its rollout index (:func:`match_rollouts`), matched per
    seat: an environment with several seats gives one output per seat per rollout (``agent``
    names the seat), and each seat's outputs claim the same indexes."""
    by_seat: dict[Any, list[dict[str, Any]]] = {}
    for output in outputs:
        by_seat.setdefault(output.get("agent"), []).append(output)
    matched: list[tuple[dict[str, Any], int]] = []
    for group in by_seat.values():
        indexes = match_rollouts([o.get(ROLLOUT_COLUMN) for o in group], missing)
        matched += zip(group, indexes, strict=False)
    return matched

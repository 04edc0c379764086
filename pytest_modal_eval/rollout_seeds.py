"""One sampling seed per rollout: rollout ``r`` of an example asks with ``sampling.seed + r``.

verifiers sends every rollout of a group with the same sampling arguments. With a fixed seed
(``sampling.seed`` is 0 unless set to null) vLLM draws every rollout of an example from the
same random stream, so at temperature > 0 the rollouts come back identical: 32 rollouts of an
AIME problem would be one answer counted 32 times, and the spread the extra rollouts are meant
to average out would never be seen. Offsetting the seed per rollout keeps a run reproducible
(the same seeds every time, and after a resume the rollouts still missing get theirs) while
each rollout samples on its own. Rollout 0 keeps the configured seed, so a single-rollout
benchmark sends exactly what it did before.

The adapter's worker opens a :class:`GroupSeeds` for the rollouts it is about to run; each
rollout takes the next offset the first time it asks the model, and keeps it for its later
turns. Which of a group's rollouts gets which offset follows the order their first requests
go out in -- the rollouts of a group are interchangeable, so only the set of seeds matters.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping
from typing import Any

#: The seeds of the group the current task's rollouts belong to (set by the adapter's worker).
current_group: contextvars.ContextVar[GroupSeeds | None] = contextvars.ContextVar(
    "pytest_modal_eval_group_seeds", default=None
)


class GroupSeeds:
    """Hands the rollout indexes of one group to its rollouts, one each."""

    def __init__(self, rollouts: Iterable[int]) -> None:
        self._free = list(rollouts)
        self._taken: dict[int, int] = {}  # id(rollout state) -> rollout index

    def offset_for(self, rollout: object) -> int:
        """The rollout index of ``rollout`` (its state object); 0 once all are handed out."""
        key = id(rollout)  # the states are alive for the whole group
        if key not in self._taken:
            self._taken[key] = self._free.pop(0) if self._free else 0
        return self._taken[key]


def seeded(sampling_args: Mapping[str, Any], rollout: object | None) -> Mapping[str, Any]:
    """``sampling_args`` with this rollout's seed; unchanged without a seed or a group."""
    group = current_group.get()
    seed = sampling_args.get("seed")
    if group is None or rollout is None or not isinstance(seed, int) or isinstance(seed, bool):
        return sampling_args
    offset = group.offset_for(rollout)
    return {**sampling_args, "seed": seed + offset} if offset else sampling_args

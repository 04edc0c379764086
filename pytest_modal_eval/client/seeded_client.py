"""verifiers' chat client, asking with each rollout's own seed (see :mod:`.rollout_seeds`).

It also notes in each rollout's state which rollout index it is and how long its requests
waited for a free request slot (:data:`~.rollout_seeds.ROLLOUT_COLUMN`,
:data:`~.rollout_seeds.SLOT_WAIT_COLUMN`); both come back with the rollout's output
as state columns. Imported when a run starts (it pulls in verifiers).
"""

from __future__ import annotations

from typing import Any

from verifiers.clients import OpenAIChatCompletionsClient

from pytest_modal_eval.client.answer_journal import current_example
from pytest_modal_eval.client.direct_client import slot_waits
from pytest_modal_eval.client.observe import current_rollout
from pytest_modal_eval.client.rollout_seeds import (
    ROLLOUT_COLUMN,
    SLOT_WAIT_COLUMN,
    current_group,
    seeded,
)


class SeededChatClient(OpenAIChatCompletionsClient):  # type: ignore[misc]
    async def get_response(
        self, prompt: Any, model: str, sampling_args: Any, tools: Any = None, **kwargs: Any
    ) -> Any:
        state, group = kwargs.get("state"), current_group.get()
        index = None
        if state is not None and group is not None:
            index = group.index_of(state)
            if index is not None:
                state[ROLLOUT_COLUMN] = index
                sampling_args = seeded(sampling_args, index)
        example = current_example.get()
        waits: list[float] = []
        token = slot_waits.set(waits)
        # Which rollout the request is for, for an observer of the run (traces).
        rollout = current_rollout.set(
            None if example is None or index is None else (example, index)
        )
        try:
            return await super().get_response(prompt, model, sampling_args, tools, **kwargs)
        finally:
            current_rollout.reset(rollout)
            slot_waits.reset(token)
            if state is not None and waits:
                state[SLOT_WAIT_COLUMN] = (state.get(SLOT_WAIT_COLUMN) or 0.0) + sum(waits)

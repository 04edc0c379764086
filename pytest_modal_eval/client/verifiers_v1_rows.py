"""A verifiers v1 environment's tasks as the plugin's rows (``example_id``, ``prompt``,
``answer``, ``info``), made as they are read."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

import verifiers.v1 as vf

from pytest_modal_eval.client.verifiers_v1_load import V1Environment


def dataset_rows(env: V1Environment, num_examples: int | None) -> V1Rows:
    tasks = env.tasks if num_examples is None else env.tasks[:num_examples]
    return V1Rows(tasks)


def prompt_messages(data: vf.TaskData) -> list[dict[str, Any]]:
    """The task's prompt as chat messages, as the harness sends them (system message first)."""
    messages: list[dict[str, Any]] = []
    if data.system_prompt:
        messages.append({"role": "system", "content": data.system_prompt})
    if isinstance(data.prompt, str):
        messages.append({"role": "user", "content": data.prompt})
    elif data.prompt is not None:
        messages += [m.model_dump(mode="json", exclude_none=True) for m in data.prompt]
    return messages


def task_row(example_id: int, task: vf.Task[Any, Any, Any]) -> dict[str, Any]:
    data = task.data
    return {
        "example_id": example_id,
        "prompt": prompt_messages(data),
        "answer": getattr(data, "answer", None),
        "info": getattr(data, "info", None),
    }


class V1Rows(Sequence[dict[str, Any]]):
    """The tasks as plain rows (``example_id`` = the task's position, ``prompt``, ``answer``,
    ``info``), made as they are read."""

    def __init__(self, tasks: Sequence[vf.Task[Any, Any, Any]], start: int = 0) -> None:
        self._tasks = tasks
        self._start = start

    def __len__(self) -> int:
        return len(self._tasks)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> V1Rows: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | V1Rows:
        if isinstance(index, slice):
            positions = range(len(self))[index]
            if positions.step != 1:
                raise ValueError("rows are sliced contiguously")
            return V1Rows(self._tasks[index], self._start + positions.start)
        position = range(len(self))[index]
        return task_row(self._start + position, self._tasks[position])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for position, task in enumerate(self._tasks):
            yield task_row(self._start + position, task)

    def example_ids(self) -> array[int]:
        return array("q", range(self._start, self._start + len(self)))

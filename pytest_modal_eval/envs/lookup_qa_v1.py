"""The ``lookup-qa`` environment (verifiers v1, 0.4.x): answer by calling a lookup tool.

Each line of the JSONL data file is ``{"key": ..., "value": ...}``. The task asks "What is the
value of KEY?"; only the taskset's ``lookup`` tool (an MCP server, ``kv_lookup`` to the model)
knows it, so a rollout takes at least two model turns: the tool call, then the answer. Reward
1.0 when the final reply's answer (:func:`~pytest_modal_eval.envs.file_qa.final_answer`) is the
value. A rollout that has not answered after ``max_turns`` model turns is stopped
(``@vf.stop``: ``turn_limit``) and scores 0.

The env_args: ``path`` (relative to ``base_dir``, the benchmark's directory), ``system_prompt``
(the text), ``max_turns`` (default 4). Small and deterministic, like file-qa: the plugin's
tests of multi-turn, tool-using v1 rollouts use it.

The tool server runs once per evaluation as a local process (``python -m`` this module), as
verifiers starts a taskset's shared tool servers. Importing this module needs verifiers 0.4.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from pytest_modal_eval.envs.file_qa import (
    answers_match,
    data_file,
    final_answer,
    read_objects,
)

QUESTION = "What is the value of {key}? Look it up with the lookup tool."


def read_table(path: Path) -> list[tuple[str, str]]:
    """Each line's key and value, checked; a problem names the file and line."""
    return [
        (str(record["key"]), str(record["value"]))
        for record in read_objects(path, "lookup-qa", ("key", "value"))
    ]


class LookupToolsetConfig(vf.SharedToolsetConfig):  # type: ignore[misc]
    path: str
    """The data file (absolute)."""


class LookupToolset(vf.Toolset[LookupToolsetConfig]):  # type: ignore[misc]
    TOOL_PREFIX = "kv"

    async def setup(self) -> None:
        self.table = dict(read_table(Path(self.config.path)))

    @vf.tool  # type: ignore[untyped-decorator]
    async def lookup(self, key: str) -> str:
        """The value stored under ``key``."""
        return self.table.get(key, f"no value is stored under {key!r}")


class LookupData(vf.TaskData):  # type: ignore[misc]
    answer: str = ""
    max_turns: int = 4


class LookupTask(vf.Task[LookupData]):  # type: ignore[misc]
    @vf.stop  # type: ignore[untyped-decorator]
    async def turn_limit(self, trace: vf.Trace) -> bool:
        return bool(trace.num_turns >= self.data.max_turns)

    @vf.reward  # type: ignore[untyped-decorator]
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if answers_match(final_answer(trace.last_reply), self.data.answer) else 0.0


class LookupTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    id: str = "lookup-qa"
    path: str
    """The JSONL data file; relative paths are resolved against ``base_dir``."""
    system_prompt: str | None = None  # the text, as file-qa's (not v1's file name)
    max_turns: int = Field(4, ge=2)
    """Model turns before ``turn_limit`` stops a rollout (an answer takes two)."""
    base_dir: str | None = None


class LookupTaskset(vf.Taskset[LookupTask, LookupTasksetConfig]):  # type: ignore[misc]
    def __init__(self, config: LookupTasksetConfig) -> None:
        # Not super().__init__: it would read ``system_prompt`` as a file name.
        self.config = config
        self.system_prompt = None

    def data_path(self) -> Path:
        return data_file(self.config.path, self.config.base_dir)

    def load(self) -> Iterator[LookupTask]:
        for key, value in read_table(self.data_path()):
            data = LookupData(
                prompt=QUESTION.format(key=key),
                system_prompt=self.config.system_prompt or None,
                answer=value,
                max_turns=self.config.max_turns,
            )
            yield LookupTask(data, self.config.task)

    @classmethod
    def toolsets(cls, config: LookupTasksetConfig) -> list[Any]:
        path = Path(config.path)
        if config.base_dir is not None and not path.is_absolute():
            path = Path(config.base_dir) / path
        return [LookupToolset(LookupToolsetConfig(path=str(path.resolve())))]


__all__ = ["LookupTaskset"]

if __name__ == "__main__":  # how verifiers starts the tool server: python -m <this module>
    LookupToolset.run()

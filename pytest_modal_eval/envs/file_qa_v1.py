"""The ``file-qa`` environment as a verifiers v1 (0.4.x) taskset.

The same data file, prompts and scoring as :mod:`pytest_modal_eval.envs.file_qa` (the classic
environment): one task per line of the JSONL file, the prompt being the system prompt (if any)
and the question; reward 1.0 when the reply's final answer matches ``answer``
(:func:`~pytest_modal_eval.envs.file_qa.final_answer`, :func:`~.file_qa.answers_match`).
The env_args are the classic ones: ``path`` (relative to ``base_dir``), ``system_prompt`` (the
text itself) and ``base_dir``.

Importing this module needs verifiers 0.4 (``verifiers.v1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import verifiers.v1 as vf

from pytest_modal_eval.envs.file_qa import answers_match, data_file, final_answer, read_records


class FileQAData(vf.TaskData):  # type: ignore[misc]
    answer: str = ""
    #: The line's fields other than question and answer (None when there are none).
    info: dict[str, Any] | None = None


class FileQATask(vf.Task[FileQAData]):  # type: ignore[misc]
    @vf.reward  # type: ignore[untyped-decorator]
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if answers_match(final_answer(trace.last_reply), self.data.answer) else 0.0


class FileQATasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    id: str = "file-qa"
    path: str
    """The JSONL data file; relative paths are resolved against ``base_dir``."""
    # The classic environment's argument: the system prompt's text. (v1's own
    # ``TasksetConfig.system_prompt`` names a file whose text replaces each task's.)
    system_prompt: str | None = None
    base_dir: str | None = None


class FileQATaskset(vf.Taskset[FileQATask, FileQATasksetConfig]):  # type: ignore[misc]
    def __init__(self, config: FileQATasksetConfig) -> None:
        # Not super().__init__: it would read ``system_prompt`` as a file name. The prompt is
        # part of each task's data instead, as in the classic environment.
        self.config = config
        self.system_prompt = None

    def data_path(self) -> Path:
        return data_file(self.config.path, self.config.base_dir)

    def load(self) -> Iterator[FileQATask]:
        for question, answer, extra in read_records(self.data_path()):
            data = FileQAData(
                prompt=question,
                system_prompt=self.config.system_prompt or None,
                answer=answer,
                info=extra or None,
            )
            yield FileQATask(data, self.config.task)


__all__ = ["FileQATaskset"]

"""The ``file-qa`` environment: question/answer pairs from a JSONL file.

Each line is ``{"question": ..., "answer": ...}``; any other fields go to ``info``.
Reward is 1.0 when the completion's final answer matches ``answer``: the content of the
last ``\\boxed{...}`` if there is one, else the last number, else the stripped last line.
Numeric answers compare numerically (``3.0`` equals ``3``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


class FileQAError(ValueError):
    """A data file that cannot be used; the message names the file, the line and the fix."""


def data_file(path: str, base_dir: str | None) -> Path:
    """An environment's ``env_args.path``: relative paths are relative to ``base_dir`` (the
    benchmark YAML's directory)."""
    found = Path(path)
    if base_dir is not None and not found.is_absolute():
        found = Path(base_dir) / found
    return found.resolve()


def read_objects(path: Path, env_id: str, fields: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """Each non-blank line of a JSONL data file: a JSON object holding ``fields``. A problem is
    a :class:`FileQAError` naming the file, the line and what each line needs."""
    if not path.is_file():
        raise FileQAError(
            f"{env_id}: data file {path} does not exist "
            "(env_args.path is relative to the benchmark YAML)"
        )
    needs = "{" + ", ".join(f'"{field}": ...' for field in fields) + "}"
    count = 0
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FileQAError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise FileQAError(f"{path}:{number}: expected a JSON object, got {line.strip()!r}")
            missing = [field for field in fields if field not in record]
            if missing:
                raise FileQAError(
                    f"{path}:{number}: missing {' and '.join(map(repr, missing))}; "
                    f"each line needs {needs}"
                )
            count += 1
            yield record
    if not count:
        raise FileQAError(f"{path}: no examples (the file is empty)")


def read_records(path: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Each line's question, answer and other fields, checked; a problem names its line."""
    for record in read_objects(path, "file-qa", ("question", "answer")):
        extra = {k: v for k, v in record.items() if k not in ("question", "answer")}
        yield str(record["question"]), str(record["answer"]), extra


def final_answer(text: str) -> str:
    """The answer a completion commits to (see the module docstring for the rule)."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    numbers = NUMBER.findall(text)
    if numbers:
        return str(numbers[-1])
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def answers_match(given: str, expected: str) -> bool:
    given_number, expected_number = _as_number(given), _as_number(expected)
    if given_number is not None and expected_number is not None:
        return math.isclose(given_number, expected_number, rel_tol=1e-9, abs_tol=1e-12)
    return _normalise(given) == _normalise(expected)


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start == -1:
        return None
    depth, index = 1, start + len("\\boxed{")
    for position in range(index, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[index:position]
    return None  # unclosed: treat as no box


def _as_number(text: str) -> float | None:
    cleaned = text.strip().rstrip(".").replace(",", "").lstrip("$")
    try:
        return float(cleaned)
    except ValueError:
        return None


def _normalise(text: str) -> str:
    return " ".join(text.strip().rstrip(".").split()).casefold()


def load_environment(
    path: str, system_prompt: str | None = None, base_dir: str | None = None
) -> Any:
    """Build the verifiers environment (called through ``vf.load_environment('file-qa')``)."""
    import verifiers as vf

    data_path = Path(path)
    if base_dir is not None and not data_path.is_absolute():
        data_path = Path(base_dir) / data_path
    dataset = _eval_dataset(data_path, system_prompt)

    def correct(completion: Any, answer: str, **_: Any) -> float:
        text = completion if isinstance(completion, str) else _last_assistant_text(completion)
        return 1.0 if answers_match(final_answer(text), answer) else 0.0

    rubric = vf.Rubric(funcs=[correct], weights=[1.0])
    # No system_prompt here: the prompts already carry it.
    return vf.SingleTurnEnv(eval_dataset=dataset, rubric=rubric)


#: Rows converted to Arrow at a time: bounds the Python objects alive while loading.
CHUNK_ROWS = 10_000


def _eval_dataset(path: Path, system_prompt: str | None) -> Any:
    """The dataset verifiers would build from question + system_prompt, built column-wise.

    verifiers' own way (a row dict per line, ``Dataset.from_list``, then a ``datasets.map``
    adding the chat prompt) briefly held ~1.4 kB per row in Python objects (136 MB at
    100,000 rows) and cost ~25 us a row on every run and resume. Here rows become Arrow
    columns :data:`CHUNK_ROWS` at a time, the ``prompt`` column (the system message if any,
    then the question as the user message) assembled by pyarrow.
    """
    import pyarrow as pa
    from datasets import Dataset

    chunks = []
    infos: list[dict[str, Any] | None] = []
    questions: list[str] = []
    answers: list[str] = []
    for question, answer, extra in read_records(path):
        questions.append(question)
        answers.append(answer)
        infos.append(extra or None)  # None, not {}: an all-empty struct confuses datasets
        if len(questions) == CHUNK_ROWS:
            chunks.append(_chunk(questions, answers, system_prompt))
            questions, answers = [], []
    if questions:
        chunks.append(_chunk(questions, answers, system_prompt))
    table = pa.concat_tables(chunks)
    if any(info is not None for info in infos):
        # Extra fields of any shape: let datasets infer their type, as from_list would.
        table = table.append_column("info", Dataset.from_dict({"info": infos}).data.table["info"])
    # datasets would fingerprint an in-memory table by serialising and hashing all of it (a
    # transient copy of the data); the file's identity and the prompt say the same.
    stat = path.stat()
    identity = json.dumps([str(path.resolve()), stat.st_size, stat.st_mtime_ns, system_prompt])
    dataset = Dataset(table, fingerprint=hashlib.sha256(identity.encode()).hexdigest()[:16])
    # Arrow's allocator keeps what the conversion freed (~27 MB at 100,000 rows); give it back.
    pa.default_memory_pool().release_unused()
    return dataset


def _chunk(questions: list[str], answers: list[str], system_prompt: str | None) -> Any:
    import pyarrow as pa

    turn = ["system", "user"] if system_prompt else ["user"]
    contents: list[str] = []
    if system_prompt:
        for question in questions:
            contents += (system_prompt, question)
    else:
        contents = questions
    messages = pa.StructArray.from_arrays(
        [pa.array(turn * len(questions), pa.string()), pa.array(contents, pa.string())],
        ["role", "content"],
    )
    offsets = pa.array(range(0, len(contents) + 1, len(turn)), pa.int32())
    return pa.table(
        {
            "question": pa.array(questions, pa.string()),
            "answer": pa.array(answers, pa.string()),
            "prompt": pa.ListArray.from_arrays(offsets, messages),
        }
    )


def _last_assistant_text(messages: Any) -> str:
    for message in reversed(messages or []):
        if message.get("role") == "assistant":
            content = message.get("content") or ""
            return content if isinstance(content, str) else str(content)
    return ""

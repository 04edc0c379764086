"""The ``file-qa`` environment: question/answer pairs from a JSONL file.

Each line is ``{"question": ..., "answer": ...}``; any other fields go to ``info``.
Reward is 1.0 when the completion's final answer matches ``answer``: the content of the
last ``\\boxed{...}`` if there is one, else the last number, else the stripped last line.
Numeric answers compare numerically (``3.0`` equals ``3``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


class FileQAError(ValueError):
    """A data file that cannot be used; the message names the file, the line and the fix."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Read and check the JSONL file, naming the line of any problem."""
    if not path.is_file():
        raise FileQAError(
            f"file-qa: data file {path} does not exist "
            "(env_args.path is relative to the benchmark YAML)"
        )
    rows: list[dict[str, Any]] = []
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
            missing = [key for key in ("question", "answer") if key not in record]
            if missing:
                raise FileQAError(
                    f"{path}:{number}: missing {' and '.join(map(repr, missing))}; "
                    'each line needs {"question": ..., "answer": ...}'
                )
            extra = {k: v for k, v in record.items() if k not in ("question", "answer")}
            rows.append(
                {
                    "question": str(record["question"]),
                    "answer": str(record["answer"]),
                    "info": extra,
                }
            )
    if not rows:
        raise FileQAError(f"{path}: no examples (the file is empty)")
    return rows


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
    from datasets import Dataset

    data_path = Path(path)
    if base_dir is not None and not data_path.is_absolute():
        data_path = Path(base_dir) / data_path
    rows = read_rows(data_path)
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for row in rows:
        if not row["info"]:
            del row["info"]  # an all-empty column confuses datasets' schema inference
        # The chat prompt verifiers would build from question + system_prompt, built here in
        # one pass: verifiers' own way is a datasets.map over every row (~25 us a row, paid
        # again by every run and every resume of a large file).
        row["prompt"] = [*system, {"role": "user", "content": row["question"]}]

    def correct(completion: Any, answer: str, **_: Any) -> float:
        text = completion if isinstance(completion, str) else _last_assistant_text(completion)
        return 1.0 if answers_match(final_answer(text), answer) else 0.0

    rubric = vf.Rubric(funcs=[correct], weights=[1.0])
    # No system_prompt here: the prompts already carry it.
    return vf.SingleTurnEnv(eval_dataset=Dataset.from_list(rows), rubric=rubric)


def _last_assistant_text(messages: Any) -> str:
    for message in reversed(messages or []):
        if message.get("role") == "assistant":
            content = message.get("content") or ""
            return content if isinstance(content, str) else str(content)
    return ""

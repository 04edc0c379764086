"""The bundled file-qa environment's answer extraction and matching."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import dataset_rows
from pytest_modal_eval.envs.file_qa import answers_match, final_answer, load_environment
from pytest_modal_eval.runs.answer_key import fingerprint_rows
from tests.conftest import classic_only


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("The answer is \\boxed{42}.", "42"),
        ("First \\boxed{1}, then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # last box, nested braces
        ("We get 3 apples and 5 pears, so 8 in total.", "8"),  # last number
        ("It costs 1,000 dollars", "1,000"),
        ("Thinking...\nParis\n", "Paris"),  # last non-empty line
        ("\\boxed{unclosed and 7", "7"),  # an unclosed box is no box
        ("", ""),
    ],
)
def test_final_answer(completion: str, expected: str) -> None:
    assert final_answer(completion) == expected


@pytest.mark.parametrize(
    ("given", "expected", "match"),
    [
        ("3.0", "3", True),
        ("1,000", "1000", True),
        ("-0.5", "-.5", True),
        ("42.", "42", True),
        ("41", "42", False),
        ("paris", "Paris", True),
        (" New  York ", "new york", True),
        ("Paris", "London", False),
        ("3", "three", False),
    ],
)
def test_answers_match(given: str, expected: str, match: bool) -> None:
    assert answers_match(given, expected) is match


@classic_only()
@pytest.mark.parametrize("system_prompt", [None, "", "Reply with the number only."])
def test_dataset_is_the_one_verifiers_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, system_prompt: str | None
) -> None:
    """file-qa builds its dataset column-wise, in chunks, with the prompts already in it; it must
    be exactly what verifiers makes of the same rows and system prompt its own way."""
    import verifiers as vf
    from datasets import Dataset

    from pytest_modal_eval.envs import file_qa

    monkeypatch.setattr(file_qa, "CHUNK_ROWS", 2)  # 5 rows: chunks of 2, 2 and 1
    lines: list[dict[str, Any]] = [
        {"question": "What is 2 + 2?", "answer": 4, "source": "x", "level": 1},
        {"question": "Capital of France?", "answer": "Paris"},
        {"question": "Largest planet?", "answer": "Jupiter", "source": "y"},
        {"question": "7 * 6?", "answer": "42"},
        {"question": "Boiling point of water in C?", "answer": "100", "level": 2},
    ]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ours = dataset_rows(load_environment(str(data), system_prompt=system_prompt), None)
    # verifiers' way, as file-qa did it before: one dict per row, info only where there is one.
    reference_rows = []
    for line in lines:
        row: dict[str, Any] = {"question": line["question"], "answer": str(line["answer"])}
        extra = {k: v for k, v in line.items() if k not in ("question", "answer")}
        if extra:
            row["info"] = extra
        reference_rows.append(row)
    reference = vf.SingleTurnEnv(
        eval_dataset=Dataset.from_list(reference_rows),
        system_prompt=system_prompt,
        rubric=vf.Rubric(funcs=[]),
    )
    expected = dataset_rows(reference, None)
    assert list(ours) == list(expected)
    assert fingerprint_rows(ours) == fingerprint_rows(expected)
    assert ours[0]["prompt"][-1] == {"role": "user", "content": "What is 2 + 2?"}
    assert ours[0]["info"] == {"source": "x", "level": 1}

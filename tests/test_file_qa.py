"""The bundled file-qa environment's answer extraction and matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_modal_eval.adapter import dataset_rows
from pytest_modal_eval.envs.file_qa import answers_match, final_answer, load_environment


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


@pytest.mark.parametrize("system_prompt", [None, "", "Reply with the number only."])
def test_prompts_are_the_ones_verifiers_builds(tmp_path: Path, system_prompt: str | None) -> None:
    """file-qa builds the chat prompts itself (one pass, no datasets.map); they must be exactly
    what verifiers makes of the same questions and system prompt."""
    import verifiers as vf
    from datasets import Dataset

    data = tmp_path / "qa.jsonl"
    data.write_text(
        '{"question": "What is 2 + 2?", "answer": "4", "source": "x"}\n'
        '{"question": "Capital of France?", "answer": "Paris"}\n'
    )
    ours = load_environment(str(data), system_prompt=system_prompt)
    reference = vf.SingleTurnEnv(
        eval_dataset=Dataset.from_list(
            [
                {"question": "What is 2 + 2?", "answer": "4"},
                {"question": "Capital of France?", "answer": "Paris"},
            ]
        ),
        system_prompt=system_prompt,
        rubric=vf.Rubric(funcs=[]),
    )
    built = dataset_rows(ours, None)
    expected = dataset_rows(reference, None)
    assert [row["prompt"] for row in built] == [row["prompt"] for row in expected]
    assert [row["example_id"] for row in built] == [0, 1]
    assert built[0]["prompt"][-1] == {"role": "user", "content": "What is 2 + 2?"}

"""The bundled file-qa environment's answer extraction and matching."""

from __future__ import annotations

import pytest

from pytest_modal_eval.envs.file_qa import answers_match, final_answer


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

"""The plugin's own file-qa runner (client/native.py) against real verifiers, on one server.

Both run the same file-qa rows against the same fake server, whose replies are chosen to be
awkward for the answer's extraction and for a client's parsing: nested braces, several
``\\boxed``, whitespace, unicode, an empty reply, a null one, a reply cut at max_tokens, one
with reasoning, a server error and an unreachable server. The requests the server received must
be the same (body and key order: the answer journal keys on the bytes), and so must every
record as ``results.jsonl`` would hold it, but for the times. Runs under the locked verifiers
0.3 (classic API) and again under 0.4 (v1 API) in scripts/test.sh.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_modal_eval.client import native, verifiers_adapter
from pytest_modal_eval.envs.file_qa import final_answer
from pytest_modal_eval.runs.record import rollout_record
from pytest_modal_eval.runs.store import json_default
from pytest_modal_eval.serving.endpoint import Endpoint
from tests.conftest import FakeServer

#: Question -> (the server's reply, the expected answer).
CASES: dict[str, tuple[Any, str]] = {
    "Q-nested": ("So \\boxed{\\frac{1}{2}} it is", "\\frac{1}{2}"),
    "Q-several": ("First \\boxed{1}, then \\boxed{2}.", "2"),
    "Q-spaces": ("  \n  \\boxed{ 42 }  \n\n", "42"),
    "Q-unicode": ("Die Antwort ist \\boxed{Zürich} — ✓", "Zürich"),
    "Q-miss": ("I think \\boxed{7}", "8"),
    "Q-number": ("We get 3 apples and 5 pears, so 8.", "8"),
    "Q-unclosed": ("\\boxed{unclosed and 7", "7"),
    "Q-empty": ("", "0"),
    "Q-null": ({"content": None}, "0"),
    "Q-cut": ({"content": "The answer is \\boxed{12", "finish_reason": "length"}, "12"),
    "Q-reasoning": ({"content": "\\boxed{5}", "reasoning_content": "2 + 3 = 5"}, "5"),
    "Q-reasoning-only": ({"content": "", "reasoning": "thinking about 9"}, "9"),
}

SAMPLING = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "seed": 3}
TIMES = ("generation_ms", "slot_wait_ms", "scoring_ms", "total_ms")


def write_data(tmp_path: Path) -> Path:
    lines = [
        {"question": question, "answer": answer, **({"source": "x"} if i == 0 else {})}
        for i, (question, (_, answer)) in enumerate(CASES.items())
    ]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    return path


def evaluate(
    api: Any, tmp_path: Path, base_url: str, *, rollouts: int = 2
) -> dict[tuple[int, int], dict[str, Any]]:
    """Every example of file-qa through ``api`` (an adapter implementation): its records as
    results.jsonl holds them, by (example, rollout), without the times."""
    env = api.load_environment(
        "file-qa", {"path": "qa.jsonl", "system_prompt": "Box it."}, tmp_path
    )
    finished: dict[tuple[int, int], dict[str, Any]] = {}

    def on_example(example_id: int, outputs: list[dict[str, Any]]) -> None:
        for output in outputs:
            rollout = output["pytest_modal_eval_rollout"]
            record = rollout_record(output, rollout, "file-qa")
            for name in TIMES:
                record.pop(name)
            finished[(example_id, rollout)] = json.loads(json.dumps(record, default=json_default))

    asyncio.run(
        api.run_examples(
            env,
            api.dataset_rows(env, None),
            endpoint=Endpoint(base_url=base_url, model="test-model"),
            sampling_args=dict(SAMPLING),
            rollouts=rollouts,
            max_concurrent_requests=1,
            request_timeout=10,
            max_retries=0,
            on_example=on_example,
        )
    )
    return finished


def received(server: FakeServer) -> list[tuple[list[str], dict[str, Any]]]:
    """The bodies the server received since the last reset, each with its keys in order, in
    the order of their questions and seeds (the two runs may send concurrently otherwise)."""
    bodies = httpx.get(f"{server.url}/admin/bodies", timeout=10).json()
    found = [(list(body), body) for body in bodies]
    return sorted(found, key=lambda pair: json.dumps(pair[1], sort_keys=True))


def test_records_and_requests_are_verifiers_own(tmp_path: Path, fake_server: FakeServer) -> None:
    write_data(tmp_path)
    replies = {question: reply for question, (reply, _) in CASES.items()}
    fake_server.configure(replies=replies, record_bodies=True)
    framework = verifiers_adapter.implementation()  # the installed verifiers' own API
    theirs = evaluate(framework, tmp_path, fake_server.base_url)
    their_requests = received(fake_server)
    fake_server.configure(reset_stats=True)
    ours = evaluate(native, tmp_path, fake_server.base_url)
    our_requests = received(fake_server)

    assert len(their_requests) == 2 * len(CASES)
    assert our_requests == their_requests
    assert sorted(ours) == sorted(theirs) == [(e, r) for e in range(len(CASES)) for r in (0, 1)]
    for key, record in theirs.items():
        assert ours[key] == record, key
        text = "".join(m.get("content") or "" for m in record["completion"])
        assert final_answer(text) == final_answer(
            "".join(m.get("content") or "" for m in ours[key]["completion"])
        )
    # The cases say what they test: answers found, one missed, the empty reply scored by the
    # installed API's rule (an error in 0.3, a miss in 0.4), the cut reply marked truncated.
    rewards = {question: theirs[(i, 0)]["reward"] for i, question in enumerate(CASES)}
    assert rewards["Q-nested"] == rewards["Q-several"] == rewards["Q-unicode"] == 1.0
    assert rewards["Q-miss"] == 0.0
    assert theirs[(list(CASES).index("Q-cut"), 0)]["is_truncated"] is True
    assert theirs[(0, 0)]["info"] == {"source": "x"}


def test_failed_requests_are_recorded_as_verifiers_records_them(
    tmp_path: Path, fake_server: FakeServer
) -> None:
    write_data(tmp_path)
    fake_server.configure(fail_rate=1.0, fail_status=500, fail_message="injected failure")
    framework = verifiers_adapter.implementation()
    theirs = evaluate(framework, tmp_path, fake_server.base_url, rollouts=1)
    ours = evaluate(native, tmp_path, fake_server.base_url, rollouts=1)
    assert ours == theirs
    assert all(record["error"] is not None for record in ours.values())

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        unreachable = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    theirs = evaluate(framework, tmp_path, unreachable, rollouts=1)
    ours = evaluate(native, tmp_path, unreachable, rollouts=1)
    assert ours == theirs
    assert all(record["error"] is not None for record in ours.values())


@pytest.mark.parametrize(
    ("env_args", "problem"),
    [
        ({"path": "qa.jsonl", "pathh": "x"}, "'pathh'"),
        ({}, "'path'"),
        ({"path": "missing.jsonl"}, "does not exist"),
    ],
)
def test_bad_env_args_name_the_fix(tmp_path: Path, env_args: dict[str, Any], problem: str) -> None:
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    write_data(tmp_path)
    with pytest.raises(EnvironmentLoadError, match=problem):
        native.load_environment("file-qa", env_args, tmp_path)

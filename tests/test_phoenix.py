"""Traces in Arize Phoenix, the trace UI users run (the ``phoenix`` tier): a 100-example,
2-rollout benchmark shows, through Phoenix's REST API, 200 rollout spans under their examples
with the GenAI attributes and rewards, and no secret in any span; in-process and with -n 2.
Phoenix runs from its own environment (``MODAL_EVAL_PHOENIX``; see tests/support/phoenix_server.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import BenchmarkProject, read_jsonl
from tests.support.phoenix_server import Phoenix, phoenix_python

pytestmark = pytest.mark.phoenix

API_KEY = "sk-phoenix-secret-71d3a0be52"


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    server = Phoenix(phoenix_python(), tmp_path_factory.mktemp("phoenix"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _wait_for(phoenix: Phoenix, project: str, rollouts: int) -> list[dict[str, Any]]:
    """The project's spans once ``rollouts`` rollout spans are in (Phoenix stores spans a
    moment after it accepts them)."""
    deadline = time.monotonic() + 180
    while True:
        spans = phoenix.spans(project)
        if sum(s["name"].startswith("rollout ") for s in spans) >= rollouts:
            return spans
        if time.monotonic() > deadline:
            return spans
        time.sleep(2)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_phoenix_shows_every_rollout_under_its_example(
    project: BenchmarkProject,
    phoenix: Phoenix,
    monkeypatch: pytest.MonkeyPatch,
    xdist: list[str],
) -> None:
    name = f"evals-{'xdist' if xdist else 'in-process'}"
    for variable in [v for v in os.environ if v.startswith("OTEL_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.url)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={name}")
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    # A gateway that fails a few requests, echoing the request's key in its error.
    project.server.configure(require_key=API_KEY, fail_rate=0.05, echo_auth=True, accuracy=0.7)
    project.add(
        "hundred",
        n=100,
        extra_yaml="eval: {rollouts: 2, max_retries: 0}",
        gate="gate: {min_avg_reward: 0.0, max_error_rate: 1.0}",
    )
    result = project.run_subprocess("--api-key-env", "OPENAI_API_KEY", *xdist)
    assert result.ret == 0, result.stdout.str()
    assert "traces:" not in result.stdout.str()

    spans = _wait_for(phoenix, name, 200)
    by_id = {s["context"]["span_id"]: s for s in spans}
    rollouts = [s for s in spans if s["name"].startswith("rollout ")]
    examples = [s for s in spans if s["name"].startswith("example ")]
    requests = [s for s in spans if s["name"] == "chat test-model"]
    assert (len(rollouts), len(examples), len(requests)) == (200, 100, 200)
    assert len({s["context"]["trace_id"] for s in spans}) == 1

    results = project.run_dirs("hundred")[0] / "results.jsonl"
    records = {(r["example_id"], r["rollout"]): r for r in read_jsonl(results)}
    assert len(records) == 200
    for rollout in rollouts:
        attributes = rollout["attributes"]
        key = (attributes["modal_eval.example.id"], attributes["modal_eval.rollout.index"])
        record = records.pop(key)
        example = by_id[rollout["parent_id"]]
        assert example["name"] == f"example {key[0]}"
        assert by_id[example["parent_id"]]["name"] == "benchmark hundred"
        if record["error"] is None:
            assert attributes["modal_eval.reward"] == record["reward"]
            assert rollout["status_code"] != "ERROR"
        else:
            assert rollout["status_code"] == "ERROR"
    assert not records
    for request in requests:
        attributes = request["attributes"]
        assert by_id[request["parent_id"]]["name"].startswith("rollout ")
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == "test-model"
        if request["status_code"] != "ERROR":
            assert attributes["gen_ai.usage.input_tokens"] == 10
    assert API_KEY not in json.dumps(spans)

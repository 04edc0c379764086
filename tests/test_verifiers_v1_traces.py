"""verifiers v1 (0.4.x) traces: each rollout of a tool-using taskset is its model requests
and its tool calls (``execute_tool``) under the rollout's span, seen by a real OTLP/HTTP
receiver on 127.0.0.1. Runs when verifiers 0.4 is installed (scripts/test.sh's second pass).
"""

from __future__ import annotations

import json
import time

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.conftest import BenchmarkProject
from tests.support.otlp_receiver import OtlpReceiver
from tests.test_verifiers_v1_tools import lookup_yaml

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")


def test_tool_calls_are_spans_of_their_rollout(
    project: BenchmarkProject, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url + "/v1/traces")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    lookup_yaml(project, "kv", 3, "{max_retries: 0, rollouts: 2}")
    project.server.configure(call_tools=True)
    project.run_subprocess().assert_outcomes(passed=1)
    deadline = time.monotonic() + 5
    while len(receiver.named("execute_tool ")) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)

    spans = receiver.by_id()
    rollouts = receiver.named("rollout ")
    assert len(rollouts) == 6
    for rollout in rollouts:
        children = [s for s in spans.values() if s.parent_id == rollout.span_id]
        names = sorted(s.name for s in children)
        # Two model turns with the tool's call between them, all under the rollout.
        assert names == ["chat test-model", "chat test-model", "execute_tool kv_lookup"], names
        (tool,) = [s for s in children if s.name.startswith("execute_tool ")]
        key = f"k{rollout.attributes['modal_eval.example.id']}"
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.name"] == "kv_lookup"
        assert tool.attributes["gen_ai.tool.call.id"]
        assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"key": key}
        assert (
            tool.attributes["modal_eval.rollout.index"]
            == rollout.attributes["modal_eval.rollout.index"]
        )
        assert tool.status != "ERROR" and rollout.attributes["modal_eval.reward"] == 1.0
        first, second = sorted(
            (s for s in children if s.name.startswith("chat ")), key=lambda s: s.start_ns
        )
        assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
        assert first.end_ns <= tool.start_ns and tool.end_ns <= second.start_ns

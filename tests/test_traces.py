"""OpenTelemetry traces, checked through what a real OTLP/HTTP receiver on 127.0.0.1 stored:
one trace per session, every rollout and request under its parent with the GenAI attributes,
errors as status, no secret in any span, the Authorization header arriving, and a dead or
black-holed collector costing one line and little time."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from pytest_modal_eval.exceptions import OptionError
from pytest_modal_eval.traces import settings
from tests.conftest import BenchmarkProject
from tests.support.otlp_receiver import BlackHole, OtlpReceiver, ReceivedSpan, closed_port_url

API_KEY = "sk-traced-secret-5c1e0b9d7a"  # the endpoint's key, echoed back by a careless gateway
LANGFUSE_AUTH = "Basic " + base64.b64encode(b"pk-lf-1234567890:sk-lf-abcdef123456").decode()
OTEL_VARIABLES = [
    name
    for name in os.environ
    if name.startswith("OTEL_") or name in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY")
]


@pytest.fixture
def traced(project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch) -> BenchmarkProject:
    """The project, with no OTLP variable of this machine's leaking in."""
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return project


def _wait_for(receiver: OtlpReceiver, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(receiver.spans) < count and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_a_session_is_one_trace_of_every_rollout_and_request(
    traced: BenchmarkProject,
    receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    xdist: list[str],
) -> None:
    project = traced
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    # Langfuse's form: a Basic credential, its space percent-encoded.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=" + quote(LANGFUSE_AUTH))
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "openinference.project.name=evals")
    capture = not xdist
    if capture:  # prompts and completions on the spans: they must still hold no secret
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    # A gateway that fails some requests, echoing the request's Authorization in the error.
    project.server.configure(require_key=API_KEY, fail_rate=0.25, echo_auth=True, accuracy=0.5)
    rollouts = "eval: {rollouts: 2, max_retries: 0}"
    tolerant = "gate: {min_avg_reward: 0.0, max_error_rate: 1.0}"
    project.add("alpha", n=6, extra_yaml=rollouts, gate=tolerant)
    project.add("beta", n=4, extra_yaml=rollouts, gate="gate: {min_avg_reward: 0.99}")
    result = project.run_subprocess("--api-key-env", "OPENAI_API_KEY", "-p", "no:randomly", *xdist)
    assert result.ret == 1, result.stdout.str()  # beta's gate fails
    assert "traces:" not in result.stdout.str()  # everything was exported
    sent = project.server.stats()["chat_requests"]
    _wait_for(receiver, sent)

    spans = receiver.by_id()
    assert len({s.trace_id for s in spans.values()}) == 1  # one trace for the whole session
    (session,) = receiver.named("pytest-modal-eval session")
    assert session.parent_id == "" and session.attributes["modal_eval.exit_status"] == 1
    assert session.resource["service.name"] == "pytest-modal-eval"
    assert session.resource["openinference.project.name"] == "evals"

    benchmarks = {s.attributes["modal_eval.benchmark"]: s for s in receiver.named("benchmark ")}
    assert set(benchmarks) == {"alpha", "beta"}
    for name, span in benchmarks.items():
        assert span.parent_id == session.span_id
        run_dir = project.run_dirs(name)[0]
        assert span.attributes["modal_eval.run_id"] == run_dir.name
        assert span.attributes["modal_eval.model"] == "test-model"
        metadata = json.loads((run_dir / "metadata.json").read_text())
        assert span.attributes["modal_eval.verdict"] == metadata["verdict"]
        if "avg_reward" in metadata and metadata.get("n_evaluated"):
            assert span.attributes["modal_eval.reward"] == pytest.approx(metadata["avg_reward"])
    assert benchmarks["alpha"].attributes["modal_eval.verdict"] == "pass"
    assert benchmarks["beta"].attributes["modal_eval.verdict"] == "fail"
    assert benchmarks["beta"].status == "ERROR"

    examples = receiver.named("example ")
    assert len(examples) == 10
    rollout_spans = receiver.named("rollout ")
    assert len(rollout_spans) == 20
    requests = receiver.named("chat ")
    assert len(requests) == sent == 20  # single-turn: one request per rollout
    for example in examples:
        assert spans[example.parent_id].name.startswith("benchmark ")

    for run in ("alpha", "beta"):
        records = [
            json.loads(line)
            for line in (project.run_dirs(run)[0] / "results.jsonl").read_text().splitlines()
        ]
        benchmark = benchmarks[run]
        for record in records:
            (rollout,) = [
                s
                for s in rollout_spans
                if s.attributes["modal_eval.example.id"] == record["example_id"]
                and s.attributes["modal_eval.rollout.index"] == record["rollout"]
                and spans[spans[s.parent_id].parent_id].span_id == benchmark.span_id
            ]
            assert spans[rollout.parent_id].name == f"example {record['example_id']}"
            (request,) = [s for s in requests if s.parent_id == rollout.span_id]
            _check_request(request, errored=record["error"] is not None)
            if record["error"] is None:
                assert rollout.status != "ERROR"
                assert rollout.attributes["modal_eval.reward"] == record["reward"]
                assert rollout.attributes["modal_eval.metric.correct"] == record["correct"]
                assert any(e["name"] == "gen_ai.evaluation.result" for e in rollout.events)
            else:
                assert rollout.status == "ERROR"
                assert rollout.attributes["error.type"]
                assert spans[rollout.parent_id].status == "ERROR"  # its example
    assert any(s.status == "ERROR" for s in requests)  # the injected failures, as errors

    # Usage only on the model request's span: trace UIs add it up over nested spans.
    for span in spans.values():
        if not span.name.startswith("chat "):
            assert not any(k.startswith("gen_ai.usage.") for k in span.attributes), span.name
        assert "gen_ai.system" not in span.attributes
    captured = [s for s in requests if "gen_ai.input.messages" in s.attributes]
    assert len(captured) == (20 if capture else 0)
    if capture:
        messages = json.loads(captured[0].attributes["gen_ai.input.messages"])
        assert messages[0]["role"] == "user" and "What is" in messages[0]["parts"][0]["content"]

    # The collector's credentials arrive, decoded; no secret is in anything it received.
    assert {headers.get("Authorization") for headers, _ in receiver.requests} == {LANGFUSE_AUTH}
    credential = LANGFUSE_AUTH.split()[1]
    for _, body in receiver.requests:
        assert API_KEY.encode() not in body
        assert credential.encode() not in body
    echoed = [s for s in requests if s.status == "ERROR"]
    assert any("[redacted]" in s.status_message for s in echoed)


def _check_request(span: ReceivedSpan, errored: bool) -> None:
    """The GenAI conventions' attributes of a chat request's span."""
    a = span.attributes
    assert span.kind == "SPAN_KIND_CLIENT"
    assert span.name == "chat test-model"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "test-model"
    assert a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
    assert a["gen_ai.request.temperature"] == 0.0 and "gen_ai.request.seed" in a
    if errored:
        assert span.status == "ERROR" and a["error.type"] == "500"
        assert "gen_ai.usage.input_tokens" not in a
    else:
        assert span.status != "ERROR"
        assert a["gen_ai.response.model"] == "test-model"
        assert a["gen_ai.response.finish_reasons"] == ["stop"]
        assert a["gen_ai.usage.input_tokens"] == 10 and a["gen_ai.usage.output_tokens"] > 0
        assert a["gen_ai.response.id"].startswith("chatcmpl-")


TIMING_CONFTEST = """
import json, os, time

import pytest

# How long each process's end of traces takes (a worker's export of its last spans, the
# controller's or the only process's), written to end-<process>.json.
@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    plugins = config.pluginmanager
    tracing = getattr(plugins.get_plugin("modal_eval_worker"), "tracing", None)
    if tracing is None:
        return
    process = os.environ.get("PYTEST_XDIST_WORKER") or "controller"

    def timed(method):
        def run(*args):
            start = time.monotonic()
            try:
                return method(*args)
            finally:
                path = os.path.join(str(config.rootpath), f"end-{process}.json")
                seconds = time.monotonic() - start
                if seconds > 0.0001 or not os.path.exists(path):
                    with open(path, "w") as f:
                        json.dump(seconds, f)
        return run

    tracing.finish_worker = timed(tracing.finish_worker)
    tracing.finish_session = timed(tracing.finish_session)
"""


def _end_seconds(root: Path) -> dict[str, float]:
    found = {path.stem[4:]: json.loads(path.read_text()) for path in root.glob("end-*.json")}
    for path in root.glob("end-*.json"):
        path.unlink()
    return found


def _added(ends: dict[str, float]) -> float:
    """What a session's end took: the slowest worker's, then the controller's."""
    workers = [s for role, s in ends.items() if role != "controller"]
    return ends["controller"] + max(workers, default=0.0)


@pytest.mark.parametrize("collector", ["refused", "black-holed"])
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_a_dead_collector_costs_one_line_and_at_most_two_seconds(
    traced: BenchmarkProject, monkeypatch: pytest.MonkeyPatch, collector: str, xdist: list[str]
) -> None:
    project = traced
    project.pytester.makeconftest(TIMING_CONFTEST)
    project.add("alpha", n=4)
    hole = BlackHole() if collector == "black-holed" else None
    try:
        url = hole.endpoint if hole is not None else closed_port_url()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        result = project.run_subprocess(*xdist)
    finally:
        if hole is not None:
            hole.stop()
    assert result.ret == 0, result.stdout.str()
    lines = [line for line in result.stdout.lines if "traces" in line.lower()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("traces: ") and "not exported to " + url in lines[0]
    everything = result.stdout.str() + result.stderr.str()
    assert "opentelemetry" not in everything.lower() and "Traceback" not in everything
    ends = _end_seconds(project.pytester.path)
    assert ("controller" in ends) and (len(ends) == (3 if xdist else 1)), ends
    assert _added(ends) <= 2.0, ends


def test_without_a_collector_opentelemetry_is_never_imported(traced: BenchmarkProject) -> None:
    """Tracing off costs nothing: a run evaluates a benchmark without importing the SDK, the
    exporter or the plugin's traces (the OpenTelemetry API alone is anthropic's, which
    verifiers imports, and holds no provider)."""
    traced.pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish():
            loaded = sorted(
                m for m in sys.modules
                if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))
                or m.startswith("pytest_modal_eval.traces.") and not m.endswith(".settings")
            )
            print("OTEL MODULES:", loaded)
        """
    )
    traced.add("alpha", n=2)
    result = traced.run_subprocess("-s")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*OTEL MODULES: []*"])


def test_settings_follow_the_variables_and_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert settings.resolve(None, None, {}) is None
    assert settings.resolve(None, None, env) == settings.TraceSettings(
        "http://collector:4318/v1/traces", capture_content=False
    )
    # The traces variable is used as given; the option beats both; the ini comes last.
    specific = {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://lf/api/public/otel/v1/traces"}
    assert settings.resolve(None, None, specific).endpoint == "http://lf/api/public/otel/v1/traces"  # type: ignore[union-attr]
    assert (
        settings.resolve("http://opt:6006", None, specific).endpoint == "http://opt:6006/v1/traces"
    )  # type: ignore[union-attr]
    assert settings.resolve(None, "http://ini:4318", {}).endpoint == "http://ini:4318/v1/traces"  # type: ignore[union-attr]
    assert settings.resolve(None, None, {**env, "OTEL_SDK_DISABLED": "true"}) is None
    assert settings.resolve(None, None, {**env, "OTEL_TRACES_EXPORTER": "none"}) is None
    capture = {**env, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_AND_EVENT"}
    assert settings.resolve(None, None, capture).capture_content  # type: ignore[union-attr]
    with pytest.raises(OptionError, match=r"OTEL_EXPORTER_OTLP_PROTOCOL=grpc: .*http/protobuf"):
        settings.resolve(None, None, {**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(OptionError, match="OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318'"):
        settings.resolve(None, None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})
    headers = {"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Basic%20abc123def456,x-key=k9"}
    assert settings.header_values(headers) == ["Basic abc123def456", "abc123def456", "k9"]


def test_the_option_is_documented_and_checked(traced: BenchmarkProject) -> None:
    traced.pytester.runpytest("--help").stdout.fnmatch_lines(["*--otel-endpoint=URL*"])
    traced.add("alpha", n=1)
    bad = traced.run("--otel-endpoint", "localhost:4318")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--otel-endpoint: 'localhost:4318' is not an http(s) URL*"])


def test_a_protocol_it_cannot_speak_is_a_usage_error(
    traced: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    traced.add("alpha", n=1)
    result = traced.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*OTEL_EXPORTER_OTLP_PROTOCOL=grpc: pytest-modal-eval exports*"])


def test_a_request_span_reads_the_body_as_sent() -> None:
    from pytest_modal_eval.traces import attributes

    name, found = attributes.request_attributes(
        "https://api.example.com/v1/chat/completions",
        {"model": "m", "max_completion_tokens": 32, "stop": "\n", "n": 2, "temperature": 0.7},
    )
    assert name == "chat m"
    assert found["server.address"] == "api.example.com" and found["server.port"] == 443
    assert found["gen_ai.request.max_tokens"] == 32
    assert found["gen_ai.request.stop_sequences"] == ["\n"]
    assert found["gen_ai.request.choice.count"] == 2
    assert attributes.operation("http://h/v1/completions") == ("text_completion", "openai")


def test_examples_a_stopped_run_never_finished_end_as_errors(receiver: OtlpReceiver) -> None:
    """A run stopped mid-way (Ctrl-C, an aborted endpoint) leaves its started examples'
    spans ended as errors, not lost; an example started again ends its first attempt."""
    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.traces.session import TraceSession

    tracing = TraceSession(
        settings.TraceSettings(receiver.url + "/v1/traces", capture_content=False),
        Redactor(),
        session_id="s",
        version="0",
    )
    with tracing.benchmark_item("evals/a.yaml::a", "a", "m", "file-qa"):
        tracing.observer.example_started(1, [0, 1])
        tracing.observer.example_started(2, [0])
        tracing.observer.example_started(2, [0])
        tracing.observer.example_finished(2, [{"rollout": 0, "reward": 1.0, "error": None}])
    tracing.finish_session(0)
    assert tracing.line is None
    _wait_for(receiver, 9)
    by_name: dict[str, list[ReceivedSpan]] = {}
    for span in receiver.spans:
        by_name.setdefault(span.name, []).append(span)
    assert [s.status for s in by_name["example 1"]] == ["ERROR"]
    assert sorted(s.status for s in by_name["rollout 1.0"] + by_name["rollout 1.1"]) == [
        "ERROR",
        "ERROR",
    ]
    assert sorted(s.status for s in by_name["example 2"]) == ["ERROR", "UNSET"]
    finished = [s for s in by_name["rollout 2.0"] if s.status != "ERROR"]
    assert [s.attributes["modal_eval.reward"] for s in finished] == [1.0]


def test_an_early_stopped_run_traces_the_examples_it_dropped_as_dropped_not_errors(
    traced: BenchmarkProject, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the gate is decided, examples taken ahead that sent nothing are dropped: their
    spans end marked ``modal_eval.dropped``, without an error status; every evaluated example
    has its reward, and no span of a server that never failed is an error."""
    project = traced
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    # Answers that take a moment: examples taken ahead wait for a request slot meanwhile.
    project.server.configure(accuracy=1.0, delay=0.05)
    project.add("big", n=400, gate="gate: {min_avg_reward: 0.6, early_stop: true}")
    result = project.run_subprocess("-p", "no:randomly", "--override", "eval.max_concurrent=8")
    assert result.ret == 0, result.stdout.str()
    (run_dir,) = project.run_dirs("big")
    metadata = json.loads((run_dir / "metadata.json").read_text())
    evaluated = metadata["early_stop"]["evaluated"]
    assert evaluated < 400
    _wait_for(receiver, project.server.stats()["chat_requests"])
    examples = receiver.named("example ")
    assert [s for s in receiver.spans if s.status == "ERROR"] == []
    dropped = [s for s in examples if s.attributes.get("modal_eval.dropped")]
    kept = [s for s in examples if not s.attributes.get("modal_eval.dropped")]
    assert len(kept) == evaluated
    assert all(s.attributes.get("modal_eval.example.reward") == 1.0 for s in kept)
    # 8 requests in flight, as many examples taken ahead waiting for a slot (eval.prefetch).
    assert dropped, "no example was taken ahead when the gate was decided"
    requests = receiver.named("chat ")
    sent = [r for r in requests if not r.attributes.get("modal_eval.request.cancelled")]
    assert len(sent) == project.server.stats()["chat_requests"]
    # A request span that was never sent belongs to a dropped example's rollout.
    dropped_ids = {s.span_id for s in dropped}
    rollouts = {s.span_id for s in receiver.named("rollout ") if s.parent_id in dropped_ids}
    assert all(r.parent_id in rollouts for r in requests if r not in sent)

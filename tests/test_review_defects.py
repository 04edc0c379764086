"""Defects found in review, each pinned by a run of the real parts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_modal_eval.config.loader import load_benchmark
from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.serving.broker import Broker, BrokerClient
from pytest_modal_eval.serving.deployments import Deployments
from tests.conftest import REPO, BenchmarkProject
from tests.support.forward_proxy import ForwardProxy, clear_proxy_env


def test_aime2025_tolerates_one_errored_example_of_30() -> None:
    gate = load_benchmark(REPO / "evals" / "aime2025.yaml").config.gate
    assert 1 / 30 <= gate.max_error_rate < 2 / 30


def test_livecodebench_starts_no_sandboxes_ahead() -> None:
    # Its rollouts run tests in sandboxes: costly to set up, so eval.prefetch 0 (docs).
    assert load_benchmark(REPO / "evals" / "livecodebench.yaml").config.eval.prefetch == 0


@pytest.mark.parametrize(
    ("secret_at", "message"),
    [
        ("credentials", "*--base-url must not contain credentials*--api-key-env*"),
        ("query", "*--base-url must not have a query string or fragment*--api-key-env*"),
    ],
)
def test_credentials_in_the_base_url_are_refused_at_start(
    project: BenchmarkProject, secret_at: str, message: str
) -> None:
    project.add("alpha", n=2)
    base = project.server.base_url
    url = (
        base.replace("http://", "http://user:hunter2@")
        if secret_at == "credentials"
        else f"{base}?api_key=hunter2"
    )
    result = project.pytester.runpytest("--model", "test-model", "--base-url", url)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "hunter2" not in result.stdout.str() + result.stderr.str()
    assert not (project.pytester.path / "outputs").exists()


def test_a_baseline_recorded_from_a_failing_run_says_so(project: BenchmarkProject) -> None:
    project.add("alpha", n=4, gate="gate: {min_avg_reward: 0.9}")
    project.server.configure(accuracy=0.0)
    result = project.run("--snapshot-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "alpha (test-model): WARNING: the baseline was recorded (--snapshot-update) from a "
            "run that failed its gate: mean reward 0.000*"
        ]
    )
    project.server.configure(accuracy=1.0)
    passing = project.run("--snapshot-update", "--eval-fresh")
    passing.assert_outcomes(passed=1)
    assert "failed its gate" not in passing.stdout.str()


def test_broker_requests_never_go_through_the_environment_proxy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker's request carries the broker's token (and, to ``/secrets``, the worker's
    secrets): it must stay on 127.0.0.1, whatever HTTP_PROXY says (the proxy here would relay
    it, so only its record tells)."""
    clear_proxy_env(monkeypatch)
    proxy = ForwardProxy()
    proxy.start()
    settings = Settings(
        models=("m",), backend="local", base_url=None, api_key_env="K", output_dir=tmp_path,
        overrides=(), fresh=False, keep_deployment=False, vllm_python=sys.executable, files=(),
    )  # fmt: skip
    deployments = Deployments(settings, tmp_path)
    redactor = Redactor()
    broker = Broker(deployments, redactor)
    broker.start()
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("http_proxy", proxy.url)
        BrokerClient(broker.url, broker.token).plan({"evals/a.yaml::a": "profile"})
        assert deployments._plan == {"evals/a.yaml::a": "profile"}
        BrokerClient(broker.url, broker.token).learn_secrets(["worker-secret-1"])
        assert redactor.values == ["worker-secret-1"]
    finally:
        broker.stop()
        proxy.stop()
    assert proxy.relayed == [], "the broker's token went through HTTP_PROXY"

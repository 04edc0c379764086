"""Shared fixtures: a real OpenAI-compatible server on 127.0.0.1 and benchmark builders."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_modal_eval.client import verifiers_adapter
from pytest_modal_eval.collect import item_run  # noqa: F401  (see below)
from tests.support.hub_server import HubServer
from tests.support.openai_server import DEFAULT_SETTINGS
from tests.support.otlp_receiver import OtlpReceiver

# pytester's in-process runs (`project.run`) drop the modules first imported during them, and
# a C extension (numpy's, for one) cannot be loaded twice in one process. The plugin imports
# its evaluation when the first benchmark item runs, so it is imported here, once, for all.
verifiers_adapter.implementation()

# pytester for the suite only: a `pytest evals/` run in this repository (the demo) loads nothing
# it does not use.
pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent


def classic_only() -> pytest.MarkDecorator:
    """Skip a test of verifiers' classic API (0.3.x) when verifiers 0.4 (v1 API) is installed."""
    from pytest_modal_eval.client.verifiers_adapter import installed_api

    return pytest.mark.skipif(
        installed_api() != "classic", reason="tests verifiers' classic API (0.3.x)"
    )


def _preload_evaluation_stack() -> None:
    """Import what an evaluation imports, before pytester snapshots ``sys.modules``.

    In-process ``pytester.runpytest`` drops modules first imported during the inner run;
    re-importing ``datasets`` then re-registers pyarrow extension types and fails.
    """
    from pytest_modal_eval.client.verifiers_adapter import installed_api

    if installed_api() == "v1":
        import httpcore  # noqa: F401  (httpx imports it lazily: keep one module for all runs)
        import openai
        import verifiers.v1

        from pytest_modal_eval.client import verifiers_v1  # noqa: F401
        from pytest_modal_eval.envs import file_qa_v1  # noqa: F401

        httpx.Client().close()
        openai.AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9/v1")
        return
    import datasets  # noqa: F401
    import verifiers as vf
    from verifiers.clients import resolve_client

    from pytest_modal_eval.envs import file_qa  # noqa: F401

    for name in ("SingleTurnEnv", "Rubric", "ClientConfig"):
        getattr(vf, name)
    resolve_client(vf.ClientConfig(api_base_url="http://127.0.0.1:9/v1"))


_preload_evaluation_stack()


class FakeServer:
    """Handle on ``tests/support/openai_server.py`` running in a subprocess."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url
        self.base_url = f"{url}/v1"

    def configure(self, **settings: Any) -> None:
        response = httpx.post(f"{self.url}/admin/config", json=settings, timeout=10)
        response.raise_for_status()

    def reset(self) -> None:
        self.configure(**DEFAULT_SETTINGS, reset_stats=True)

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(f"{self.url}/admin/stats", timeout=10).json()
        return data

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_fake_server(*extra: str) -> FakeServer:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.openai_server", *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"fake OpenAI server did not start: {line!r}")
    return FakeServer(process, line.split()[-1])


@pytest.fixture(scope="session")
def fake_server_session() -> Iterator[FakeServer]:
    server = start_fake_server()
    yield server
    server.stop()


@pytest.fixture
def fake_server(fake_server_session: FakeServer) -> FakeServer:
    """The shared server, reset to 100% accuracy, no failures, zeroed counters."""
    fake_server_session.reset()
    return fake_server_session


def write_model_dir(path: Path) -> Path:
    """A directory a local server accepts as a model (the checks read the files' names: a
    ``config.json``, weights, a tokenizer); the test servers load nothing from it."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    (path / "tokenizer.json").write_text("{}")
    return path


def arithmetic_rows(n: int, start: int = 10) -> list[dict[str, str]]:
    return [
        {"question": f"What is {start + i} + {i + 3}?", "answer": str(start + 2 * i + 3)}
        for i in range(n)
    ]


class BenchmarkProject:
    """Writes benchmark YAMLs and data into a pytester directory and runs pytest there."""

    def __init__(self, pytester: pytest.Pytester, server: FakeServer) -> None:
        self.pytester = pytester
        self.server = server
        self.evals = pytester.mkdir("evals")
        pytester.makeini("[pytest]\naddopts = -p no:randomly\n")

    def add(
        self,
        name: str,
        *,
        n: int = 10,
        extra_yaml: str = "",
        rows: list[dict[str, Any]] | None = None,
        gate: str = "gate: {min_avg_reward: 0.5}",
    ) -> Path:
        data = self.evals / "data" / f"{name}.jsonl"
        data.parent.mkdir(exist_ok=True)
        data.write_text(
            "".join(json.dumps(r) + "\n" for r in (rows or arithmetic_rows(n))), encoding="utf-8"
        )
        body = textwrap.dedent(
            f"""\
            env_id: file-qa
            env_args:
              path: data/{name}.jsonl
            eval:
              max_retries: 0
            """
        )
        path = self.evals / f"{name}.yaml"
        path.write_text(body + gate + "\n" + textwrap.dedent(extra_yaml), encoding="utf-8")
        return path

    def play_with(self, name: str, env_id: str, module: str, source: str) -> None:
        """Benchmark ``name`` played by ``env_id``, an environment of the test's own: ``module``
        holding ``source``, importable from the project (in-process and in subprocesses). Its
        data file is given as an absolute path: such a module resolves no path against the
        benchmark's directory."""
        self.pytester.makepyfile(**{module: source})
        self.pytester.syspathinsert()
        yaml = self.evals / f"{name}.yaml"
        data = self.evals / "data" / f"{name}.jsonl"
        yaml.write_text(
            yaml.read_text()
            .replace("env_id: file-qa", f"env_id: {env_id}")
            .replace(f"path: data/{name}.jsonl", f"path: {data}")
        )

    def args(self, *extra: str) -> list[str]:
        return ["--model", "test-model", "--base-url", self.server.base_url, *extra]

    def run(self, *extra: str) -> pytest.RunResult:
        return self.pytester.runpytest(*self.args(*extra))

    def run_subprocess(self, *extra: str) -> pytest.RunResult:
        return self.pytester.runpytest_subprocess(*self.args(*extra))

    def run_dirs(self, name: str) -> list[Path]:
        base = self.pytester.path / "outputs" / "evals" / f"{name}--test-model"
        return sorted(p for p in base.iterdir() if p.is_dir()) if base.exists() else []


@pytest.fixture
def project(
    pytester: pytest.Pytester, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> BenchmarkProject:
    # Keep the user's environment out of the runs under test.
    for var in ("MODAL_EVAL_OUTPUT_DIR", "MODAL_EVAL_VLLM_PYTHON", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    # No run under test asks the real Hub which commit a model is: a closed local port answers
    # at once (tests that need a Hub point HF_ENDPOINT at tests/support/hub_server.py).
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    # When this suite itself runs under xdist, inner runs must not look like xdist workers
    # (syrupy, for one, then prints no snapshot summary).
    # Nor may they see CI's variables: pytest then prints whole messages in the short summary
    # too, and tests that count a message would count it twice.
    for var in (
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
        "CI",
        "BUILD_NUMBER",
    ):
        monkeypatch.delenv(var, raising=False)
    return BenchmarkProject(pytester, fake_server)


HUB_TOKEN = "hf_fake_write_token_0123456789"


@pytest.fixture
def hub_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubServer]:
    """A local stand-in for the Hugging Face Hub (tests/support/hub_server.py), with the
    environment pointing huggingface_hub at it and ``HF_TOKEN`` set to :data:`HUB_TOKEN`."""
    server = HubServer(HUB_TOKEN)
    url = server.start()
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # Xet storage is not spoken by the local server; this makes huggingface_hub use Git LFS.
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_DISABLE_XET", True)
    yield server
    server.stop()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def subtest_counts(result: pytest.RunResult) -> dict[str, int]:
    """``{"passed": n, "failed": n, "skipped": n}`` of subtests, from pytest's last line."""
    import re

    last = result.stdout.lines[-1] if result.stdout.lines else ""
    return {kind: int(n) for n, kind in re.findall(r"(\d+) subtests (passed|failed|skipped)", last)}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """A real OTLP/HTTP receiver on 127.0.0.1 (the traces' tests)."""
    server = OtlpReceiver()
    server.start()
    yield server
    server.stop()

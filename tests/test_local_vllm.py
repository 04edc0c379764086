"""The local backend against REAL vLLM (CPU build): start, answer, fail, stop, leave nothing.

Needs ``MODAL_EVAL_VLLM_PYTHON`` (an interpreter with vLLM's CPU build, torch and
transformers); without it every test here is skipped with the reason. vLLM takes ~45-60 s to
start on a 2-core machine, so one server is shared by the tests that only need it running.

Every server a test starts is launched from a fresh working directory, which all of vLLM's
processes inherit: scanning ``/proc/*/cwd`` for it finds every leftover, whatever its process
group. (The environment would not do: vLLM's engine processes set their title with
setproctitle, which overwrites the memory ``/proc/PID/environ`` shows.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pytest_modal_eval.config.schema import InfraConfig, VllmConfig
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.serving.chat_template import TEMPLATES_DIR, sha256_text
from pytest_modal_eval.serving.endpoint import Endpoint, ServerProfile
from pytest_modal_eval.serving.vllm.local import LocalVllmServer
from tests.support import vllm_check

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parent.parent
SERVED = "tiny"
HF_TOKEN_VALUE = "hf_notarealtokenbutsecret123"
MESSAGES = [
    {"role": "system", "content": "Put the final answer in \\boxed{}."},
    {"role": "user", "content": "What is 12 + 30?"},
]


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def vllm_python() -> str:
    # Skips without vLLM, fails instead under MODAL_EVAL_REQUIRE_VLLM=1 (CI).
    return vllm_check.vllm_python()


@pytest.fixture(scope="session")
def tiny_model(
    vllm_python: str, pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """An untrained model of the demo's shape, made offline, cached by the script's hash."""
    return vllm_check.untrained_demo_model(
        vllm_python, pytestconfig.cache, tmp_path_factory.mktemp("m")
    )


@pytest.fixture(scope="session")
def bare_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model without a chat template of its own, so the fallback is what vLLM uses."""
    out = tmp_path_factory.mktemp("bare") / "model"
    shutil.copytree(tiny_model, out)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    return out


def make_profile(model: Path, *, startup_timeout: int = 300, **vllm: object) -> ServerProfile:
    return ServerProfile(
        "local",
        str(model),
        InfraConfig.model_validate({"startup_timeout": startup_timeout}),
        VllmConfig.model_validate(
            {"max_model_len": 512, "dtype": "float32", "enforce_eager": True, **vllm}
        ),
        "base",
    )


def marked_processes(mark: Path) -> list[int]:
    """Live processes whose working directory is ``mark`` (this test process excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and cwd == str(mark):
            found.append(int(entry.name))
    return found


def titles(pids: list[int]) -> list[str]:
    """Process titles (vLLM renames its engine processes, e.g. ``VLLM::EngineCore``)."""
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode().strip())
    return out


def wait_until_gone(mark: Path, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def chat(endpoint: Endpoint) -> httpx.Response:
    return httpx.post(
        f"{endpoint.base_url}/chat/completions",
        json={"model": endpoint.model, "messages": MESSAGES, "max_tokens": 8, "temperature": 0},
        trust_env=False,
        timeout=60,
    )


@dataclass
class Shared:
    server: LocalVllmServer
    endpoint: Endpoint
    mark: Path
    taken_port: int
    startup_s: float


@pytest.fixture(scope="module")
def shared(
    vllm_python: str, bare_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shared]:
    """One real server for the tests that only need it running.

    Its first port is deliberately taken by a listening socket, so this startup also exercises
    the bind-failure retry (vLLM binds before loading the model: the clash costs seconds).
    """
    mark = tmp_path_factory.mktemp("shared-cwd")
    with socket.socket() as taken, pytest.MonkeyPatch.context() as mp:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        # The Hub token, as vLLM reads it: from its environment, never its command line.
        mp.setenv("HF_TOKEN", HF_TOKEN_VALUE)
        server = LocalVllmServer(
            make_profile(bare_model),
            logs_dir=tmp_path_factory.mktemp("shared-vllm"),
            python=vllm_python,
            served_model_name=SERVED,
            port=taken_port,
        )
        mp.chdir(mark)
        started = time.monotonic()
        endpoint = server.start()
        startup_s = time.monotonic() - started
    try:
        yield Shared(server, endpoint, mark, taken_port, startup_s)
    finally:
        server.stop()


# -- a running server ----------------------------------------------------------------------


def test_starts_and_answers_a_chat_completion(shared: Shared) -> None:
    endpoint = shared.endpoint
    assert endpoint.base_url == f"http://127.0.0.1:{shared.server.port}/v1"
    assert endpoint.model == SERVED and endpoint.headers == ()
    models = httpx.get(f"{endpoint.base_url}/models", trust_env=False).json()
    assert [m["id"] for m in models["data"]] == [SERVED]
    response = chat(endpoint)
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body["choices"][0]["message"]["content"], str)
    assert 0 < body["usage"]["completion_tokens"] <= 8
    print(f"vLLM startup (including one port clash): {shared.startup_s:.1f}s")


def test_vllm_applies_the_fallback_template(shared: Shared) -> None:
    base = (TEMPLATES_DIR / "base.jinja").read_text()
    assert shared.endpoint.chat_template == {
        "source": "fallback:base.jinja",
        "sha256": sha256_text(base),
    }
    assert (shared.server.logs_dir / "chat_template.jinja").read_text() == base
    # What vLLM renders for these messages, read back through its tokenizer endpoints.
    root = shared.endpoint.base_url.removesuffix("/v1")
    tokens = httpx.post(
        f"{root}/tokenize",
        json={"model": SERVED, "messages": MESSAGES, "add_generation_prompt": True},
        trust_env=False,
    ).json()["tokens"]
    text = httpx.post(
        f"{root}/detokenize", json={"model": SERVED, "tokens": tokens}, trust_env=False
    ).json()["prompt"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    assert text == env.from_string(base).render(messages=MESSAGES, add_generation_prompt=True)


def test_a_taken_port_is_retried_on_another(shared: Shared) -> None:
    assert shared.server.attempts == 2
    assert shared.server.port != shared.taken_port
    log = shared.server.log_path.read_text()
    assert "Address already in use" in log
    assert f"port {shared.taken_port} was taken; retrying on another port" in log


def test_no_command_line_and_not_the_log_shows_the_hub_token(shared: Shared) -> None:
    """The supervisor's, vLLM's and its engine's command lines, as ``/proc`` shows them to
    every local user, hold no secret; vLLM has the token in its environment."""
    log = shared.server.log_path.read_text()
    assert "non-default args" in log  # vLLM's own account of its arguments
    assert HF_TOKEN_VALUE not in log
    running = marked_processes(shared.mark)
    assert len(running) >= 4, titles(running)
    for pid in running:
        assert HF_TOKEN_VALUE.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    environments = [Path(f"/proc/{pid}/environ").read_bytes() for pid in running]
    assert any(f"HF_TOKEN={HF_TOKEN_VALUE}".encode() in env for env in environments)


def test_a_secret_flag_is_not_a_vllm_setting(bare_model: Path) -> None:
    with pytest.raises(ValueError, match="would put a secret on vLLM's command line"):
        make_profile(bare_model, extra_args=["--hf-token", HF_TOKEN_VALUE])


def test_clean_shutdown(shared: Shared) -> None:
    """Last in the file: it stops the shared server."""
    running = marked_processes(shared.mark)
    # supervisor, API server, resource tracker, engine core, worker
    assert len(running) >= 4 and "VLLM::EngineCore" in titles(running), titles(running)
    started = time.monotonic()
    shared.server.stop()
    took = time.monotonic() - started
    assert marked_processes(shared.mark) == []
    assert took < 20
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{shared.endpoint.base_url}/models", trust_env=False)
    shared.server.stop()  # idempotent
    print(f"clean shutdown of {len(running)} processes: {took:.1f}s")


# -- failures ------------------------------------------------------------------------------


def test_vllm_exiting_at_startup_is_reported_with_its_log(
    vllm_python: str, bare_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = tmp_path
    monkeypatch.chdir(mark)
    server = LocalVllmServer(
        make_profile(bare_model, extra_args=["--no-such-flag"]),
        logs_dir=tmp_path,
        python=vllm_python,
        served_model_name=SERVED,
    )
    with pytest.raises(ServingError) as info:
        server.start()
    message = str(info.value)
    assert "vLLM exited with code" in message
    assert str(tmp_path / "vllm.log") in message
    assert "--no-such-flag" in message.split("--- last 40 lines ---")[1]  # from the log tail
    assert server.attempts == 1  # not mistaken for a port clash
    assert wait_until_gone(mark, 5) == []


def test_startup_deadline(
    vllm_python: str, bare_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = tmp_path
    monkeypatch.chdir(mark)
    server = LocalVllmServer(
        make_profile(bare_model, startup_timeout=3),
        logs_dir=tmp_path,
        python=vllm_python,
        served_model_name=SERVED,
    )
    # The deadline counts from after the checks that need no server (the vLLM import check
    # takes 10-15 s under load): they run here, outside the bound this test measures.
    server.preflight()
    monkeypatch.setattr(server, "preflight", lambda: None)
    started = time.monotonic()
    with pytest.raises(ServingError, match=r"did not answer within startup_timeout=3s"):
        server.start()
    assert time.monotonic() - started < 3 + 20
    assert wait_until_gone(mark, 5) == []


# A pytest stand-in: starts the server from a thread that then exits (PR_SET_PDEATHSIG would
# fire right there), reports, and waits to be SIGKILLed.
_PARENT = """
import json, sys, threading, time
from pathlib import Path
from pytest_modal_eval.serving.vllm.local import LocalVllmServer
from pytest_modal_eval.serving.endpoint import ServerProfile

profile = ServerProfile.from_json(json.loads(sys.argv[1]))
server = LocalVllmServer(profile, logs_dir=Path(sys.argv[2]), python=sys.argv[3],
                         served_model_name="tiny", stop_grace_s=3)
starter = threading.Thread(target=server.start)
starter.start()
starter.join()
time.sleep(2)  # the starting thread is gone; the server must still be there
Path(sys.argv[4]).write_text(json.dumps({"base_url": server.endpoint.base_url}))
time.sleep(3600)
"""


def test_no_orphan_when_the_parent_is_killed(
    vllm_python: str, bare_model: Path, tmp_path: Path
) -> None:
    mark = tmp_path / "cwd"
    mark.mkdir()
    ready = tmp_path / "ready.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [json.dumps(make_profile(bare_model).to_json()), str(tmp_path), vllm_python, str(ready)]
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, *args],
        env=env,
        cwd=mark,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not ready.exists() and parent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ready.exists(), (
            f"parent never got vLLM up:\n{parent.stderr and parent.stderr.read()}"
        )
        base_url = json.loads(ready.read_text())["base_url"]
        assert httpx.get(f"{base_url}/models", trust_env=False).status_code == 200
        children = [pid for pid in marked_processes(mark) if pid != parent.pid]
        assert len(children) >= 4 and "VLLM::EngineCore" in titles(children), titles(children)

        killed = time.monotonic()
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        left = wait_until_gone(mark, 30)
        took = time.monotonic() - killed
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stderr:
            parent.stderr.close()
        for pid in marked_processes(mark):  # never leak into the other tests
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"orphans after the parent was SIGKILLed: {left}"
    print(f"{len(children)} vLLM processes gone {took:.1f}s after SIGKILL of the parent")

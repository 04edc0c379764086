"""Harnesses in Modal sandboxes (client/modal_sandbox.py) against a local stand-in for Modal's
sandbox API (tests/support/fake_modal: a sandbox is a local process that ends on Modal's
terms). Nothing here reaches Modal.

A v1 taskset played in the ``modal`` runtime gives the same per-example rewards as in
``subprocess``, one sandbox per rollout, each ended with its rollout; after pytest's SIGINT no
sandbox is left, and after its SIGKILL none is left once the lease has run out.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.support.modal_stand_in import (
    FAKE_MODAL,
    install_fake_modal,
    left_running,
    running_sandboxes,
)
from tests.support.v1_runs import run_v1
from tests.test_verifiers_conformance import COMMON

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")


# A plain taskset of the conformance suite's shape (its tasks and reward, four of them).
TASKSET = (
    textwrap.dedent(COMMON)
    + """
class BoxConfig(vf.TasksetConfig):
    id: str = "box-sums"
    follow_up: bool = False


class BoxTaskset(vf.Taskset[SumTask, BoxConfig]):
    def load(self):
        yield from sums(self.config, 4, 11)


__all__ = ["BoxTaskset"]
"""
)


def ended(root: Path) -> dict[str, str]:
    return {
        box.name: (box / "ended").read_text() if (box / "ended").exists() else ""
        for box in sorted(root.glob("sb-*"))
    }


@pytest.fixture
def taskset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    modules = tmp_path / "tasksets"
    modules.mkdir()
    (modules / "box_sums.py").write_text(textwrap.dedent(TASKSET))
    monkeypatch.syspath_prepend(str(modules))
    return modules


@pytest.fixture
def fake_modal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    """The stand-in as ``modal`` in this process, its sandboxes under a fresh directory."""
    root = tmp_path / "sandboxes"
    root.mkdir()
    module = install_fake_modal(monkeypatch, root)
    yield module, root
    assert left_running(root) == []


def test_modal_runtime_gives_the_rewards_of_subprocess_one_sandbox_per_rollout(
    taskset: Path, fake_modal: tuple[ModuleType, Path], fake_server: Any, tmp_path: Path
) -> None:
    from pytest_modal_eval.client import modal_sandbox, verifiers_v1

    _, root = fake_modal
    fake_server.configure(accuracy=0.5, salt="modal-sandbox")
    local = verifiers_v1.load_environment("box-sums", {}, tmp_path, agent={"harness": "null"})
    sampling = {"seed": 7}
    expected = run_v1(local, fake_server.base_url, sampling_args=sampling, rollouts=2)
    asked_locally = fake_server.stats()["seeds_by_question"]
    fake_server.configure(reset_stats=True)

    workdir = tmp_path / "app"
    agent = {"harness": "null", "runtime": {"type": "modal", "workdir": str(workdir)}}
    remote = verifiers_v1.load_environment("box-sums", {}, tmp_path, agent=agent)
    assert remote.metadata()["seats"]["agent"]["runtime"] == "modal"
    got = run_v1(
        remote, fake_server.base_url, sampling_args=sampling, rollouts=2, max_concurrent_requests=4
    )

    assert all(o["error"] is None for outs in got.values() for o in outs)
    rewards = {i: [o["reward"] for o in outs] for i, outs in got.items()}
    assert rewards == {i: [o["reward"] for o in outs] for i, outs in expected.items()}
    assert {0.0, 1.0} <= {r for pair in rewards.values() for r in pair}
    # Every model call reached the endpoint through the plugin's client, each rollout with
    # its own seed (7, 8), as with subprocess.
    seeds = fake_server.stats()["seeds_by_question"]
    assert {q: sorted(s) for q, s in seeds.items()} == {
        q: sorted(s) for q, s in asked_locally.items()
    }
    assert {tuple(sorted(s)) for s in seeds.values()} == {(7, 8)}
    # One sandbox per rollout, each with the limits and the session's tags, each ended by
    # its rollout (not by a limit).
    assert list(ended(root).values()) == ["terminated"] * 8
    leases = set()
    for box in root.glob("sb-*"):
        spec = json.loads((box / "spec.json").read_text())
        assert spec["tags"] == modal_sandbox.SESSION_TAGS
        assert spec["idle_timeout"] == modal_sandbox.SandboxLimits().lease
        assert spec["timeout"] == modal_sandbox.SandboxLimits().timeout
        assert spec["argv"][:2] == ["sh", "-c"]
        leases |= {a for a in spec["argv"] if a.startswith(modal_sandbox.LEASE_FILE + "-")}
    # Each sandbox renews a lease of its own (one sandbox's relay never keeps another alive).
    assert len(leases) == 8


def test_only_the_ports_handed_to_the_harness_are_relayed() -> None:
    from verifiers.v1.runtimes import ModalConfig

    from pytest_modal_eval.client.modal_sandbox import RelayedModalRuntime

    runtime = RelayedModalRuntime(ModalConfig())
    assert runtime.host_url("http://127.0.0.1:4321/v1") == "http://127.0.0.1:4321/v1"
    runtime._relay_port = 9999
    assert runtime.host_url("http://127.0.0.1:4321/v1") == "http://127.0.0.1:9999/4321/v1"
    assert runtime.host_url("https://example.org/v1") == "https://example.org/v1"
    assert runtime._targets == {4321}


def _relay_pid(relay_file: str) -> int:
    """The pid of the relay running ``relay_file`` (a stand-in sandbox's process here)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if relay_file.encode() in argv:
                return int(entry.name)
    raise AssertionError(f"no process runs {relay_file}")


def test_the_relay_reaches_nothing_but_the_ports_handed_to_its_rollout(
    fake_modal: tuple[ModuleType, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Code in the sandbox writes requests of its own into the relay's stream (its stdout,
    through ``/proc/<relay>/fd/1``, as any process in the sandbox can): every URL-parsing
    trick, and ports never handed out, is answered 4xx and logged, and the private service on
    another local port is never reached; a plain request through the relay still is."""
    import asyncio

    import httpx
    from verifiers.v1.runtimes import ModalConfig

    from pytest_modal_eval.client.modal_sandbox import RelayedModalRuntime
    from tests.support.modal_server import ModalLikeServer
    from tests.test_forwarding import TRICKS

    handed, private = ModalLikeServer(), ModalLikeServer()
    handed.start(), private.start()
    handed_port, other = (int(s.url.rsplit(":", 1)[1]) for s in (handed, private))
    injected = {
        1_000_000 + n: {"port": handed_port, "path": trick.format(other=other)}
        for n, trick in enumerate(TRICKS)
    }
    injected[2_000_000] = {"port": other, "path": "/health"}  # never handed out
    injected[2_000_001] = {"port": str(handed_port), "path": "/health"}
    injected[2_000_002] = {"port": handed_port, "path": "/health", "method": "CONNECT"}

    async def play() -> tuple[list[int], dict[int, int]]:
        runtime = RelayedModalRuntime(ModalConfig(workdir=str(tmp_path / "app")), "relay-test")
        answers: dict[int, int] = {}
        send = runtime._send

        async def seen(message: dict[str, Any]) -> None:
            if "id" in message:
                answers[message["id"]] = message["status"]
            await send(message)

        runtime._send = seen  # type: ignore[method-assign]
        await runtime.start()
        plain = []
        try:
            base = runtime.host_url(f"http://127.0.0.1:{handed_port}")
            async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
                plain.append((await client.get(f"{base}/health")).status_code)
                with open(f"/proc/{_relay_pid(runtime.relay_file)}/fd/1", "w") as stream:
                    for request_id, fields in injected.items():
                        line = {"id": request_id, "method": "GET", "headers": [], "body": ""}
                        stream.write(json.dumps({**line, **fields}) + "\n")
                        stream.flush()
                    deadline = time.monotonic() + 30
                    while not set(injected) <= set(answers) and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    # A line that is no request at all: ignored, and the relay still works.
                    stream.write("not json\n")
                    stream.flush()
                try:
                    plain.append((await client.get(f"{base}/health", timeout=10)).status_code)
                except httpx.TimeoutException:
                    plain.append(0)
        finally:
            await runtime.stop()
        return plain, answers

    try:
        plain, answers = asyncio.run(play())
    finally:
        handed.stop(), private.stop()
    assert [s.path_qs for s in private.seen] == []
    assert plain == [200, 200]
    assert {request_id: answers.get(request_id) for request_id in injected} == {
        request_id: 403 if request_id == 2_000_000 or request_id == 2_000_001 else 400
        for request_id in injected
    }
    # The requests that came through the relay's own HTTP, nothing else.
    assert [s.path_qs for s in handed.seen] == ["/health", "/health"]
    refused = [r.getMessage() for r in caplog.records if "relay request refused" in r.getMessage()]
    assert len(refused) == len(injected)
    assert any("not a request" in r.getMessage() for r in caplog.records)


def test_modal_runtime_is_refused_in_one_line_without_a_token(
    taskset: Path,
    fake_modal: tuple[ModuleType, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    module, _ = fake_modal
    monkeypatch.setattr(module.config, "config", {})
    with pytest.raises(EnvironmentLoadError) as caught:
        verifiers_v1.load_environment("box-sums", {}, tmp_path, agent={"runtime": "modal"})
    message = str(caught.value)
    assert "\n" not in message
    assert "runtime 'modal': no Modal token; run `modal token new`" in message

    monkeypatch.setattr(module.config, "config", {"token_id": "a", "token_secret": "b"})
    monkeypatch.setenv("MODAL_EVAL_SANDBOX_LEASE", "soon")
    with pytest.raises(EnvironmentLoadError, match=r"MODAL_EVAL_SANDBOX_LEASE='soon': set it"):
        verifiers_v1.load_environment("box-sums", {}, tmp_path, agent={"runtime": "modal"})


@pytest.mark.parametrize("kind", ["prime", "e2b"])
def test_prime_and_e2b_are_refused_naming_what_to_set(
    kind: str, taskset: Path, tmp_path: Path
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    with pytest.raises(EnvironmentLoadError, match=rf"runtime '{kind}': .*agent\.runtime: modal"):
        verifiers_v1.load_environment("box-sums", {}, tmp_path, agent={"runtime": kind})


def test_the_verifiers_step_replaced_is_still_there() -> None:
    """``ModalRuntime._create_sandbox(app)`` is where verifiers creates the sandbox, and
    ``verifiers.v1.rollout.make_runtime`` is how a rollout gets its runtime."""
    import verifiers.v1.rollout as rollout
    from verifiers.v1.runtimes import ModalRuntime, make_runtime

    assert list(inspect.signature(ModalRuntime._create_sandbox).parameters) == ["self", "app"]
    assert "_create_sandbox" in inspect.getsource(ModalRuntime.start)
    assert rollout.make_runtime is make_runtime


def _start_pytest(project: Any, root: Path, modules: Path, lease: int) -> subprocess.Popen[str]:
    (project.evals / "boxes.yaml").write_text(
        "env_id: box-sums\n"
        f"agent: {{harness: 'null', runtime: {{type: modal, workdir: '{root / 'app'}'}}}}\n"
        "eval: {max_retries: 0, max_concurrent: 2}\n"
        "gate: {min_avg_reward: 0.0}\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(FAKE_MODAL), str(modules)]),
        "FAKE_MODAL_SANDBOXES": str(root),
        "MODAL_EVAL_SANDBOX_LEASE": str(lease),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *project.args()],
        cwd=project.pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_held_requests(server: Any, count: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while server.stats()["in_flight"] < count:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            output = process.communicate()[0]
            pytest.fail(f"no request reached the server:\n{output[-3000:]}")
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_no_sandbox_is_left_after_pytest_is_stopped(
    how: str, project: Any, fake_server: Any, tmp_path: Path
) -> None:
    modules = tmp_path / "tasksets"
    modules.mkdir()
    (modules / "box_sums.py").write_text(textwrap.dedent(TASKSET))
    root = tmp_path / "sandboxes"
    root.mkdir()
    lease = 2
    fake_server.configure(hold=True)
    process = _start_pytest(project, root, modules, lease)
    try:
        _wait_for_held_requests(fake_server, 2, process)
        # Rollouts in flight (two at the endpoint, more queued on the in-flight cap), each in
        # a sandbox of its own.
        assert len(running_sandboxes(root)) >= 2
        process.send_signal(getattr(signal, how))
        output = process.communicate(timeout=60)[0]
    finally:
        if process.poll() is None:
            process.kill()
        fake_server.configure(hold=False)
    if how == "SIGINT":
        assert process.returncode != 0, output[-2000:]
        assert left_running(root) == [], output[-2000:]
        assert set(ended(root).values()) == {"terminated"}
        return
    # Nothing in pytest ran; the lease (the sandbox's main command) ends each sandbox.
    assert process.returncode == -signal.SIGKILL
    assert left_running(root, grace=lease + 10) == []
    assert set(ended(root).values()) <= {"main command exited", "idle_timeout"}


def test_stop_sandboxes_ends_what_a_killed_pytest_left(
    project: Any, fake_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytest killed outright with a long lease leaves its sandboxes running;
    ``pytest-modal-eval stop --sandboxes`` finds them by their tags and ends them."""
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    modules = tmp_path / "tasksets"
    modules.mkdir()
    (modules / "box_sums.py").write_text(textwrap.dedent(TASKSET))
    root = tmp_path / "sandboxes"
    root.mkdir()
    fake_server.configure(hold=True)
    process = _start_pytest(project, root, modules, lease=600)
    try:
        _wait_for_held_requests(fake_server, 2, process)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        fake_server.configure(hold=False)
    left = running_sandboxes(root)
    assert len(left) >= 2

    module = install_fake_modal(monkeypatch, root)
    try:
        with socket.create_server(("127.0.0.1", 0)) as server:  # Modal's server, reachable
            monkeypatch.setitem(
                module.config.config, "server_url", f"http://127.0.0.1:{server.getsockname()[1]}"
            )
            result = CliRunner().invoke(main, ["stop", "--sandboxes", "-y"])
    finally:
        # Should the command not end them, the lease would keep them for ten minutes.
        survivors = left_running(root)
        for box in survivors:
            (root / box / "terminate").touch()
    assert survivors == []
    assert result.exit_code == 0, result.output
    assert [line for line in result.stdout.splitlines() if line.startswith("ended ")] == [
        f"ended {box}" for box in left
    ]
    sessions = {line.split("(session ")[1] for line in result.stdout.splitlines() if "(" in line}
    assert len(sessions) == 1  # one pytest process, one session tag
    assert left_running(root) == []
    assert set(ended(root).values()) == {"terminated"}


def test_a_tool_server_in_a_modal_sandbox_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError
    from tests.test_verifiers_conformance import SHAPES

    body = (
        SHAPES["conf_tools"]
        .replace('"conf-tools"', '"modal-tools"')
        .replace(
            "KeyToolset(KeyToolsetConfig())",
            'KeyToolset(KeyToolsetConfig(runtime={"type": "modal"}))',
        )
    )
    (tmp_path / "modal_tools.py").write_text(textwrap.dedent(COMMON) + textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(EnvironmentLoadError) as caught:
            verifiers_v1.load_environment("modal-tools", {}, tmp_path)
    finally:
        sys.modules.pop("modal_tools", None)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("environment 'modal-tools': tool server 'kv': runtime 'modal': ")
    assert "`{type: subprocess}`" in message


def test_an_exception_out_of_the_run_terminates_every_sandbox(
    taskset: Path, fake_modal: tuple[ModuleType, Path], fake_server: Any, tmp_path: Path
) -> None:
    """The example callback raises while other rollouts are in their sandboxes: the error
    comes out of the run, and each sandbox was terminated on the way."""
    import asyncio

    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.serving.endpoint import Endpoint

    _, root = fake_modal
    agent = {"harness": "null", "runtime": {"type": "modal", "workdir": str(tmp_path / "app")}}
    env = verifiers_v1.load_environment("box-sums", {}, tmp_path, agent=agent)

    def broken(example_id: int, outputs: list[dict[str, Any]]) -> None:
        raise RuntimeError("the records could not be written")

    with pytest.raises(RuntimeError, match="could not be written"):
        asyncio.run(
            verifiers_v1.run_examples(
                env,
                verifiers_v1.dataset_rows(env, None),
                endpoint=Endpoint(fake_server.base_url, "test-model"),
                sampling_args={},
                rollouts=1,
                max_concurrent_requests=2,
                request_timeout=30,
                max_retries=0,
                on_example=broken,
            )
        )
    assert len(ended(root)) >= 2
    assert set(ended(root).values()) == {"terminated"}
    assert left_running(root) == []


def test_what_the_runtime_and_the_stand_in_use_is_in_the_real_modal_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every argument the runtime creates a sandbox with is a parameter of the installed Modal
    SDK's ``Sandbox.create``, and what the stand-in offers is the SDK's too."""
    import asyncio
    from types import SimpleNamespace

    import modal
    from modal.container_process import _ContainerProcess
    from modal.sandbox._sandbox import _Sandbox
    from verifiers.v1.runtimes import ModalConfig

    from pytest_modal_eval.client.modal_sandbox import RelayedModalRuntime

    created: dict[str, Any] = {}

    async def create(*args: str, **kwargs: Any) -> object:
        created.update(kwargs, args=args)
        return object()

    image = SimpleNamespace(entrypoint=lambda argv: image)
    recording = SimpleNamespace(
        Sandbox=SimpleNamespace(create=SimpleNamespace(aio=create)),
        Image=SimpleNamespace(from_registry=lambda ref: image),
    )
    monkeypatch.setitem(sys.modules, "modal", recording)
    asyncio.run(RelayedModalRuntime(ModalConfig())._create_sandbox(app=object()))
    monkeypatch.setitem(sys.modules, "modal", modal)

    parameters = set(inspect.signature(_Sandbox.create).parameters)
    assert set(created) - {"args"} <= parameters
    assert {"tags", "timeout", "idle_timeout"} <= set(created)

    # What the stand-in offers (tests/support/fake_modal), the SDK has.
    assert {"create", "exec", "terminate", "poll", "filesystem", "object_id"} <= set(dir(_Sandbox))
    assert {"stdout", "stderr", "stdin", "wait", "poll", "returncode"} <= set(
        dir(_ContainerProcess)
    )
    assert hasattr(modal.App, "lookup") and hasattr(modal.Image, "from_registry")

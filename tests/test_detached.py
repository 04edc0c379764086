"""Detached sessions (``pytest --detach``) end to end, against the local stand-in for Modal
(tests/support/fake_modal): the runner's function calls are local processes restarted as Modal
restarts an input, the Volume is a directory with Modal's commit and reload semantics, the Dict
a directory with an atomic put-if-absent. The model is the local OpenAI server
(tests/support/openai_server.py), which counts every request. Nothing here reaches Modal.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner, Result

from pytest_modal_eval.cli import main
from tests.conftest import BenchmarkProject, arithmetic_rows, read_jsonl
from tests.support.modal_stand_in import (
    FAKE_MODAL,
    calls_left_running,
    end_calls,
    install_fake_modal,
)

VOLUME = "pytest-modal-eval-runs"
SESSION = re.compile(r"session (\d{8}-\d{6}-[0-9a-f]{6})")
KEY = "sk-detached-secret-0123456789"


@dataclass
class StandIn:
    root: Path  # FAKE_MODAL_ROOT
    module: ModuleType

    @property
    def volume(self) -> Path:
        """The Volume's committed contents."""
        return self.root / "volumes" / VOLUME

    def calls(self) -> list[Path]:
        return sorted((self.root / "calls").glob("fc-*"))

    def runs(self, runs_dir: str) -> list[Path]:
        folder = self.volume / "outputs" / runs_dir
        return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    root = tmp_path / "modal"
    root.mkdir()
    monkeypatch.setenv("FAKE_MODAL_ROOT", str(root))
    path = [str(FAKE_MODAL), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    module = install_fake_modal(monkeypatch, tmp_path / "sandboxes")
    with socket.create_server(("127.0.0.1", 0)) as server:  # Modal's server, reachable
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setenv("MODAL_SERVER_URL", url)
        monkeypatch.setitem(module.config.config, "server_url", url)
        yield StandIn(root, module)
    left = calls_left_running(root)
    end_calls(root)
    assert left == {}, "function calls left running"


@pytest.fixture
def detached(project: BenchmarkProject, stand_in: StandIn) -> BenchmarkProject:
    # HF_ENDPOINT (a closed port here) travels to the container as the project asks.
    project.pytester.makeini(
        "[pytest]\naddopts = -p no:randomly\nmodal_eval_detach_env = HF_ENDPOINT\n"
    )
    return project


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def session_of(output: str) -> str:
    found = SESSION.search(output)
    assert found, output
    return found.group(1)


def example_ids(checkpoint: Path) -> list[int]:
    """The example ids of a checkpoint's whole lines."""
    if not checkpoint.exists():
        return []
    data = checkpoint.read_bytes()
    return [json.loads(line)["example_id"] for line in data[: data.rfind(b"\n") + 1].splitlines()]


def wait_for(condition: object, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def run(project: BenchmarkProject, *extra: str, timeout: float) -> pytest.RunResult:
    return project.pytester.runpytest_subprocess(*project.args(*extra), timeout=timeout)


def start(project: BenchmarkProject, *extra: str) -> subprocess.Popen[str]:
    """``pytest ... EXTRA`` in the project, in the background (a client a test can kill)."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *project.args(*extra)],
        cwd=project.pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_detach_wait_runs_the_session_on_modal_pull_and_compare(
    detached: BenchmarkProject, stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole workflow: a detached session with --wait exits as pytest would, with JUnit XML
    here; the secret the endpoint needs travels as a Modal secret only; its run is listed
    remotely, pulled byte for byte, read by every command, and a local session takes it as its
    own; a remote run compares with a local one."""
    project = detached
    project.add("alpha", n=12)
    project.add("beta", n=6, gate="gate: {min_avg_reward: 1.1}")  # fails: exit status 1
    project.server.configure(require_key=KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    junit = project.pytester.path / "junit.xml"

    result = run(project, "--detach", "--wait", f"--junitxml={junit}", timeout=240)

    assert result.ret == 1, result.stdout.str()
    sid = session_of(result.stdout.str())
    result.stdout.fnmatch_lines(
        [
            f"detached: session {sid} runs on Modal (evalrun-*",
            f"  follow:   pytest-modal-eval logs -f {sid}",
            "*evaluation summary*",
            "alpha*PASS*",
            "beta*FAIL*",
            "*1 failed, 1 passed*",
        ]
    )
    assert "no tests ran" not in result.stdout.str()  # about this machine, which ran none
    assert project.server.stats()["chat_requests"] == 18
    cases = re.findall(r'<testcase classname="([^"]+)" name="(\w+)"', junit.read_text())
    assert sorted(name for _, name in cases) == ["alpha", "beta"]
    assert 'failures="1"' in junit.read_text()
    # The key reached the container as a Modal secret, and nothing on the Volume holds it.
    session = stand_in.volume / "sessions" / sid
    assert json.loads((session / "request.json").read_text())["options"] == [
        "--model", "test-model", "--base-url", project.server.base_url,
    ]  # fmt: skip
    assert not [
        p for p in stand_in.volume.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()
    ]
    [app] = (stand_in.root / "apps").glob("evalrun-*.json")
    runner = json.loads(app.read_text())["functions"]["run_session"]
    assert runner["env"]["OPENAI_API_KEY"] == KEY  # in the Secret.from_dict, not the image
    assert runner["volumes"] == {"/results": VOLUME}

    listed = cli("runs", "--remote", "--json")
    assert listed.exit_code == 0, listed.output
    runs = {run["benchmark"]: run for run in json.loads(listed.output)}
    assert runs["alpha"]["state"] == "complete" and runs["alpha"]["avg_reward"] == 1.0
    [remote_dir] = stand_in.runs("alpha--test-model")
    run_id = remote_dir.name
    metadata = json.loads((remote_dir / "metadata.json").read_text())
    assert metadata["serving"]["container"]["cpu"] == 2.0  # the container's time is recorded
    assert metadata["serving"]["container"]["container_s"] > 0

    shown = cli("show", "--remote", run_id)
    assert shown.exit_code == 0, shown.output
    assert f"run {run_id}" in shown.output
    page = project.pytester.path / "remote.html"
    reported = cli("report", "--remote", run_id, "-o", str(page))
    assert reported.exit_code == 0, reported.output
    assert "1 run, 12 examples" in reported.output and page.stat().st_size > 0

    pulled = cli("pull", run_id)
    assert pulled.exit_code == 0, pulled.output
    local_dir = project.run_dirs("alpha")[0]
    assert local_dir.name == run_id
    remote_files = {
        p.relative_to(remote_dir): p.read_bytes() for p in remote_dir.rglob("*") if p.is_file()
    }
    local_files = {
        p.relative_to(local_dir): p.read_bytes() for p in local_dir.rglob("*") if p.is_file()
    }
    assert local_files == remote_files  # byte for byte
    assert Path("results.jsonl") in local_files and Path("checkpoint.jsonl") in local_files

    # A local session finds the pulled run finished: it reports it and asks nothing.
    project.server.configure(reset_stats=True)
    local = run(project, "-k", "alpha", timeout=120)
    local.assert_outcomes(passed=1)
    assert project.server.stats().get("chat_requests", 0) == 0
    local.stdout.fnmatch_lines([f"*every selected example was finished in run {run_id}*"])

    # A fresh local run compared with the remote one (found on the Volume by its id).
    fresh = run(project, "-k", "alpha", "--eval-fresh", timeout=120)
    fresh.assert_outcomes(passed=1)
    newest = project.run_dirs("alpha")[-1].name
    assert newest != run_id
    compared = cli("compare", "--remote", run_id, newest)
    assert compared.exit_code == 0, compared.output
    assert "OK: no significant drop" in compared.output


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["sigkill", "sigint"])
def test_a_preempted_container_resumes_losing_and_repeating_nothing(
    detached: BenchmarkProject, stand_in: StandIn, sig: signal.Signals
) -> None:
    """Kill the container mid-run, outright (SIGKILL) or as Modal pre-empts (SIGINT to its
    processes, which then save and commit): its call starts it again, which goes on from what
    the Volume holds. Every example finished before the kill is never asked again; only the
    requests in flight at the kill are (as a local resume)."""
    project = detached
    n, concurrency = 40, 4
    rows = arithmetic_rows(n)
    project.add("alpha", rows=rows, extra_yaml=f"eval: {{max_concurrent: {concurrency}}}\n")
    project.server.configure(hold_after=n // 3)
    client = start(project, "--detach")
    output, _ = client.communicate(timeout=120)
    assert client.returncode == 0, output
    sid = session_of(output)

    # The server holds every request after the first third: once the held ones fill every
    # slot and the Volume has what finished, nothing changes until the kill.
    def committed() -> list[int]:
        runs = stand_in.runs("alpha--test-model")
        return example_ids(runs[0] / "checkpoint.jsonl") if runs else []

    wait_for(lambda: project.server.stats().get("in_flight", 0) == concurrency, what="held")
    wait_for(lambda: len(committed()) == n // 3, what="the first third committed")
    kept = committed()
    [call] = stand_in.calls()
    container = int((call / "attempt-1" / "pid").read_text())
    os.killpg(container, sig)
    wait_for(lambda: (call / "attempt-2" / "pid").exists(), what="the restart")
    project.server.configure(hold_after=None)
    wait_for(lambda: (call / "outcome.json").exists(), timeout=180, what="the session's end")

    outcome = json.loads((call / "outcome.json").read_text())
    assert outcome == {
        "state": "done",
        "value": {"exit_code": 0, "session": sid, "state": "finished"},
    }
    [run_dir] = stand_in.runs("alpha--test-model")
    results = read_jsonl(run_dir / "results.jsonl")
    assert sorted(r["example_id"] for r in results) == list(range(n))
    asked = project.server.stats()["by_question"]
    for example_id in kept:  # finished and committed before the kill: never asked again
        assert asked[rows[example_id]["question"]] == 1
    again = sorted(q for q, count in asked.items() if count > 1)
    assert len(again) == concurrency  # only the requests in flight at the kill
    assert sum(asked.values()) == n + concurrency
    logs = cli("logs", sid)
    assert logs.exit_code == 0, logs.output
    assert "attempt 2: the session goes on from what the Volume holds" in logs.output
    if sig == signal.SIGINT:  # pytest ended as at Ctrl-C, and the runner committed after it
        assert "the container is ending (pre-emption or cancellation)" in logs.output
    status = json.loads((stand_in.volume / "sessions" / sid / "status.json").read_text())
    assert (status["attempt"], status["state"], status["exit_code"]) == (2, "finished", 0)


def test_a_lost_waiting_client_attaches_instead_of_starting_again(
    detached: BenchmarkProject, stand_in: StandIn
) -> None:
    """Kill the --wait client mid-run and run the same command again: it attaches to the
    session still running (one controller, no request twice) and exits with its status;
    ``logs -f`` follows the same session to its end."""
    project = detached
    n = 20
    project.add("alpha", n=n)
    project.server.configure(hold_after=n // 2)
    first = start(project, "--detach", "--wait")
    wait_for(lambda: project.server.stats().get("in_flight", 0) > 0, what="the session to run")
    first.kill()
    first_output, _ = first.communicate(timeout=30)
    sid = session_of(first_output)

    second = start(project, "--detach", "--wait")
    assert second.stdout is not None
    lines = []
    for line in second.stdout:
        lines.append(line)
        if "already runs this command" in line:
            break
    assert lines and f"attached: session {sid} already runs this command on Modal" in lines[-1]
    project.server.configure(hold_after=None)
    rest, _ = second.communicate(timeout=180)
    assert second.returncode == 0, "".join(lines) + rest
    assert "1 passed" in rest

    followed = cli("logs", "-f", sid)
    assert followed.exit_code == 0, followed.output
    assert f"session {sid} finished: exit status 0" in followed.output
    assert len(stand_in.calls()) == 1  # one controller, started once
    assert project.server.stats()["chat_requests"] == n  # nothing asked twice


def test_stop_ends_a_session_and_leaves_nothing_running(
    detached: BenchmarkProject, stand_in: StandIn
) -> None:
    """``stop SESSION`` asks the session to stop: its pytest is interrupted, saves what it
    finished and ends; the Volume keeps that; no container is left running."""
    project = detached
    project.add("alpha", n=30)
    project.server.configure(hold_after=5)
    client = start(project, "--detach")
    output, _ = client.communicate(timeout=120)
    sid = session_of(output)
    wait_for(lambda: project.server.stats().get("in_flight", 0) > 0, what="the session to run")

    stopped = cli("stop", sid[:10], "-y", "--timeout", "60")

    assert stopped.exit_code == 0, stopped.output
    assert f"session {sid} stopped: exit status 2" in stopped.output  # pytest's "interrupted"
    assert calls_left_running(stand_in.root) == {}
    [run_dir] = stand_in.runs("alpha--test-model")
    assert len(example_ids(run_dir / "checkpoint.jsonl")) == 5  # what finished is kept
    listed = cli("logs", "--json")
    [info] = json.loads(listed.output)
    assert (info["session"], info["state"], info["exit_code"]) == (sid, "stopped", 2)


def test_fan_out_with_shards_equals_one_unsharded_session(
    detached: BenchmarkProject, stand_in: StandIn, tmp_path: Path
) -> None:
    """--detach-shards: a benchmark's examples in three containers, another benchmark in a
    fourth; the session's summary, gate and report are one session's, and the sharded
    benchmark's statistics equal those of one unsharded run on the same answers."""
    project = detached
    project.add("alpha", n=31, extra_yaml="eval: {rollouts: 2}\n")
    project.add("beta", rows=arithmetic_rows(7, start=100))
    # Each question's answer is fixed (right for 60% of them), whatever the order it comes in.
    project.server.configure(accuracy=0.6)
    junit = project.pytester.path / "junit.xml"

    result = run(
        project,
        "--detach",
        "--wait",
        "--detach-shards",
        "alpha=3",
        f"--junitxml={junit}",
        timeout=300,
    )

    output = result.stdout.str()
    sid = session_of(output)
    assert project.server.stats()["chat_requests"] == 31 * 2 + 7
    workers = sorted(p.name for p in (stand_in.volume / "sessions" / sid / "workers").iterdir())
    assert workers == [
        "alpha--test-model--1-of-3",
        "alpha--test-model--2-of-3",
        "alpha--test-model--3-of-3",
        "beta--test-model",
    ]
    assert len(stand_in.calls()) == 5  # the controller and its four workers
    shard_ids = []
    for k in (1, 2, 3):
        folder = stand_in.volume / "shards" / "alpha--test-model" / f"{k}-of-3"
        [shard_run] = [p for p in (folder / "alpha--test-model").iterdir() if p.is_dir()]
        shard_ids.append(sorted(set(example_ids(shard_run / "checkpoint.jsonl"))))
    assert shard_ids == [list(range(0, 10)), list(range(10, 20)), list(range(20, 31))]
    assert output.count("evaluation summary") == 1  # one summary, the final pass's
    assert len(re.findall(r"<testcase ", junit.read_text())) == 2

    # The same answers, one unsharded local session.
    project.server.configure(reset_stats=True)
    local = run(project, f"--eval-output-dir={tmp_path / 'local'}", timeout=180)
    assert local.ret == result.ret
    [merged] = stand_in.runs("alpha--test-model")
    [single] = [p for p in (tmp_path / "local" / "alpha--test-model").iterdir() if p.is_dir()]
    a = json.loads((merged / "metadata.json").read_text())
    b = json.loads((single / "metadata.json").read_text())
    for key in ("avg_reward", "stderr", "ci", "n_evaluated", "num_examples", "errors", "verdict"):
        assert a[key] == b[key], key
    assert 0.3 < a["avg_reward"] < 0.9  # a noisy benchmark, not a trivial one
    by_example = {
        (r["example_id"], r["rollout"]): r["reward"] for r in read_jsonl(single / "results.jsonl")
    }
    assert {
        (r["example_id"], r["rollout"]): r["reward"] for r in read_jsonl(merged / "results.jsonl")
    } == by_example
    # Each shard's container time is in the merged run's.
    assert a["serving"]["container"]["container_s"] > 0

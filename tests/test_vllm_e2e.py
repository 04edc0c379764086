"""The plugin end to end against REAL vLLM (CPU build): ``pytest evals/ --backend local``.

Each test runs ``python -m pytest`` in a project directory holding the bundled demo benchmark
(``evals/arithmetic.yaml``: 200 additions, gate ``min_avg_reward: 0.9``) and serves
``models/tiny-arith`` (trained to solve it) or an untrained model of the same shape through the
real local backend. Every vLLM start costs ~45 s on a 2-core machine, so each test is one
scenario (one or two sessions), and its checks are subtests.

Every run is started from its own directory, which all of vLLM's processes inherit as their
working directory: scanning ``/proc/*/cwd`` for it finds every process a run left behind,
whatever its process group or title (vLLM's engine processes rename themselves
``VLLM::EngineCore``/``VLLM::Worker``, so their cmdline does not name vLLM's module).

Needs ``MODAL_EVAL_VLLM_PYTHON``: each test starts with ``vllm_check.vllm_python()``, which
skips it without vLLM, or fails it when ``MODAL_EVAL_REQUIRE_VLLM`` is set (a check in a fixture
would make that an error at setup instead of a failure).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import vllm_check

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "evals" / "arithmetic.yaml"
DEMO_DATA = REPO / "evals" / "data" / "arithmetic.jsonl"
TRAINED = REPO / "models" / "tiny-arith"
N = 200  # examples in the demo benchmark
# CPU torch.compile warm-up adds 20-40 s to every vLLM start and changes nothing under test
# (enforce_eager is not part of the resume key, and the trained model still scores 1.000).
FAST_BOOT = ("--override", "vllm.enforce_eager=true")
RUN_TIMEOUT_S = 900

# vLLM's own log lines (vLLM 0.32): uvicorn's access line is written when a response starts,
# "Received request" (with --enable-log-requests) when a request arrives.
ACCESS_LINE = '"POST /v1/chat/completions HTTP/1.1"'
RECEIVED_LINE = re.compile(r"Received request chatcmpl-")
STARTED_LINE = "Starting vLLM server on http://127.0.0.1:"
SHUTDOWN_LINE = "[shutdown] API server: shutdown triggered"


# -- helpers -------------------------------------------------------------------------------


@dataclass
class Case:
    """One benchmark's JUnit test case."""

    outcome: str  # passed | failed | error | skipped
    props: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    message: str = ""


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def count(path: Path, needle: str | re.Pattern[str]) -> int:
    text = path.read_text(errors="replace") if path.exists() else ""
    if isinstance(needle, str):
        return text.count(needle)
    return len(needle.findall(text))


@dataclass(frozen=True)
class Proc:
    pid: int
    argv: tuple[str, ...]

    def __repr__(self) -> str:
        return f"{self.pid}: {' '.join(self.argv)[:160]}"

    @property
    def is_vllm_server(self) -> bool:
        """vLLM's API server (the supervisor only mentions the module further down its argv)."""
        return self.argv[1:3] == ("-m", "vllm.entrypoints.openai.api_server")


def processes_under(root: Path) -> list[Proc]:
    """Live processes whose working directory is ``root`` or below it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, IndexError):
            continue
        if state != "Z" and cwd.is_relative_to(root):
            found.append(Proc(int(entry.name), tuple(a for a in argv if a)))
    return found


def wait_until_none_under(root: Path, timeout: float) -> list[Proc]:
    deadline = time.monotonic() + timeout
    while (left := processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def intact_records(checkpoint: Path) -> int:
    """Checkpoint lines that parse (a SIGKILL can leave a torn last line)."""
    intact = 0
    for line in checkpoint.read_bytes().splitlines():
        with contextlib.suppress(ValueError):
            json.loads(line)
            intact += 1
    return intact


def describe(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit code {result.returncode}; output tail:\n{(result.stdout + result.stderr)[-4000:]}"


class Project:
    """A directory with demo benchmarks, where ``python -m pytest`` runs against real vLLM."""

    def __init__(self, root: Path, python: str, model: Path) -> None:
        self.root = root
        self.python = python
        self.model = model
        self.evals = root / "evals"
        (self.evals / "data").mkdir(parents=True)
        shutil.copy(DEMO_DATA, self.evals / "data" / DEMO_DATA.name)
        (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:randomly\n")
        self.outputs = root / "outputs" / "evals"

    def add_demo(self, name: str = "arithmetic", **changes: Any) -> Path:
        """The demo benchmark as ``name``: verbatim, or with ``changes`` merged into it."""
        path = self.evals / f"{name}.yaml"
        if not changes:
            shutil.copy(DEMO, path)
        else:
            merged = deep_merge(yaml.safe_load(DEMO.read_text()), changes)
            path.write_text(yaml.safe_dump(merged, sort_keys=False))
        return path

    def command(self, *extra: str) -> list[str]:
        # `--opt=PATH`, and evals/ named: pytest picks its rootdir before the plugin's options
        # are known, and would take a bare absolute path after --model for a test path.
        return [
            sys.executable, "-m", "pytest", "evals/",
            "--backend", "local",
            f"--model={self.model}",
            f"--vllm-python={self.python}",
            *FAST_BOOT,
            *extra,
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        # Nothing from the outer run (xdist worker ids, PYTEST_ADDOPTS, a fake vllm on
        # PYTHONPATH, the user's output dir or keys) may steer the run under test.
        drop = ("PYTEST_", "MODAL_EVAL_", "PYTHONPATH", "OPENAI_API_KEY", "FAKE_VLLM_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        env["HF_HUB_OFFLINE"] = "1"
        return env

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.command(*extra),
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        (self.root / "last-run.txt").write_text(result.stdout + result.stderr)
        return result

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        with (self.root / "killed-run.txt").open("wb") as out:
            return subprocess.Popen(
                self.command(*extra), cwd=self.root, env=self.env(), stdout=out, stderr=out
            )

    def run_dirs(self, benchmark: str) -> list[Path]:
        return sorted(p.parent for p in self.outputs.glob(f"{benchmark}--*/*/run_config.json"))

    def run_dir(self, benchmark: str) -> Path:
        [run_dir] = self.run_dirs(benchmark)
        return run_dir

    def metadata(self, benchmark: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.run_dir(benchmark) / "metadata.json").read_text())
        return data

    def server_log_dirs(self) -> list[Path]:
        """Each server's log directory: ``logs/<session>/<backend>-<profile>/``."""
        return sorted(p for p in (self.outputs / "logs").glob("*/*") if p.is_dir())

    def junit(self, name: str = "junit.xml") -> dict[str, Case]:
        cases = {}
        for case in ET.parse(self.root / name).getroot().iter("testcase"):
            props, warnings = {}, []
            for prop in case.iter("property"):
                key, value = prop.get("name", ""), prop.get("value", "")
                if key == "modal_eval_warning":
                    warnings.append(value)
                props[key] = value
            outcome, message = "passed", ""
            for kind, label in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
                element = case.find(kind)
                if element is not None:
                    outcome, message = label, element.get("message", "")
                    break
            cases[case.get("name", "")] = Case(outcome, props, warnings, message)
        return cases


@pytest.fixture
def project_dir(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "project"
    root.mkdir()
    yield root
    # Whatever happened, leave no server behind for the other tests.
    for proc in processes_under(root):
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGKILL)


# -- tests ---------------------------------------------------------------------------------


def test_trained_model_passes_and_benchmarks_share_one_vllm_under_xdist(
    project_dir: Path, subtests: pytest.Subtests
) -> None:
    """The demo (trained model) and a twin on the same server profile, under ``-n 2``; plus a
    variant whose ``sampling.max_tokens`` (not part of the profile) is below what answers need.
    """
    project = Project(project_dir, vllm_check.vllm_python(), TRAINED)
    project.add_demo()
    project.add_demo("arithmetic_twin", eval={"num_examples": 50})
    project.add_demo("arithmetic_short", sampling={"max_tokens": 2}, eval={"num_examples": 50})
    result = project.run("-n", "2", "--junitxml=junit.xml")
    left = processes_under(project_dir)
    assert (project_dir / "junit.xml").exists(), describe(result)
    cases = project.junit()
    out = result.stdout

    with subtests.test("the trained model passes the demo's gate"):
        demo = cases["arithmetic"]
        assert demo.outcome == "passed", describe(result)
        assert demo.props["verdict"] == "pass"
        metadata = project.metadata("arithmetic")
        assert metadata["num_examples"] == N and metadata["errors"] == 0
        assert metadata["avg_reward"] >= 0.9
        assert float(demo.props["avg_reward"]) == pytest.approx(metadata["avg_reward"], abs=1e-6)
        assert re.search(r"^arithmetic +\S+ +\d\.\d+ ± \S+ .* >= 0\.9 +PASS ", out, re.M), out

    with subtests.test("two benchmarks on one profile start one vLLM, and both pass"):
        assert cases["arithmetic_twin"].outcome == "passed", describe(result)
        assert project.metadata("arithmetic_twin")["avg_reward"] >= 0.9
        [server_logs] = project.server_log_dirs()
        log = server_logs / "vllm.log"
        assert count(log, STARTED_LINE) == 1  # (a port-clash retry would launch twice)
        endpoints = {
            json.loads((project.run_dir(name) / "run_config.json").read_text())["endpoint"]
            for name in ("arithmetic", "arithmetic_twin", "arithmetic_short")
        }
        assert len(endpoints) == 1, endpoints
        # Each run links the shared server's log.
        for name in ("arithmetic", "arithmetic_twin"):
            assert (project.run_dir(name) / "logs" / "vllm.log").resolve() == log.resolve()

    with subtests.test("answers cut by sampling.max_tokens are reported as truncated"):
        short = cases["arithmetic_short"]
        metadata = project.metadata("arithmetic_short")
        assert metadata["truncated_rollouts"] > 0
        assert int(short.props["truncated_rollouts"]) == metadata["truncated_rollouts"]
        assert any("truncated at sampling.max_tokens" in w for w in short.warnings), short
        assert re.search(
            rf"^arithmetic_short \({re.escape(str(project.model))}\): WARNING: \d+ of 50 "
            r"rollouts were truncated at "
            r"sampling\.max_tokens",
            out,
            re.M,
        ), out
        # The cut answers miss, and the gate says so; the warning says why.
        assert short.outcome == "failed" and "gate failed" in short.message
        assert result.returncode == pytest.ExitCode.TESTS_FAILED

    with subtests.test("no vLLM process survives the session"):
        assert left == [], f"left behind: {left}"


def test_untrained_model_fails_the_gate_and_leaves_no_vllm(
    project_dir: Path, pytestconfig: pytest.Config, tmp_path: Path, subtests: pytest.Subtests
) -> None:
    python = vllm_check.vllm_python()
    untrained = vllm_check.untrained_demo_model(python, pytestconfig.cache, tmp_path / "model")
    project = Project(project_dir, python, untrained)
    project.add_demo()
    # Same server profile (sampling is not part of it): no second vLLM start.
    project.add_demo(
        "arithmetic_sampled",
        sampling={"temperature": 1.0},
        eval={"num_examples": 10, "rollouts": 4},
    )
    result = project.run("--junitxml=junit.xml")
    left = processes_under(project_dir)

    with subtests.test("the untrained model fails the demo's gate, by the numbers"):
        assert result.returncode == pytest.ExitCode.TESTS_FAILED, describe(result)
        case = project.junit()["arithmetic"]
        assert case.outcome == "failed" and case.props["verdict"] == "fail"
        metadata = project.metadata("arithmetic")
        # Every example was evaluated: the failure is the model's answers, not the serving.
        assert metadata["num_examples"] == N and metadata["errors"] == 0
        assert metadata["avg_reward"] <= 0.1
        assert "arithmetic: gate failed" in result.stdout
        assert re.search(r"- mean reward 0\.\d+ .* < gate\.min_avg_reward 0\.9", result.stdout)

    with subtests.test("the rollouts of an example are sampled with their own seeds"):
        # sampling.seed is 0: were it sent unchanged with every rollout, vLLM would return
        # the same completion four times (it did, before each rollout got seed + rollout).
        results = project.run_dir("arithmetic_sampled") / "results.jsonl"
        rows = [json.loads(line) for line in results.read_text().splitlines()]
        assert len(rows) == 40, describe(result)
        by_example: dict[int, set[str]] = {}
        for row in rows:
            by_example.setdefault(row["example_id"], set()).add(json.dumps(row["completion"]))
        varied = sum(len(completions) > 1 for completions in by_example.values())
        assert varied >= 8, by_example

    with subtests.test("no vLLM process survives a failing run"):
        assert left == [], f"left behind: {left}"


def test_sigkill_mid_run_then_rerun_repeats_only_in_flight_requests(
    project_dir: Path, subtests: pytest.Subtests
) -> None:
    """``kill -9`` of pytest mid-evaluation; the supervisor takes vLLM down; the same command
    again finishes the run, asking vLLM only for what was not checkpointed.

    Requests are counted in vLLM's own log: ``--enable-log-requests`` logs each request as it
    arrives (so a request in flight at the kill is counted even though it was never answered)
    and uvicorn's access line each answer. Both sessions serve the same profile, so both append
    to the same ``vllm.log`` (the one each run's ``logs/vllm.log`` links to).
    """
    concurrency = 2
    project = Project(project_dir, vllm_check.vllm_python(), TRAINED)
    # extra_args is part of the resume key, the same in both sessions.
    project.add_demo(vllm={"extra_args": ["--enable-log-requests"]})
    slow = ("--override", f"eval.max_concurrent={concurrency}")  # ~0.1 s per example

    process = project.start(*slow)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        checkpoint = None
        while process.poll() is None and time.monotonic() < deadline:
            found = list(project.outputs.glob("arithmetic--*/*/checkpoint.jsonl"))
            if found and found[0].read_bytes().count(b"\n") >= N // 4:
                checkpoint = found[0]
                break
            time.sleep(0.02)
        running = processes_under(project_dir)
        assert process.poll() is None and checkpoint is not None, (
            "the run ended (or never got going) before it could be killed:\n"
            + (project_dir / "killed-run.txt").read_text()[-4000:]
        )
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed = time.monotonic()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    left_after_kill = wait_until_none_under(project_dir, 30)
    gone_after_s = time.monotonic() - killed
    finished = intact_records(checkpoint)
    run_dir = checkpoint.parent
    # The run links the log of the server that answered it: this session's, until the re-run.
    log = (run_dir / "logs" / "vllm.log").resolve()
    received_first, answered_first = count(log, RECEIVED_LINE), count(log, ACCESS_LINE)

    with subtests.test("the supervisor takes vLLM down after pytest is SIGKILLed"):
        # vLLM was really up at the kill: its API server, engine, worker, supervisor, pytest.
        assert len([p for p in running if p.is_vllm_server]) == 1, running
        assert any(p.argv[0].startswith("VLLM::EngineCore") for p in running), running
        assert left_after_kill == [], f"survived the kill: {left_after_kill}"
        assert SHUTDOWN_LINE in log.read_text(errors="replace")  # asked to stop, not orphaned
        print(f"{len(running)} processes (pytest's, vLLM's) gone {gone_after_s:.1f}s after SIGKILL")

    assert 0 < finished < N
    with subtests.test("the killed session had at most `concurrency` requests in flight"):
        # Answered but unfinished examples (eval.prefetch starts more examples than requests)
        # are in the answer journal; only unanswered requests are lost at a kill.
        assert finished <= answered_first <= received_first <= answered_first + concurrency

    rerun = project.run(*slow)
    left = processes_under(project_dir)
    # Each session's server writes a log of its own, and the run now links the re-run's.
    second_log = (run_dir / "logs" / "vllm.log").resolve()
    received_second = count(second_log, RECEIVED_LINE)
    answered_second = count(second_log, ACCESS_LINE)

    with subtests.test("the re-run completes the same run"):
        assert rerun.returncode == pytest.ExitCode.OK, describe(rerun)
        assert project.run_dirs("arithmetic") == [run_dir]
        results = [
            json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()
        ]
        ids = [r["example_id"] for r in results]
        assert len(ids) == N and sorted(ids) == list(range(N))
        metadata = project.metadata("arithmetic")
        assert metadata["resumed_examples"] == finished
        assert metadata["num_examples"] == N and metadata["avg_reward"] >= 0.9
        resumed = f"arithmetic ({project.model}): resumed: {finished}/{N} examples from run "
        assert resumed + run_dir.name in rerun.stdout

    with subtests.test("the re-run asked vLLM only for what was not checkpointed or journaled"):
        reused = project.metadata("arithmetic")["reused_answers"]
        assert 0 <= reused <= answered_first - finished
        assert received_second == answered_second == N - finished - reused
        assert received_first + received_second <= N + concurrency
        assert second_log != log  # one log per session: the re-run's lines are its own
        assert len(project.server_log_dirs()) == 2
        assert count(log, STARTED_LINE) == count(second_log, STARTED_LINE) == 1

    with subtests.test("no vLLM process survives the re-run"):
        assert left == [], f"left behind: {left}"
    print(
        f"killed after {finished}/{N} examples; vLLM received {received_first} + "
        f"{received_second} requests, answered {answered_first} + {answered_second}; "
        f"{project.metadata('arithmetic')['reused_answers']} journaled answers reused"
    )

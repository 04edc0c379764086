"""verifiers v1 (0.4.x): multi-turn rollouts with tools, through the plugin's client.

The bundled ``lookup-qa`` taskset makes each rollout call its lookup tool (an MCP server that
verifiers starts as a local process) before answering; the real test server on 127.0.0.1 plays
the model (``call_tools``). These run when verifiers 0.4 is installed:
``uv run --with verifiers==0.4.0 pytest tests/test_verifiers_v1_tools.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.conftest import BenchmarkProject, FakeServer, read_jsonl
from tests.support.openai_server import FakeModel
from tests.support.v1_runs import run_v1

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")

QUESTION = "What is the value of {key}? Look it up with the lookup tool."


def write_table(path: Path, n: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"key": f"k{i}", "value": f"v{7 * i}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_lookup(
    tmp_path: Path, server: FakeServer, n: int, *, model: str = "test-model", rollouts: int = 1
) -> dict[int, list[dict[str, Any]]]:
    from pytest_modal_eval.client import verifiers_v1

    write_table(tmp_path / "kv.jsonl", n)
    env = verifiers_v1.load_environment("lookup-qa", {"path": "kv.jsonl"}, tmp_path)
    finished = run_v1(
        env,
        server.base_url,
        model=model,
        sampling_args={"seed": 3},
        rollouts=rollouts,
        max_concurrent_requests=4,
    )
    return finished


def test_a_rollout_calls_the_tool_then_answers(tmp_path: Path, fake_server: FakeServer) -> None:
    """Each rollout is two model turns with the tool's result between them, all through the
    plugin's client; a model that never stops calling the tool is stopped by the task's
    ``@vf.stop`` after ``max_turns`` turns."""
    fake_server.configure(call_tools=True, models={"looper": {"tool_loop": True}})
    finished = run_lookup(tmp_path, fake_server, 3, rollouts=2)
    assert sorted(finished) == [0, 1, 2]
    for example_id, outputs in finished.items():
        for output in outputs:
            assert output["error"] is None, output["error"]
            call, result, answer = output["completion"]
            assert call["role"] == "assistant" and call["tool_calls"][0]["name"] == "kv_lookup"
            assert json.loads(call["tool_calls"][0]["arguments"]) == {"key": f"k{example_id}"}
            assert result == {
                "role": "tool",
                "tool_call_id": call["tool_calls"][0]["id"],
                "content": f"v{7 * example_id}",
                "name": "kv_lookup",
            }
            assert answer == {
                "role": "assistant",
                "content": f"The answer is \\boxed{{v{7 * example_id}}}.",
            }
            assert output["prompt"] == [
                {"role": "user", "content": QUESTION.format(key=f"k{example_id}")}
            ]
            assert (output["reward"], output["error"]) == (1.0, None)
            assert output["stop_condition"] == "agent_completed"
    stats = fake_server.stats()
    # Two turns per rollout, each seeded for its rollout (seed + index).
    assert stats["tool_calls"] == stats["tool_result_requests"] == 6
    for seeds in stats["seeds_by_question"].values():
        assert sorted(seeds) == [3, 3, 4, 4]

    fake_server.configure(reset_stats=True)
    (looped,) = run_lookup(tmp_path, fake_server, 1, model="looper")[0]
    assert looped["stop_condition"] == "turn_limit"
    assert (looped["reward"], looped["error"]) == (0.0, None)
    # Four tool calls; the fifth request (with the last result) was refused, not recorded.
    assert [m["role"] for m in looped["completion"]] == ["assistant", "tool"] * 3 + ["assistant"]
    assert fake_server.stats()["tool_calls"] == 4


def lookup_yaml(project: BenchmarkProject, name: str, n: int, eval_yaml: str) -> None:
    write_table(project.evals / "data" / f"{name}.jsonl", n)
    (project.evals / f"{name}.yaml").write_text(
        textwrap.dedent(
            f"""\
            env_id: lookup-qa
            env_args:
              path: data/{name}.jsonl
            eval: {eval_yaml}
            gate: {{min_avg_reward: 0.1}}
            """
        )
    )


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_examples_are_subtests_scored_from_the_last_turn(
    project: BenchmarkProject, xdist: list[str]
) -> None:
    """A benchmark over lookup-qa: one subtest per example, passed exactly when the answer
    given after the tool's result was right; the records hold the whole conversation."""
    n = 8
    lookup_yaml(project, "kv", n, "{max_retries: 0}")
    project.server.configure(call_tools=True, accuracy=0.5)
    result = project.run("-v", *xdist)
    result.assert_outcomes(passed=1)
    judge = FakeModel("test-model", {})
    right = {i for i in range(n) if judge.fraction("", QUESTION.format(key=f"k{i}")) < 0.5}
    assert 0 < len(right) < n
    out = result.stdout.str()
    solved = {int(i) for i in re.findall(r"SOLVED \[example (\d+)\] \(reward=", out)}
    missed = {int(i) for i in re.findall(r"MISSED \[example (\d+)\] \(reward=", out)}
    assert (solved, missed) == (right, set(range(n)) - right)
    assert f"{len(right)} subtests passed, {n - len(right)} subtests missed" in out
    [run_dir] = project.run_dirs("kv")
    records = read_jsonl(run_dir / "results.jsonl")
    assert {r["example_id"] for r in records if r["reward"] == 1.0} == right
    assert all(
        [m["role"] for m in r["completion"]] == ["assistant", "tool", "assistant"] for r in records
    )


def test_requests_in_flight_never_exceed_max_concurrent(project: BenchmarkProject) -> None:
    """``eval.max_concurrent`` bounds the requests the server sees at once on the v1 path
    (every turn of every rollout goes through the plugin's capped client), and the run does
    reach the bound."""
    lookup_yaml(project, "kv", 12, "{max_concurrent: 3, rollouts: 2, max_retries: 0}")
    project.server.configure(call_tools=True, delay=0.3)
    project.run().assert_outcomes(passed=1)
    stats = project.server.stats()
    assert stats["chat_requests"] == 12 * 2 * 2
    assert stats["max_in_flight"] == 3


def test_a_resumed_rollout_sends_only_its_unanswered_turns(project: BenchmarkProject) -> None:
    """Killed while every rollout in progress waits for its second turn's answer: the resumed
    run replays each answered first turn (the tool call) from the answer journal, runs the tool
    again, and sends only the second turns."""
    n, cap = 6, 2
    lookup_yaml(project, "kv", n, f"{{max_concurrent: {cap}, prefetch: 1, max_retries: 0}}")
    project.server.configure(call_tools=True, hold_tool_results=600)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", *project.args()],
        cwd=project.pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while (stats := project.server.stats()).get("held_tool_results", 0) < cap:
            assert time.monotonic() < deadline and process.poll() is None, stats
            time.sleep(0.05)
        time.sleep(0.5)  # first turns sent before the slots filled up are answered
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    first_turns: int = project.server.stats()["tool_calls"]
    assert cap <= first_turns < n

    project.server.configure(hold_tool_results=0.0, reset_stats=True)
    result = project.run()
    result.assert_outcomes(passed=1)
    stats = project.server.stats()
    # No answered turn was asked again; every unanswered one was asked once.
    assert stats["tool_calls"] == n - first_turns
    assert stats["tool_result_requests"] == n
    [run_dir] = project.run_dirs("kv")
    assert json.loads((run_dir / "metadata.json").read_text())["reused_answers"] == first_turns
    records = read_jsonl(run_dir / "results.jsonl")
    assert sorted(r["example_id"] for r in records) == list(range(n))
    assert all(r["reward"] == 1.0 for r in records)


REFUSED_TASKSETS = {
    "needs_box": (
        """
        class BoxTask(vf.Task[vf.TaskData]):
            NEEDS_CONTAINER = True

        class BoxTaskset(vf.Taskset[BoxTask, vf.TasksetConfig]):
            def load(self):
                yield BoxTask(vf.TaskData(prompt="hi"))

        __all__ = ["BoxTaskset"]
        """,
        r"'needs-box': its tasks \(BoxTask\) need a container runtime, and the subprocess "
        r"runtime is not one: set agent.runtime: docker",
    ),
    "docker_tools": (
        """
        class DockerTools(vf.Toolset[vf.SharedToolsetConfig]):
            pass

        class DockerTaskset(vf.Taskset[vf.Task[vf.TaskData], vf.TasksetConfig]):
            def load(self):
                yield vf.Task(vf.TaskData(prompt="hi"))

            @classmethod
            def toolsets(cls, config):
                return [DockerTools(vf.SharedToolsetConfig(runtime={"type": "docker"}))]

        __all__ = ["DockerTaskset"]
        """,
        r"'docker-tools': tool server 'docker_tools': runtime 'docker': .* set that toolset "
        r"config's `runtime` to `\{type: subprocess\}` or its `url`",
    ),
    "no_prompt": (
        """
        class SilentTaskset(vf.Taskset[vf.Task[vf.TaskData], vf.TasksetConfig]):
            def load(self):
                yield vf.Task(vf.TaskData(prompt="hi"))
                yield vf.Task(vf.TaskData())

        __all__ = ["SilentTaskset"]
        """,
        r"'no-prompt': task 1 has no prompt; .* give every task a prompt",
    ),
    "boxed_task": (
        """
        class ImageTaskset(vf.Taskset[vf.Task[vf.TaskData], vf.TasksetConfig]):
            def load(self):
                yield vf.Task(vf.TaskData(prompt="hi", image="python:3.12"))

        __all__ = ["ImageTaskset"]
        """,
        r"'boxed-task': task 0 runs in the container image 'python:3.12', .* agent.runtime: "
        r"docker",
    ),
    "walled_task": (
        """
        class WalledTaskset(vf.Taskset[vf.Task[vf.TaskData], vf.TasksetConfig]):
            def load(self):
                yield vf.Task(vf.TaskData(prompt="hi", network_allow=["pypi.org"]))

        __all__ = ["WalledTaskset"]
        """,
        r"'walled-task': task 0 asks for a network policy .* agent.runtime: docker",
    ),
}


@pytest.mark.parametrize("module", sorted(REFUSED_TASKSETS))
def test_unsupported_tasksets_are_refused_with_the_reason(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taskset shapes the subprocess runtime cannot play (on a machine without a Docker
    daemon) are refused when the benchmark is loaded, naming the env id, what is unsupported
    and what to do."""
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    source, message = REFUSED_TASKSETS[module]
    (tmp_path / f"{module}.py").write_text("import verifiers.v1 as vf\n" + textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    env_id = module.replace("_", "-")
    with pytest.raises(EnvironmentLoadError, match=message):
        verifiers_v1.load_environment(env_id, {}, tmp_path)


#: A taskset whose own code fails while it loads (module -> source, the error expected).
BROKEN_TASKSETS = {
    "import_raises": (
        """
        import os

        TOKEN = os.environ["PYTEST_MODAL_EVAL_UNSET_TOKEN"]
        """,
        r"^environment 'import-raises': importing its taskset module raised KeyError: "
        r"'PYTEST_MODAL_EVAL_UNSET_TOKEN' \(at \S*import_raises\.py:5\)$",
    ),
    "missing_dep": (
        """
        import not_a_real_package_xyz
        """,
        r"^environment 'missing-dep': importing its taskset module failed: no module named "
        r"'not_a_real_package_xyz' \(imported at \S*missing_dep\.py:3\); install the package "
        r"that provides 'not_a_real_package_xyz' where pytest runs$",
    ),
    "bad_syntax": (
        """
        def broken(:
            pass
        """,
        r"^environment 'bad-syntax': importing its taskset module raised SyntaxError: "
        r"invalid syntax \(bad_syntax\.py, line 3\)$",
    ),
    "load_raises": (
        """
        class ReadsTaskset(vf.Taskset[vf.Task[vf.TaskData], vf.TasksetConfig]):
            def load(self):
                with open("data/not-there.jsonl") as rows:
                    yield from ()

        __all__ = ["ReadsTaskset"]
        """,
        r"^environment 'load-raises': loading its tasks raised FileNotFoundError: \[Errno 2\] "
        r"No such file or directory: 'data/not-there.jsonl' \(at \S*load_raises\.py:5\)$",
    ),
    "init_raises": (
        """
        class PickyTaskset(vf.Taskset[vf.Task[vf.TaskData], vf.TasksetConfig]):
            def __init__(self, config):
                raise RuntimeError("needs a GPU")

            def load(self):
                yield from ()

        __all__ = ["PickyTaskset"]
        """,
        r"^environment 'init-raises': building its taskset raised RuntimeError: needs a GPU "
        r"\(at \S*init_raises\.py:5\)$",
    ),
}


@pytest.mark.parametrize("module", sorted(BROKEN_TASKSETS))
def test_an_error_in_the_tasksets_own_code_is_told_in_one_line(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What was being done, the exception and the taskset's line that raised it; a missing
    dependency is named with the fix."""
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    source, message = BROKEN_TASKSETS[module]
    (tmp_path / f"{module}.py").write_text("import verifiers.v1 as vf\n" + textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvironmentLoadError, match=message):
        verifiers_v1.load_environment(module.replace("_", "-"), {}, tmp_path)


CHECKED_CONFIG = """
import pydantic
import verifiers.v1 as vf


class CountConfig(vf.TasksetConfig):
    n: int = 4
    start: int = 0

    @pydantic.model_validator(mode="after")
    def enough(self):
        if self.start < 0:
            raise ValueError("start must not be negative")
        return self


class CountTaskset(vf.Taskset[vf.Task[vf.TaskData], CountConfig]):
    def load(self):
        for i in range(self.config.n):
            yield vf.Task(vf.TaskData(prompt=f"Say {self.config.start + i}."))


__all__ = ["CountTaskset"]
"""


def test_rejected_env_args_name_the_field_and_the_fields_there_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    (tmp_path / "counted.py").write_text(CHECKED_CONFIG)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvironmentLoadError) as misspelled:
        verifiers_v1.load_environment("counted", {"nn": 3}, tmp_path)
    assert str(misspelled.value) == (
        "environment 'counted' rejected env_args: env_args.nn: Extra inputs are not permitted "
        "(fields: n, start, system_prompt, task)"
    )
    with pytest.raises(EnvironmentLoadError) as whole:
        verifiers_v1.load_environment("counted", {"start": -1}, tmp_path)
    assert str(whole.value) == (
        "environment 'counted' rejected env_args: env_args: Value error, start must not be negative"
    )
    assert len(verifiers_v1.load_environment("counted", {"n": 2}, tmp_path).tasks) == 2


def test_a_broken_taskset_errors_its_benchmark_in_one_line(project: BenchmarkProject) -> None:
    """Through pytest: the benchmark's error and its summary line name the YAML and the
    cause, with no traceback."""
    source, _ = BROKEN_TASKSETS["import_raises"]
    modules = project.pytester.path / "tasksets"
    modules.mkdir()
    (modules / "import_raises.py").write_text(textwrap.dedent(source))
    project.pytester.syspathinsert(modules)
    (project.evals / "broken.yaml").write_text("env_id: import-raises\n")
    result = project.run()
    result.assert_outcomes(errors=1)
    line = (
        "*evals/broken.yaml: environment 'import-raises': importing its taskset module raised "
        "KeyError: 'PYTEST_MODAL_EVAL_UNSET_TOKEN' (at tasksets/import_raises.py:4)"
    )
    result.stdout.fnmatch_lines([line, f"broken (test-model): ERROR: {line}"])
    assert "Traceback" not in result.stdout.str() and "self = " not in result.stdout.str()


TASK_TOOLS = '''
import verifiers.v1 as vf


class SecretTools(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "kv"

    async def setup_task(self, task):
        self.value = task.answer  # the task's data

    @vf.tool
    async def lookup(self, key: str) -> str:
        """The value stored under key."""
        return self.value


class SecretData(vf.TaskData):
    answer: str = ""


class SecretTask(vf.Task[SecretData]):
    @classmethod
    def toolsets(cls, config):
        return [SecretTools(vf.ToolsetConfig())]

    @vf.reward
    async def correct(self, trace):
        return 1.0 if self.data.answer in trace.last_reply else 0.0


class SecretTaskset(vf.Taskset[SecretTask, vf.TasksetConfig]):
    def load(self):
        for i in range(2):
            yield SecretTask(SecretData(prompt=f"What is the value of s{i}?", answer=f"x{i}"))


__all__ = ["SecretTaskset"]

if __name__ == "__main__":
    SecretTools.run()
'''


def test_a_tasks_own_tool_server_is_started_per_rollout(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's own toolset (``Task.toolsets``) is started by verifiers for each rollout as a
    local process, and reads its task over the interception's state channel. The taskset is
    importable through ``sys.path`` only (as with pytest's ``pythonpath``); the tool server
    process, ``python -m secret_tools`` in a directory of its own, finds it too."""
    from pytest_modal_eval.client import verifiers_v1

    (tmp_path / "secret_tools.py").write_text(TASK_TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", "/nonexistent-entry")
    fake_server.configure(call_tools=True)
    # The plugin's in-process harness: the test server calls the first tool offered, and
    # verifiers' default harness (bash) offers its own first.
    env = verifiers_v1.load_environment(
        "secret-tools", {}, tmp_path, agent={"harness": "pytest-modal-eval-chat"}
    )
    finished = run_v1(env, fake_server.base_url, max_concurrent_requests=2)
    for example_id in (0, 1):
        (output,) = finished[example_id]
        assert output["error"] is None, output["error"]
        assert output["completion"][1]["content"] == f"x{example_id}"
        assert output["reward"] == 1.0
    assert os.environ["PYTHONPATH"] == "/nonexistent-entry"  # as it was before the run


@pytest.mark.parametrize(
    ("env_args", "data", "message"),
    [
        ({}, None, r"'lookup-qa' rejected env_args: env_args.path: Field required"),
        (
            {"path": "kv.jsonl", "max_turns": 1},
            None,
            r"env_args.max_turns: Input should be greater than or equal to 2",
        ),
        (
            {"path": "kv.jsonl"},
            '{"key": "a"}\n',
            r"kv.jsonl:1: missing 'value'; each line needs \{\"key\"",
        ),
        ({"path": "nope.jsonl"}, None, r"nope.jsonl does not exist \(env_args.path is relative"),
    ],
    ids=["no-path", "max-turns", "bad-line", "no-file"],
)
def test_lookup_qa_bad_input_names_the_field_or_line(
    tmp_path: Path, env_args: dict[str, Any], data: str | None, message: str
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    if data is None:
        write_table(tmp_path / "kv.jsonl", 2)
    else:
        (tmp_path / "kv.jsonl").write_text(data)
    with pytest.raises(EnvironmentLoadError, match=message):
        verifiers_v1.load_environment("lookup-qa", env_args, tmp_path)


def capped_yaml(project: BenchmarkProject, n: int, task_turns: int, eval_yaml: str) -> None:
    write_table(project.evals / "data" / "loop.jsonl", n)
    (project.evals / "loop.yaml").write_text(
        textwrap.dedent(
            f"""\
            env_id: lookup-qa
            env_args: {{path: data/loop.jsonl, max_turns: {task_turns}}}
            eval: {eval_yaml}
            gate: {{min_avg_reward: 0.0}}
            """
        )
    )


def test_a_rollout_stopped_by_eval_max_turns_is_errored(project: BenchmarkProject) -> None:
    """A model that never stops calling the tool, in a taskset whose own stop comes later than
    ``eval.max_turns``: each rollout is stopped at the cap and errored (not scored), saying so;
    raising the cap, the next run retries them and the taskset's own stop ends and scores
    them."""
    n = 2
    capped_yaml(project, n, 10, "{max_turns: 3, max_retries: 0}")
    project.server.configure(call_tools=True, tool_loop=True)
    result = project.run("-v")
    errored = [line for line in result.stdout.lines if line.startswith("ERRORED [example")]
    assert len(errored) == n, result.stdout.str()
    assert "eval.max_turns (3)" in result.stdout.str()
    assert project.server.stats()["tool_calls"] == n * 3
    [run_dir] = project.run_dirs("loop")
    for record in read_jsonl(run_dir / "checkpoint.jsonl"):
        assert record["error"]["error"] == "MaxTurnsReached"
        assert "stopped after 3 model turns, eval.max_turns (3)" in record["error"]["message"]
        assert record["stop_condition"] == "max_turns"

    capped_yaml(project, n, 10, "{max_turns: 20, max_retries: 0}")
    project.server.configure(reset_stats=True)
    result = project.run("-v")
    result.assert_outcomes(passed=1)
    assert f"1 passed, {n} subtests missed" in result.stdout.lines[-1]
    assert project.server.stats()["tool_calls"] == n * 10
    assert project.run_dirs("loop") == [run_dir]  # the same run, its errored examples retried
    records = read_jsonl(run_dir / "results.jsonl")
    assert [(r["stop_condition"], r["error"], r["reward"]) for r in records] == [
        ("turn_limit", None, 0.0)
    ] * n


def test_eval_max_turns_has_a_default(project: BenchmarkProject) -> None:
    """Without ``eval.max_turns`` a looping rollout is stopped at the documented default."""
    from pytest_modal_eval.config.schema import DEFAULT_MAX_TURNS

    capped_yaml(project, 1, 10 * DEFAULT_MAX_TURNS, "{max_retries: 0}")
    project.server.configure(call_tools=True, tool_loop=True)
    result = project.run("-v")
    assert f"eval.max_turns ({DEFAULT_MAX_TURNS})" in result.stdout.str()
    assert project.server.stats()["tool_calls"] == DEFAULT_MAX_TURNS

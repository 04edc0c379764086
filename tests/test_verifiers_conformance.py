"""Parity with verifiers' own evaluation: each environment shape runs through the plugin and
through ``vf-eval`` against the same deterministic endpoint with identical per-example rewards.

verifiers 0.4.0's wheel ships no example environments, so the shapes are small tasksets
written here: a plain taskset on verifiers' default harness, one that bundles its own harness,
a scripted user (a ``SingleAgentEnv`` subclass driving a multi-turn exchange), and a two-seat
game (its own ``Env``). The endpoint is the test server on 127.0.0.1, answering a question
right or wrong by a hash of the question, so rewards differ between examples but not between
runs. verifiers' harnesses (``bash``, ``null``) install their script's packages with ``uv``
from PyPI on first use, which this machine reaches.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.support.v1_runs import SUM_TASKS as COMMON
from tests.support.v1_runs import run_v1, vf_eval, vf_eval_args

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")

SHAPES: dict[str, str] = {
    # A plain taskset: verifiers plays it with its default harness (bash).
    "conf_plain": """
class PlainConfig(vf.TasksetConfig):
    id: str = "conf-plain"
    follow_up: bool = False


class PlainTaskset(vf.Taskset[SumTask, PlainConfig]):
    def load(self):
        yield from sums(self.config, 6, 10)


__all__ = ["PlainTaskset"]
""",
    # A taskset that ships its own harness (verifiers' null chat program, its prompt marked).
    "conf_bundled": """
from verifiers.v1.harnesses.null import NullHarness, NullHarnessConfig


class BundledHarnessConfig(NullHarnessConfig):
    id: str = "conf-bundled"


class BundledHarness(NullHarness):
    config: BundledHarnessConfig

    def resolve_prompt(self, data):
        system, prompt = super().resolve_prompt(data)
        return system, f"{prompt} (bundled harness)"


class BundledConfig(vf.TasksetConfig):
    id: str = "conf-bundled"
    follow_up: bool = False


class BundledTaskset(vf.Taskset[SumTask, BundledConfig]):
    def load(self):
        yield from sums(self.config, 6, 30)


__all__ = ["BundledTaskset", "BundledHarness"]
""",
    # A scripted user: the Env answers the model's first reply with a follow-up question.
    "conf_user": """
class UserConfig(vf.TasksetConfig):
    id: str = "conf-user"
    follow_up: bool = True


class UserTaskset(vf.Taskset[SumTask, UserConfig]):
    def load(self):
        yield from sums(self.config, 5, 50)


class ScriptedUserEnv(SingleAgentEnv):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as chat:
            await chat.turn()
            await chat.turn(task.data.follow_up)


__all__ = ["UserTaskset", "ScriptedUserEnv"]
""",
    # A two-seat game: each player answers its own question; the benchmark scores one seat.
    "conf_game": """
class GameConfig(vf.TasksetConfig):
    id: str = "conf-game"
    follow_up: bool = False


class GameTaskset(vf.Taskset[SumTask, GameConfig]):
    def load(self):
        yield from sums(self.config, 5, 70)


class GameEnvConfig(vf.EnvConfig):
    first: vf.AgentConfig = vf.AgentConfig()
    second: vf.AgentConfig = vf.AgentConfig()


class GameEnv(vf.Env[GameEnvConfig]):
    async def run(self, task, agents):
        await agents.first.run(task)
        second = SumData(
            prompt=task.data.follow_up,
            answer=str(int(task.data.answer) + 5),
        )
        await agents.second.run(type(task)(second, task.config))


__all__ = ["GameTaskset", "GameEnv"]
""",
}

SHAPES["conf_tools"] = """
class KeyToolsetConfig(vf.SharedToolsetConfig):
    pass


class KeyToolset(vf.Toolset[KeyToolsetConfig]):
    TOOL_PREFIX = "kv"

    @vf.tool
    async def lookup(self, key: str) -> str:
        \"\"\"The value stored under key.\"\"\"
        return key[::-1]


class KeyData(vf.TaskData):
    answer: str = ""


class KeyTask(vf.Task[KeyData]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if boxed(trace.last_reply) == self.data.answer else 0.0


class ToolsConfig(vf.TasksetConfig):
    id: str = "conf-tools"


class ToolsTaskset(vf.Taskset[KeyTask, ToolsConfig]):
    def load(self):
        for i in range(5):
            key = f"key{i}x{7 * i}"
            yield KeyTask(
                KeyData(prompt=f"What is the value of {key}?", answer=key[::-1]),
                self.config.task,
            )

    @classmethod
    def toolsets(cls, config):
        return [KeyToolset(KeyToolsetConfig())]


__all__ = ["ToolsTaskset"]

if __name__ == "__main__":  # the shared tool server: python -m conf_tools
    KeyToolset.run()
"""

# A zero-sum game: the seat that answers right while the other does not wins 2, the other
# loses 2; a draw pays 0. Its tasks reward nothing themselves: the payoff is the reward.
SHAPES["conf_zerosum"] = """
class HandTask(vf.Task[SumData]):
    pass


class ZeroSumConfig(vf.TasksetConfig):
    id: str = "conf-zerosum"
    follow_up: bool = False


class ZeroSumTaskset(vf.Taskset[HandTask, ZeroSumConfig]):
    def load(self):
        for task in sums(self.config, 8, 90):
            yield HandTask(task.data, task.config)


class ZeroSumEnvConfig(vf.EnvConfig):
    first: vf.AgentConfig = vf.AgentConfig()
    second: vf.AgentConfig = vf.AgentConfig()


class ZeroSumEnv(vf.Env[ZeroSumEnvConfig]):
    async def run(self, task, agents):
        second = SumData(prompt=task.data.follow_up, answer=str(int(task.data.answer) + 5))
        one = await agents.first.run(task)
        two = await agents.second.run(type(task)(second, task.config))
        right = [boxed(one.last_reply) == task.data.answer, boxed(two.last_reply) == second.answer]
        net = 2.0 * (right[0] - right[1])
        one.record_reward("payoff", net)
        two.record_reward("payoff", -net)


__all__ = ["ZeroSumTaskset", "ZeroSumEnv"]
"""

#: Each shape's seats, the seat the benchmark scores, and the harness verifiers resolves.
SEATS = {
    "conf_plain": (["agent"], None, "bash"),
    "conf_bundled": (["agent"], None, "conf-bundled"),
    "conf_user": (["agent"], None, "bash"),
    "conf_game": (["first", "second"], "second", "bash"),
    "conf_zerosum": (["first", "second"], "first", "bash"),
    # verifiers' null harness: the test server calls the first tool offered (bash offers its own).
    "conf_tools": (["agent"], None, "null"),
}


@pytest.fixture
def shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    modules = tmp_path / "tasksets"
    modules.mkdir()
    for name, body in SHAPES.items():
        (modules / f"{name}.py").write_text(textwrap.dedent(COMMON) + textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(modules))
    return modules


def vf_eval_rewards(
    modules: Path, env_id: str, base_url: str, out: Path
) -> dict[tuple[int, str], float]:
    """(task idx, seat) -> reward from verifiers' own ``vf-eval`` (no upload, every seat in
    the subprocess runtime)."""
    seats, _, _ = SEATS[env_id.replace("-", "_")]
    # verifiers' null harness for the tool server (the test server calls the first tool
    # offered, and bash offers its own); every other shape plays the harness it declares.
    harness = "null" if env_id == "conf-tools" else None
    args = vf_eval_args(env_id, base_url, seats, harness)
    episodes = vf_eval(modules, args, out)
    import verifiers.v1 as vf

    rewards: dict[tuple[int, str], float] = {}
    for episode in episodes:
        idx = episode["task"]["data"]["idx"]
        for raw in episode["traces"]:
            trace = vf.Trace.model_validate(raw)
            assert trace.ok, trace.errors
            rewards[(idx, trace.agent.name or "agent")] = trace.reward
    return rewards


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_plugin_and_vf_eval_give_identical_rewards(
    shape: str, shapes: Path, fake_server: Any, tmp_path: Path
) -> None:
    from pytest_modal_eval.client import verifiers_v1

    fake_server.configure(accuracy=0.5, salt=shape, call_tools=shape == "conf_tools")
    env_id = shape.replace("_", "-")
    seats, scored, harness = SEATS[shape]
    expected = vf_eval_rewards(shapes, env_id, fake_server.base_url, tmp_path / "vf-eval")

    agent: dict[str, str] = {"seat": scored} if scored else {}
    if shape == "conf_tools":
        agent["harness"] = "null"
    env = verifiers_v1.load_environment(env_id, {}, tmp_path, agent=agent)
    finished = run_v1(env, fake_server.base_url, max_concurrent_requests=4)

    played = env.metadata()
    assert sorted(played["seats"]) == seats
    assert {s["harness"] for s in played["seats"].values()} == {harness}
    assert {s["runtime"] for s in played["seats"].values()} == {"subprocess"}
    got: dict[tuple[int, str], float] = {}
    for example_id, outputs in finished.items():
        # One output per seat of the rollout, each naming its seat, the others beside it.
        assert sorted(o["agent"] or "agent" for o in outputs) == seats
        for output in outputs:
            assert output["error"] is None, output["error"]
            got[(example_id, output["agent"] or "agent")] = output["reward"]
            beside = {seat: other["reward"] for seat, other in (output.get("seats") or {}).items()}
            assert beside == {s: expected[(example_id, s)] for s in seats if s != output["agent"]}
    assert got == expected
    rewards = set(expected.values())
    # The endpoint answers some right, some wrong (the game pays a win, a loss or a draw).
    assert rewards >= ({-2.0, 2.0} if shape == "conf_zerosum" else {0.0, 1.0})


def test_bundled_harness_and_scripted_user_reach_the_endpoint_as_declared(
    shapes: Path, fake_server: Any, tmp_path: Path
) -> None:
    """The taskset's own harness reshapes its prompt, and the scripted user's follow-up is a
    second model turn: the server sees both, as vf-eval makes it see them."""
    from pytest_modal_eval.client import verifiers_v1

    env = verifiers_v1.load_environment("conf-bundled", {}, tmp_path)
    run_v1(env, fake_server.base_url)
    asked = fake_server.stats()["by_question"]
    assert sum("(bundled harness)" in q for q in asked) == 6

    fake_server.reset()
    env = verifiers_v1.load_environment("conf-user", {}, tmp_path)
    finished = run_v1(env, fake_server.base_url)
    (output,) = finished[0]
    assistant = [m for m in output["completion"] if m["role"] == "assistant"]
    assert len(assistant) == 2
    assert any(
        m["role"] == "user" and m["content"] == "What is 52 + 5?" for m in output["completion"]
    )


def test_the_benchmark_overrides_harness_and_runtime(shapes: Path, tmp_path: Path) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    env = verifiers_v1.load_environment(
        "conf-plain", {}, tmp_path, agent={"harness": "pytest-modal-eval-chat"}
    )
    assert env.metadata()["seats"]["agent"] == {
        "harness": "pytest-modal-eval-chat",
        "harness_from": "benchmark",
        "runtime": "subprocess",
        "runtime_from": "default",
        "model": None,  # the benchmark's: env.metadata() was not told it
        "model_from": "default",
        "endpoint": None,
    }
    with pytest.raises(EnvironmentLoadError) as refused:
        verifiers_v1.load_environment("conf-plain", {}, tmp_path, agent={"runtime": "docker"})
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("environment 'conf-plain': seat 'agent': runtime 'docker': ")
    assert "docker" in message and "agent.runtime: subprocess" in message
    with pytest.raises(EnvironmentLoadError, match=r"runtime 'prime': .*public tunnel"):
        verifiers_v1.load_environment("conf-plain", {}, tmp_path, agent={"runtime": "prime"})
    assert verifiers_v1.load_environment("conf-game", {}, tmp_path).scored_seat is None
    with pytest.raises(EnvironmentLoadError, match=r"has no seat 'third'.*first, second"):
        verifiers_v1.load_environment("conf-game", {}, tmp_path, agent={"seat": "third"})


INFINITE = """
import verifiers.v1 as vf


class CountData(vf.TaskData):
    answer: str = ""


class CountTask(vf.Task[CountData]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if self.data.answer in (trace.last_reply or "") else 0.0


class EndlessConfig(vf.TasksetConfig):
    id: str = "conf-endless"


class EndlessTaskset(vf.Taskset[CountTask, EndlessConfig]):
    INFINITE = True

    def load(self):
        i = 0
        while True:
            data = CountData(prompt=f"What is {i} + 1?", answer=str(i + 1))
            yield CountTask(data, self.config.task)
            i += 1


__all__ = ["EndlessTaskset"]
"""


def test_an_infinite_taskset_runs_its_first_num_examples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    (tmp_path / "conf_endless.py").write_text(INFINITE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvironmentLoadError, match=r"infinitely many tasks; set eval\.num_"):
        verifiers_v1.load_environment("conf-endless", {}, tmp_path)
    env = verifiers_v1.load_environment("conf-endless", {}, tmp_path, num_examples=3)
    assert [t.data.prompt for t in env.tasks] == [f"What is {i} + 1?" for i in range(3)]


def _game_project(project: Any, monkeypatch: pytest.MonkeyPatch, shape: str = "conf_game") -> None:
    """The two-seat game importable by the inner pytest run and its tool processes."""
    modules = project.pytester.path / "tasksets"
    modules.mkdir()
    (modules / f"{shape}.py").write_text(textwrap.dedent(COMMON) + textwrap.dedent(SHAPES[shape]))
    project.pytester.syspathinsert(modules)
    monkeypatch.setenv("PYTHONPATH", str(modules))


def _game_yaml(project: Any, agent: str, gate: str, env_id: str = "conf-game") -> None:
    (project.evals / "game.yaml").write_text(
        f"env_id: {env_id}\nagent: {agent}\neval: {{max_retries: 0}}\ngate: {gate}\n"
    )


def test_a_two_seat_game_records_every_seat_and_resumes_only_what_is_missing(
    project: Any, fake_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through pytest: one record per seat per rollout (``agent`` names it, the other seat's
    result beside it), a summary row and figures per seat, the named seat as the headline;
    a checkpoint that lost one seat's record redoes that rollout's episode only."""
    from tests.conftest import read_jsonl

    _game_project(project, monkeypatch)
    fake_server.configure(accuracy=0.5, salt="conf_game")
    _game_yaml(project, "{seat: second, harness: 'null'}", "{min_avg_reward: 0.0}")
    result = project.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*game[[]first[]]  *PASS*", "*game[[]second[]]  *PASS*"])
    (run_dir,) = project.run_dirs("game")
    records = read_jsonl(run_dir / "results.jsonl")
    assert [(r["example_id"], r["agent"]) for r in records] == [
        (i, seat) for i in range(5) for seat in ("first", "second")
    ]
    by_seat: dict[str, list[float]] = {"first": [], "second": []}
    for i, (first, second) in enumerate(zip(records[::2], records[1::2], strict=True)):
        # Each seat's record holds the task that seat played: its own question and answer.
        total = 70 + 7 * i + i + 2
        assert first["answer"] == str(total)
        assert first["prompt"][-1]["content"] == f"What is {70 + 7 * i} + {i + 2}?"
        assert second["answer"] == str(total + 5)
        assert second["prompt"][-1]["content"] == f"What is {total} + 5?"
        assert first["seats"]["second"]["reward"] == second["reward"]
        assert second["seats"]["first"]["reward"] == first["reward"]
        by_seat["first"].append(first["reward"])
        by_seat["second"].append(second["reward"])
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["seat"] == "second"
    for seat, rewards in by_seat.items():
        assert metadata["seats"][seat]["avg_reward"] == pytest.approx(sum(rewards) / 5)
        assert metadata["seats"][seat]["n_evaluated"] == 5
    assert metadata["avg_reward"] == metadata["seats"]["second"]["avg_reward"]
    assert metadata["played"] == {
        "env": "GameEnv",
        "env_id": None,
        "env_from": "taskset",
        "scored_seat": "second",
        "seats": {
            seat: {
                "harness": "null",
                "harness_from": "benchmark",
                "runtime": "subprocess",
                "runtime_from": "default",
                "model": "test-model",
                "model_from": "default",
                "endpoint": None,
            }
            for seat in ("first", "second")
        },
    }

    # A kill cut the checkpoint after the last example's first seat: only that rollout's
    # episode is played again, and its finished seat keeps its first record.
    checkpoint = run_dir / "checkpoint.jsonl"
    lines = checkpoint.read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])
    kept = [line for line in lines if json.loads(line) != last]
    checkpoint.write_bytes(b"".join(kept))
    (run_dir / "metadata.json").unlink()
    fake_server.reset()
    fake_server.configure(accuracy=0.5, salt="conf_game")
    result = project.run()
    result.assert_outcomes(passed=1)
    asked = fake_server.stats()["by_question"]
    a, b = 70 + 7 * last["example_id"], last["example_id"] + 2
    assert asked == {f"What is {a} + {b}?": 1, f"What is {a + b} + 5?": 1}
    again = read_jsonl(run_dir / "results.jsonl")
    redone = records.index(last)
    assert again[:redone] + again[redone + 1 :] == records[:redone] + records[redone + 1 :]
    timing = {"generation_ms", "slot_wait_ms", "scoring_ms", "total_ms"}
    assert {k: v for k, v in again[redone].items() if k not in timing} == {
        k: v for k, v in last.items() if k not in timing
    }
    assert project.run_dirs("game") == [run_dir]

    # The readers: show names each record's seat and each seat's figures, compare pairs one
    # seat's examples and rollouts, the report's rows are the headline seat's.
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main
    from pytest_modal_eval.runs.paths import RunPaths

    def cli(*args: str) -> Any:
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    assert [(r["agent"], r["reward"]) for r in RunPaths(run_dir).records()] == [
        (r["agent"], r["reward"]) for r in again
    ]
    shown = cli("show", str(run_dir), "-n", "10")
    assert shown.exit_code == 0, shown.output
    assert "- #0 r0 [first]" in shown.output and "- #0 r0 [second]" in shown.output
    assert "    first: " in shown.output and "    second: " in shown.output
    assert len(json.loads(cli("show", str(run_dir), "--json").stdout)["examples"]) == 10
    for seat in ("first", "second"):
        compared = cli("compare", str(run_dir), str(run_dir), "--seat", seat, "--json")
        document = json.loads(compared.stdout)
        assert document["seat"] == seat and document["reference"]["examples"] == 5
        assert document["comparison"]["run_mean"] == pytest.approx(sum(by_seat[seat]) / 5)
    assert json.loads(cli("compare", str(run_dir), str(run_dir), "--json").stdout)["seat"] == (
        "second"
    )
    refused = cli("compare", str(run_dir), str(run_dir), "--seat", "third")
    assert refused.exit_code == 2 and "its seats: first, second" in refused.output
    report = project.pytester.path / "report.html"
    assert cli("report", str(run_dir), "-o", str(report)).exit_code == 0
    from pytest_modal_eval.report.page import _rows
    from pytest_modal_eval.runs.reader import iter_records

    rows, _ = _rows(iter_records(run_dir / "results.jsonl"), metadata, set(), set())
    assert [row[1] for row in rows] == by_seat["second"]


def test_the_gate_applies_to_the_named_seat_or_to_every_seat(
    project: Any, fake_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``agent.seat`` gates one seat; ``gate.every_seat`` gates each and fails naming the seat
    below the threshold; neither, with two seats, is refused naming both keys. The headline
    seat does not change the run: the later runs reuse the first one's records."""
    _game_project(project, monkeypatch)
    fake_server.configure(accuracy=0.5, salt="conf_game")
    _game_yaml(project, "{harness: 'null'}", "{min_avg_reward: 0.0}")
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*plays 2 seats (first, second); set agent.seat*or gate.every_seat: true*"]
    )

    _game_yaml(project, "{seat: first, harness: 'null'}", "{min_avg_reward: -1}")
    project.run().assert_outcomes(passed=1)
    (run_dir,) = project.run_dirs("game")
    means = {
        seat: figures["avg_reward"]
        for seat, figures in json.loads((run_dir / "metadata.json").read_text())["seats"].items()
    }
    assert means["first"] != means["second"]  # the endpoint's answers tell the seats apart
    better, worse = sorted(means, key=means.__getitem__, reverse=True)
    threshold = (means[better] + means[worse]) / 2
    fake_server.reset()

    _game_yaml(project, f"{{seat: {better}, harness: 'null'}}", f"{{min_avg_reward: {threshold}}}")
    project.run().assert_outcomes(passed=1)
    _game_yaml(project, f"{{seat: {worse}, harness: 'null'}}", f"{{min_avg_reward: {threshold}}}")
    result = project.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*seat {worse}: mean reward *< gate.min_avg_reward*"])

    _game_yaml(project, "{harness: 'null'}", f"{{min_avg_reward: {threshold}, every_seat: true}}")
    result = project.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*seat {worse}: mean reward *< gate.min_avg_reward*"])
    assert f"seat {better}: mean reward" not in result.stdout.str()

    # Early stop decides one seat, so gate.every_seat turns it off and says so; every seat's
    # every example counts.
    _game_yaml(
        project,
        "{harness: 'null'}",
        f"{{min_avg_reward: {threshold}, every_seat: true, early_stop: true}}",
    )
    result = project.run()
    result.assert_outcomes(failed=1)
    off = "gate.every_seat: early stop decides one seat; the run goes on to the end"
    result.stdout.fnmatch_lines([f"*early stop: {off}*"])
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["early_stop"] == {"decided": False, "reason": off}
    assert {s: f["n_evaluated"] for s, f in metadata["seats"].items()} == {
        "first": 5,
        "second": 5,
    }
    assert fake_server.stats().get("chat_requests", 0) == 0
    assert project.run_dirs("game") == [run_dir]


def test_a_game_s_payoffs_keep_their_range_in_records_intervals_and_gates(
    project: Any, fake_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Payoffs of -2, 0 and +2: each seat's records hold them, each seat's interval lies in
    [-2, 2] (not in [0, 1]), and a negative gate.min_avg_reward passes or fails the losing
    seat by its own mean."""
    from tests.conftest import read_jsonl

    _game_project(project, monkeypatch, "conf_zerosum")
    fake_server.configure(accuracy=0.5, salt="conf_zerosum")
    agent = "{seat: first, harness: 'null'}"
    _game_yaml(project, agent, "{min_avg_reward: -2}", "conf-zerosum")
    project.run().assert_outcomes(passed=1)
    (run_dir,) = project.run_dirs("game")
    records = read_jsonl(run_dir / "results.jsonl")
    assert {r["agent"] for r in records} == {"first", "second"}
    assert {r["reward"] for r in records} >= {-2.0, 2.0}
    for first, second in zip(records[::2], records[1::2], strict=True):
        assert first["reward"] == -second["reward"]
    seats = json.loads((run_dir / "metadata.json").read_text())["seats"]
    loser = min(seats, key=lambda seat: seats[seat]["avg_reward"])
    mean = seats[loser]["avg_reward"]
    assert mean < 0  # zero-sum: one seat's mean is the other's, negated, and not 0 here
    for figures in seats.values():
        low, high = figures["ci"]
        assert -2.0 <= low <= figures["avg_reward"] <= high <= 2.0
    assert seats[loser]["ci"][0] < 0.0

    fake_server.reset()
    named = f"{{seat: {loser}, harness: 'null'}}"
    _game_yaml(project, named, "{min_avg_reward: -1.99}", "conf-zerosum")
    project.run().assert_outcomes(passed=1)
    above = mean / 2  # negative, and above the losing seat's mean
    _game_yaml(project, named, f"{{min_avg_reward: {above}}}", "conf-zerosum")
    result = project.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*seat {loser}: mean reward -* < gate.min_avg_reward -*"])
    assert fake_server.stats().get("chat_requests", 0) == 0  # the same run, re-read
    assert project.run_dirs("game") == [run_dir]


def test_a_seat_the_episode_never_played_errors_every_seat() -> None:
    """An episode that ran one of its two seats: the missing seat's record says so (it does not
    take the other seat's trace) and the played seat's record errors with it."""
    import verifiers.v1 as vf

    from pytest_modal_eval.client.verifiers_v1_interception import Rollout
    from pytest_modal_eval.client.verifiers_v1_outputs import episode_outputs

    data = vf.TaskData(prompt="What is 2 + 2?")
    played = vf.Trace(
        task=vf.TraceTask(type="Task", data=data),
        agent=vf.AgentInfo(config=vf.AgentConfig(), name="first"),
        ok=True,
        is_completed=True,
    )
    episode = vf.Episode(task=vf.TraceTask(type="Task", data=data), traces=[played], ok=True)
    task = vf.Task(data)
    first, second = episode_outputs(7, task, episode, ["first", "second"], Rollout(7, 0, []))
    assert (first["agent"], second["agent"]) == ("first", "second")
    assert second["error"] == {
        "error": "NoTrace",
        "message": "the episode ran no agent in seat 'second'",
    }
    assert second["prompt"] == [{"role": "user", "content": "What is 2 + 2?"}]
    assert second["completion"] == []
    assert first["error"]["error"] == "SeatError"
    assert "seat 'second' of the same episode errored" in first["error"]["message"]


def test_an_episode_that_failed_before_a_seat_played_names_its_error() -> None:
    """A task whose setup failed leaves no trace: the record carries the episode's error,
    not only that the seat did not play."""
    import verifiers.v1 as vf
    from verifiers.v1.trace import Error

    from pytest_modal_eval.client.verifiers_v1_interception import Rollout
    from pytest_modal_eval.client.verifiers_v1_outputs import episode_outputs

    data = vf.TaskData(prompt="What is 2 + 2?")
    failed = Error(type="TaskError", message="task setup: RuntimeError: root setup failed")
    episode = vf.Episode(task=vf.TraceTask(type="Task", data=data), traces=[], errors=[failed])
    (output,) = episode_outputs(0, vf.Task(data), episode, ["agent"], Rollout(0, 0, []))
    assert output["error"] == {
        "error": "TaskError",
        "message": "task setup: RuntimeError: root setup failed",
    }


def test_a_seat_played_several_times_in_an_episode_keeps_every_play() -> None:
    """A seat an episode plays several times (best-of-n's attempts, a proposer's problem
    fanned out to solvers): its record's reward and metrics are the means over its plays, as
    ``vf-eval`` averages every trace, each play is under ``attempts``, and the other seat's
    record sees every one of them."""
    import verifiers.v1 as vf

    from pytest_modal_eval.client.verifiers_v1_interception import Rollout
    from pytest_modal_eval.client.verifiers_v1_outputs import episode_outputs
    from pytest_modal_eval.runs.record import rollout_record

    data = vf.TaskData(prompt="What is 2 + 2?")

    def play(seat: str, reward: float) -> vf.Trace:
        trace = vf.Trace(
            task=vf.TraceTask(type="Task", data=data),
            agent=vf.AgentInfo(config=vf.AgentConfig(), name=seat),
            ok=True,
            is_completed=True,
        )
        trace.record_reward("correct", reward)
        trace.record_metric("turns", 2.0 if reward else 1.0)
        return trace

    solves = [play("solver", 1.0), play("solver", 0.0), play("solver", 0.0)]
    traces = [play("proposer", 0.5), *solves]
    episode = vf.Episode(task=vf.TraceTask(type="Task", data=data), traces=traces, ok=True)
    proposer, solver = episode_outputs(
        3, vf.Task(data), episode, ["proposer", "solver"], Rollout(3, 0, [])
    )
    assert solver["reward"] == pytest.approx(1 / 3)
    assert solver["metrics"] == {"correct": pytest.approx(1 / 3), "turns": pytest.approx(4 / 3)}
    assert [a["reward"] for a in solver["attempts"]] == [1.0, 0.0, 0.0]
    assert set(solver["seats"]) == {"proposer"} and "attempts" not in proposer
    beside = proposer["seats"]["solver"]
    assert beside["reward"] == pytest.approx(1 / 3)
    assert [a["reward"] for a in beside["attempts"]] == [1.0, 0.0, 0.0]
    assert rollout_record(solver, 0, "default")["attempts"] == solver["attempts"]
    assert rollout_record(proposer, 0, "default")["attempts"] == []

    # One seat's every play, named or not, is its own; one errored play errors the record.
    unnamed = [play("", 1.0), play("", 1.0)]
    unnamed[1].record_error(RuntimeError("boom"))
    episode = vf.Episode(task=vf.TraceTask(type="Task", data=data), traces=unnamed, ok=True)
    (only,) = episode_outputs(0, vf.Task(data), episode, ["agent"], Rollout(0, 0, []))
    assert len(only["attempts"]) == 2 and only["error"] is not None


def test_the_seats_of_an_episode_are_errored_together(
    shapes: Path, fake_server: Any, tmp_path: Path
) -> None:
    """A seat whose model call failed errors every seat's record of that episode, so the
    rollout is retried as a whole game; the other episodes are untouched."""
    from pytest_modal_eval.client import verifiers_v1

    # A 400 is not retried: the first request's seat errors.
    fake_server.configure(fail_first=1, fail_status=400)
    env = verifiers_v1.load_environment("conf-game", {}, tmp_path, agent={"harness": "null"})
    finished = run_v1(env, fake_server.base_url)
    failed = [i for i, outputs in finished.items() if any(o["error"] for o in outputs)]
    assert len(failed) == 1
    outputs = finished[failed[0]]
    assert [o["agent"] for o in outputs] == ["first", "second"]
    # The first seat's request was refused; the second seat's record says which seat failed.
    assert outputs[0]["error"]["error"] == "ProviderError"
    assert outputs[1]["error"]["error"] == "SeatError"
    assert "seat 'first' of the same episode errored" in outputs[1]["error"]["message"]
    assert all(o["error"] is None for i, os in finished.items() if i != failed[0] for o in os)

"""Who plays a seat, as ``vf-eval`` decides it: a seat that pins its own model and endpoint is
played there (the benchmark's model plays the others), and a reusable ``Env`` chosen by id
(``agent.env``, ``vf-eval --env.id``) plays the taskset (each shipped ``Env`` is compared with
``vf-eval`` in ``test_verifiers_v1_builtin_envs.py``; the refusals are here).

Each comparison runs the same small taskset through the plugin and through verifiers' own
``vf-eval`` against local test servers and asserts identical per-example rewards and which
server got which requests.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.conftest import FakeServer, read_jsonl, start_fake_server
from tests.support.v1_runs import SUM_TASKS as TASKS
from tests.support.v1_runs import chat_counts, run_v1, vf_eval, vf_eval_args

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")

RIVAL_KEY = "rival-secret-0123456789abcdef"

#: A two-seat duel whose ``rival`` seat pins its own model, endpoint and key variable.
DUEL = """
class DuelConfig(vf.TasksetConfig):
    id: str = "seat-duel"
    follow_up: bool = False


class DuelTaskset(vf.Taskset[SumTask, DuelConfig]):
    def load(self):
        yield from sums(self.config, 6, 90)


class DuelEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    rival: vf.AgentConfig = vf.AgentConfig(
        model="rival-model",
        client=vf.EvalClientConfig(base_url=RIVAL_URL, api_key_var="SEAT_RIVAL_KEY"),
    )


class DuelEnv(vf.Env[DuelEnvConfig]):
    async def run(self, task, agents):
        await agents.player.run(task)
        a = int(task.data.answer)
        rival = SumData(prompt=f"What is {a} + 5?", answer=str(a + 5))
        await agents.rival.run(type(task)(rival, task.config))


__all__ = ["DuelTaskset", "DuelEnv"]
"""

#: A plain taskset, for a reusable Env chosen by id.
PLAIN = """
class PlainConfig(vf.TasksetConfig):
    id: str = "seat-plain"
    follow_up: bool = False


class PlainTaskset(vf.Taskset[SumTask, PlainConfig]):
    def load(self):
        yield from sums(self.config, 6, 20)


__all__ = ["PlainTaskset"]
"""


@pytest.fixture(autouse=True)
def fresh_tasksets() -> Iterator[None]:
    """Each test imports its own taskset modules (their files, and the rival's URL, differ)."""

    def forget() -> None:
        for name in [m for m in sys.modules if m.startswith("seat_")]:
            del sys.modules[name]

    forget()
    yield
    forget()


@pytest.fixture(scope="module")
def rival_server() -> Iterator[FakeServer]:
    """The rival seat's own endpoint: another model, behind a key."""
    server = start_fake_server("--model", "rival-model")
    yield server
    server.stop()


@pytest.fixture
def rival(rival_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    rival_server.reset()
    rival_server.configure(model="rival-model", require_key=RIVAL_KEY, accuracy=0.5, salt="rival")
    monkeypatch.setenv("SEAT_RIVAL_KEY", RIVAL_KEY)
    return rival_server


def write_tasksets(where: Path, rival_url: str) -> Path:
    modules = where / "tasksets"
    modules.mkdir()
    duel = DUEL.replace("RIVAL_URL", repr(rival_url))
    (modules / "seat_duel.py").write_text(textwrap.dedent(TASKS) + textwrap.dedent(duel))
    (modules / "seat_plain.py").write_text(textwrap.dedent(TASKS) + textwrap.dedent(PLAIN))
    return modules


@pytest.fixture
def tasksets(tmp_path: Path, rival_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    modules = write_tasksets(tmp_path, rival_server.base_url)
    monkeypatch.syspath_prepend(str(modules))
    return modules


def test_a_seat_with_its_own_model_is_played_at_its_endpoint_as_vf_eval_plays_it(
    tasksets: Path, fake_server: FakeServer, rival: FakeServer, tmp_path: Path
) -> None:
    import verifiers.v1 as vf

    from pytest_modal_eval.client import verifiers_v1

    fake_server.configure(accuracy=0.5, salt="player")
    episodes = vf_eval(
        tasksets,
        vf_eval_args("seat-duel", fake_server.base_url, ["player", "rival"]),
        tmp_path / "vf-eval",
        {"SEAT_RIVAL_KEY": RIVAL_KEY},
    )
    expected = {}
    for episode in episodes:
        for raw in episode["traces"]:
            trace = vf.Trace.model_validate(raw)
            assert trace.ok, trace.errors
            expected[(episode["task"]["data"]["idx"], trace.agent.name)] = trace.reward
    # vf-eval sent the player's turns to the benchmark's endpoint, the rival's to its own.
    assert chat_counts(fake_server) == {"chat_requests:test-model": 6}
    assert chat_counts(rival) == {"chat_requests:rival-model": 6}

    fake_server.configure(reset_stats=True)
    rival.configure(reset_stats=True)
    env = verifiers_v1.load_environment(
        "seat-duel", {}, tmp_path, agent={"seat": "player", "harness": "null"}
    )
    finished = run_v1(env, fake_server.base_url, max_concurrent_requests=4)
    got = {}
    for example_id, outputs in finished.items():
        # One record per seat: the rival's own, not only beside the player's.
        assert [o["agent"] for o in outputs] == ["player", "rival"]
        for output in outputs:
            assert output["error"] is None, output["error"]
            got[(example_id, output["agent"])] = output["reward"]
    assert got == expected
    assert {0.0, 1.0} <= set(expected.values())
    assert chat_counts(fake_server) == {"chat_requests:test-model": 6}
    assert chat_counts(rival) == {"chat_requests:rival-model": 6}
    assert rival.stats().get("unauthorized", 0) == 0

    seats = env.metadata("test-model")["seats"]
    assert {k: seats["rival"][k] for k in ("model", "model_from", "endpoint")} == {
        "model": "rival-model",
        "model_from": "env",
        "endpoint": rival.base_url,
    }
    assert {k: seats["player"][k] for k in ("model", "model_from", "endpoint")} == {
        "model": "test-model",
        "model_from": "default",
        "endpoint": None,
    }
    assert "SEAT_RIVAL_KEY" in verifiers_v1.secret_variables(env)


def test_a_seat_endpoint_that_cannot_answer_is_refused_before_the_run(
    tasksets: Path, rival: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EndpointError

    env = verifiers_v1.load_environment("seat-duel", {}, tmp_path, agent={"seat": "player"})
    verifiers_v1.check_judge_endpoints(env, timeout=10)  # up, key set: passes

    monkeypatch.setenv("SEAT_RIVAL_KEY", "wrong")
    with pytest.raises(EndpointError) as refused:
        verifiers_v1.check_judge_endpoints(env, timeout=10)
    message = str(refused.value)
    assert "\n" not in message
    source = str(tasksets / "seat_duel.py")
    assert message.startswith(f"seat 'rival' ({source}: DuelEnvConfig.rival.client) at ")
    assert "refused the key (HTTP 401); it is read from $SEAT_RIVAL_KEY" in message
    assert "wrong" not in message

    monkeypatch.setenv("SEAT_RIVAL_KEY", RIVAL_KEY)
    rival.configure(model="another-model")
    with pytest.raises(
        EndpointError,
        match=r"does not serve model 'rival-model'; it serves: another-model\. "
        r"Set DuelEnvConfig\.rival\.model to",
    ):
        verifiers_v1.check_judge_endpoints(env, timeout=10)


def test_seat_clients_the_plugin_cannot_send_to_are_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    modules = tmp_path / "bad"
    modules.mkdir()
    cases = {
        "vf.EvalClientConfig(api_key_var='K')": r"names no base_url, so verifiers would send",
        "vf.EvalClientConfig(base_url='http://u:p@127.0.0.1:9/v1')": r"base_url holds credent",
        "vf.EvalClientConfig(base_url='http://127.0.0.1:9/v1', headers={'X-Api-Key': 'k'})": (
            r"headers sets \['X-Api-Key'\] in .*seat_bad\d\.py; credentials come from the env"
        ),
        "vf.TrainClientConfig(base_url='http://127.0.0.1:9/v1')": r"is a training client",
    }
    monkeypatch.syspath_prepend(str(modules))
    for index, (client, refusal) in enumerate(cases.items()):
        duel = DUEL.replace("seat-duel", f"seat-bad{index}").replace(
            'vf.EvalClientConfig(base_url=RIVAL_URL, api_key_var="SEAT_RIVAL_KEY")', client
        )
        (modules / f"seat_bad{index}.py").write_text(textwrap.dedent(TASKS) + duel)
        with pytest.raises(EnvironmentLoadError) as refused:
            verifiers_v1.load_environment(
                f"seat-bad{index}", {}, tmp_path, agent={"seat": "player"}
            )
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(
            f"environment 'seat-bad{index}': seat 'rival' "
            f"({modules / f'seat_bad{index}.py'}: DuelEnvConfig.rival.client)"
        ), message
        assert "'k'" not in message
        assert re.search(refusal, message), message


def test_a_seat_with_its_own_model_through_pytest(
    project: Any, fake_server: FakeServer, rival: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through pytest: the rival's calls reach its endpoint, metadata.json says who played each
    seat, and its key is in no file of the run; with its key refused the benchmark is refused
    in one line before any example is sent."""
    modules = write_tasksets(project.pytester.path, rival.base_url)
    project.pytester.syspathinsert(modules)
    monkeypatch.setenv("PYTHONPATH", str(modules))
    fake_server.configure(accuracy=0.5, salt="player")
    (project.evals / "duel.yaml").write_text(
        "env_id: seat-duel\n"
        "agent: {seat: player, harness: 'null'}\n"
        "eval: {max_retries: 0}\n"
        "gate: {min_avg_reward: 0.0}\n"
    )
    result = project.run()
    result.assert_outcomes(passed=1)
    assert chat_counts(fake_server) == {"chat_requests:test-model": 6}
    assert chat_counts(rival) == {"chat_requests:rival-model": 6}
    (run_dir,) = project.run_dirs("duel")
    records = read_jsonl(run_dir / "results.jsonl")
    assert [r["agent"] for r in records] == ["player", "rival"] * 6
    assert all(set(r["seats"]) == {"player", "rival"} - {r["agent"]} for r in records)
    played = json.loads((run_dir / "metadata.json").read_text())["played"]
    assert played["seats"]["rival"]["model"] == "rival-model"
    assert played["seats"]["rival"]["endpoint"] == rival.base_url
    assert played["seats"]["player"]["model"] == "test-model"
    for path in project.pytester.path.rglob("*"):
        if path.is_file() and path.suffix != ".py":
            assert RIVAL_KEY.encode() not in path.read_bytes(), path

    # A benchmark with examples still to run (a finished one needs no endpoint at all).
    (project.evals / "duel.yaml").rename(project.evals / "duel_again.yaml")
    fake_server.configure(reset_stats=True)
    monkeypatch.setenv("SEAT_RIVAL_KEY", "wrong")
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*seat 'rival' (*seat_duel.py: DuelEnvConfig.rival.client) at *refused the key*"]
    )
    assert chat_counts(fake_server) == {}  # no example was sent to the benchmark's model


def test_agent_env_refusals_name_the_field_and_the_known_ids(
    tasksets: Path, tmp_path: Path
) -> None:
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    def refusal(env: Any) -> str:
        with pytest.raises(EnvironmentLoadError) as refused:
            verifiers_v1.load_environment("seat-plain", {}, tmp_path, agent={"env": env})
        message = str(refused.value)
        assert "\n" not in message
        return message

    message = refusal("best-of-m")
    assert message.startswith(
        "environment 'seat-plain': agent.env 'best-of-m' is not a verifiers Env (no such "
        "package is installed); set agent.env to one verifiers ships ("
    )
    assert "best-of-n" in message and "user-sim" in message
    (tasksets / "seat_broken_env.py").write_text("import no_such_dependency_xyz\n")
    assert "(importing it failed: No module named 'no_such_dependency_xyz')" in refusal(
        "seat-broken-env"
    )
    assert "agent.env.n: Input should be greater than or equal to 1" in refusal(
        {"id": "best-of-n", "n": 0}
    )
    assert "agent.env.agent sets harness; a seat there takes only model, client, sampling" in (
        refusal({"id": "best-of-n", "agent": {"harness": {"id": "null"}}})
    )
    assert "agent.env sets taskset, which the plugin sets itself" in refusal(
        {"id": "best-of-n", "taskset": {"id": "x"}}
    )
    assert "agent.env names no id" in refusal({"n": 2})
    with pytest.raises(EnvironmentLoadError, match=r"bundled .* remove the benchmark's agent"):
        verifiers_v1.load_environment("file-qa", {}, tmp_path, agent={"env": "best-of-n"})


def test_agent_env_sets_who_plays_a_seat_of_the_env_it_names(
    tasksets: Path, rival: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``agent.env: {id: user-sim, user: {model, client}}`` is ``vf-eval --env.id user-sim
    --env.user.model ... --env.user.client.*``: the modeled user at its own endpoint, checked
    and refused with the YAML's field names."""
    from pytest_modal_eval.client import verifiers_v1
    from pytest_modal_eval.exceptions import EndpointError, EnvironmentLoadError

    user = {
        "model": "rival-model",
        "client": {"base_url": rival.base_url, "api_key_var": "SEAT_RIVAL_KEY"},
    }
    agent = {"env": {"id": "user-sim", "user": user}, "seat": "assistant"}
    env = verifiers_v1.load_environment("seat-plain", {}, tmp_path, agent=agent)
    played = env.metadata("test-model")
    assert (played["env"], played["env_from"]) == ("UserSimEnv", "benchmark")
    assert {k: played["seats"]["user"][k] for k in ("model", "model_from", "endpoint")} == {
        "model": "rival-model",
        "model_from": "benchmark",
        "endpoint": rival.base_url,
    }
    assert played["seats"]["assistant"]["model"] == "test-model"
    verifiers_v1.check_judge_endpoints(env, timeout=10)
    monkeypatch.delenv("SEAT_RIVAL_KEY")
    with pytest.raises(EndpointError) as refused:
        verifiers_v1.check_judge_endpoints(env, timeout=10)
    assert str(refused.value).startswith(
        f"seat 'user' (the benchmark file: agent.env.user.client) at {rival.base_url}: the "
        "endpoint refused the key (HTTP 401); it is read from $SEAT_RIVAL_KEY "
        "(agent.env.user.client.api_key_var), which is not set"
    )

    agent["env"] = {"id": "user-sim", "user": {"client": {"api_key_var": "SEAT_RIVAL_KEY"}}}
    with pytest.raises(EnvironmentLoadError) as refused:
        verifiers_v1.load_environment("seat-plain", {}, tmp_path, agent=agent)
    assert str(refused.value).startswith(
        "environment 'seat-plain': seat 'user' (the benchmark file: agent.env.user.client) "
        "names no base_url, so verifiers would send the seat's calls to its default cloud "
        "endpoint; set agent.env.user.client.base_url"
    )

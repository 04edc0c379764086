"""Every reusable ``Env`` verifiers ships (``verifiers.v1.envs``) that can run here, chosen by id
with ``agent.env``, plays a taskset as ``vf-eval --env.id`` plays it: the same small taskset
through the plugin and through ``vf-eval`` against the same local test server gives the same
reward and metrics per trace of each example, from the same requests per model.

The Envs that need a container runtime are skipped, each with its reason.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.conftest import FakeServer
from tests.support.v1_runs import SUM_TASKS, chat_counts, run_v1, vf_eval, vf_eval_args

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")

#: Four sums, for an ``Env`` chosen by id to play.
TASKSET = """
class BuiltinConfig(vf.TasksetConfig):
    id: str = "builtin-sums"
    follow_up: bool = False


class BuiltinTaskset(vf.Taskset[SumTask, BuiltinConfig]):
    def load(self):
        yield from sums(self.config, 4, 30)


__all__ = ["BuiltinTaskset"]
"""

#: The model that plays user-sim's modeled user: it asks its scenario's question, and ends
#: the conversation once it has an answer.
USER_MODEL = {"ask_system_question": True, "replies": {"The answer is": "###DONE###"}}

#: The class each id names, as the run's metadata.json records it.
CLASSES = {"single-agent": "SingleAgentEnv", "best-of-n": "BestOfNEnv", "user-sim": "UserSimEnv"}

#: The container-bound Envs: verifiers refuses to run them in the ``subprocess`` runtime, and
#: a docker, prime or modal runtime needs images and network this suite does not have.
CONTAINER_ONLY = (
    "needs a container runtime (docker, prime or modal) for the solver, which it refuses to run "
    "in subprocess"
)
JUDGE_HARNESS = (
    ", and a judge harness that executes code in it (the tool-less null harness is refused)"
)


@dataclass(frozen=True)
class Shipped:
    """One Env: its ``agent.env`` values and the ``vf-eval`` flags saying the same, its seats,
    the requests each model gets, and the metrics each example's traces record between them."""

    env_id: str
    config: dict[str, Any]
    flags: list[str]
    seats: list[str]
    requests: dict[str, int]
    metrics: set[str]


def cannot_run(env_id: str, reason: str) -> Any:
    return pytest.param(
        Shipped(env_id, {}, [], [], {}, set()), id=env_id, marks=pytest.mark.skip(reason=reason)
    )


@pytest.fixture
def taskset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    modules = tmp_path / "tasksets"
    modules.mkdir()
    (modules / "builtin_sums.py").write_text(textwrap.dedent(SUM_TASKS) + TASKSET)
    monkeypatch.syspath_prepend(str(modules))
    yield modules
    sys.modules.pop("builtin_sums", None)


def scored(reward: float | None, metrics: dict[str, Any]) -> tuple[Any, ...]:
    return (reward, tuple(sorted(metrics.items())))


@pytest.mark.parametrize(
    "shipped",
    [
        Shipped("single-agent", {}, [], ["agent"], {"test-model": 4}, {"correct"}),
        Shipped(
            "best-of-n",
            {"n": 3},
            ["--env.n", "3"],
            ["agent"],
            {"test-model": 12},
            {"best", "correct", "pass_at_n"},
        ),
        Shipped(
            "user-sim",
            {"user": {"model": "user-model"}},
            ["--env.user.model", "user-model"],
            ["assistant", "user"],
            {"test-model": 4, "user-model": 8},
            {"correct", "user_turns"},
        ),
        cannot_run("agentic-judge", f"agentic-judge {CONTAINER_ONLY}{JUDGE_HARNESS}"),
        cannot_run("shared-agentic-judge", f"shared-agentic-judge {CONTAINER_ONLY}{JUDGE_HARNESS}"),
        cannot_run(
            "isolated-verifier",
            f"isolated-verifier {CONTAINER_ONLY}, and re-scores its artifacts in a fresh container",
        ),
    ],
    ids=lambda shipped: shipped.env_id,
)
def test_a_shipped_env_chosen_by_id_plays_as_vf_eval_plays_it(
    shipped: Shipped, taskset: Path, fake_server: FakeServer, tmp_path: Path
) -> None:
    import verifiers.v1 as vf

    from pytest_modal_eval.client import verifiers_v1

    def configure() -> None:
        fake_server.configure(
            accuracy=0.5, salt="shipped", models={"user-model": USER_MODEL}, reset_stats=True
        )

    requests = {f"chat_requests:{model}": n for model, n in shipped.requests.items()}
    configure()
    args = vf_eval_args("builtin-sums", fake_server.base_url, shipped.seats)
    args += ["--env.id", shipped.env_id, *shipped.flags]
    expected: dict[int, list[tuple[Any, ...]]] = {}
    for episode in vf_eval(taskset, args, tmp_path / "vf-eval"):
        traces = [vf.Trace.model_validate(raw) for raw in episode["traces"]]
        assert all(t.ok for t in traces), [t.errors for t in traces]
        expected[episode["task"]["data"]["idx"]] = sorted(
            scored(
                t.reward,
                {n: r.score for n, r in t.rewards.items() if r is not None}
                | {n: v for n, v in t.metrics.items() if v is not None},
            )
            for t in traces
        )
    assert chat_counts(fake_server) == requests

    configure()
    chosen = {"id": shipped.env_id, **shipped.config}
    agent = {"env": chosen, "harness": "null", "seat": shipped.seats[0]}
    env = verifiers_v1.load_environment("builtin-sums", {}, tmp_path, agent=agent)
    finished = run_v1(env, fake_server.base_url, max_concurrent_requests=4)
    got: dict[int, list[tuple[Any, ...]]] = {}
    for example_id, outputs in finished.items():
        assert [o["agent"] for o in outputs] == shipped.seats
        assert all(o["error"] is None for o in outputs), [o["error"] for o in outputs]
        # Every trace: a seat's own record, or each of its plays (best-of-n's attempts), whose
        # mean is the record's reward.
        plays = [play for o in outputs for play in (o.get("attempts") or [o])]
        for output in outputs:
            if output.get("attempts"):
                rewards = [a["reward"] for a in output["attempts"]]
                assert output["reward"] == pytest.approx(sum(rewards) / len(rewards))
        got[example_id] = sorted(scored(p["reward"], p["metrics"]) for p in plays)
    assert got == expected
    assert chat_counts(fake_server) == requests

    # The examples are not all scored alike (so a wrong pairing shows), and the metrics
    # compared are the ones the Env records.
    assert {reward for scores in expected.values() for reward, _ in scores} >= {0.0, 1.0}
    recorded = {name for scores in expected.values() for _, pairs in scores for name, _ in pairs}
    assert recorded == shipped.metrics
    played = env.metadata("test-model")
    assert (played["env"], played["env_id"], played["env_from"]) == (
        CLASSES[shipped.env_id],
        shipped.env_id,
        "benchmark",
    )

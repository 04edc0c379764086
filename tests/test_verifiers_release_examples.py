"""verifiers' own example environments, played by the plugin as ``vf-eval`` plays them.

verifiers 0.4.0's wheel ships no example environments; its source distribution on PyPI ships
the tasksets of verifiers' own end-to-end tests (``tests/v1/fixtures``). Those that need no
container runtime are run here from that release itself (downloaded with pip, nothing copied
into this repository): each through the plugin and through ``vf-eval`` against the same test
server on 127.0.0.1 gives the same reward and metrics per example and seat, from the same
number of requests. The shapes: a single-turn taskset on verifiers' default harness
(``echo-v1``), an own ``Env`` with two seats that pins its harness and scores the seats
against each other in ``finalize()`` (``duet-v1``), and a scripted user opening a prompt-less
task (``echo-user-sim-v1``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.conftest import FakeServer
from tests.support.v1_runs import chat_counts, run_v1, vf_eval, vf_eval_args

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")

#: The test server's replies: it echoes two of the phrases the examples ask for and not the
#: others ("verifiers", "goodbye world"), so rewards differ between examples.
REPLIES = {"hello world": "hello world", "ping": "ping"}

#: env id -> its seats, the seat the benchmark scores, and the harness verifiers resolves.
EXAMPLES = {
    "echo-v1": (["agent"], None, "bash"),
    "duet-v1": (["a", "b"], "a", "null"),
    "echo-user-sim-v1": (["agent"], None, "bash"),
}


@pytest.fixture(scope="module")
def release_examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example tasksets of the installed verifiers release's source distribution."""
    import verifiers

    into = tmp_path_factory.mktemp("verifiers-sdist")
    uv = shutil.which("uv")
    pip = (
        [uv, "run", "--no-project", "--with", "pip", "python", "-m", "pip"]
        if uv
        else [sys.executable, "-m", "pip"]
    )
    release = f"verifiers=={verifiers.__version__}"
    done = subprocess.run(
        [*pip, "download", release, "--no-deps", "--no-binary", "verifiers", "-d", str(into)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (sdist,) = into.glob("verifiers-*.tar.gz")
    prefix = f"verifiers-{verifiers.__version__}/tests/v1/fixtures/"
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
        archive.extractall(into, members=members, filter="data")
    return into / prefix


@pytest.fixture
def examples(release_examples: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(release_examples))
    yield release_examples
    for name in ("echo_v1", "duet_v1", "echo_user_sim_v1"):
        sys.modules.pop(name, None)


def scored(reward: float | None, metrics: dict[str, Any]) -> tuple[Any, ...]:
    return (reward, tuple(sorted(metrics.items())))


@pytest.mark.parametrize("env_id", sorted(EXAMPLES))
def test_a_release_example_plays_as_vf_eval_plays_it(
    env_id: str, examples: Path, fake_server: FakeServer, tmp_path: Path
) -> None:
    import verifiers.v1 as vf

    from pytest_modal_eval.client import verifiers_v1

    seats, scored_seat, harness = EXAMPLES[env_id]
    fake_server.configure(replies=REPLIES, reset_stats=True)
    args = vf_eval_args(env_id, fake_server.base_url, seats, harness=None)
    expected: dict[tuple[int, str], tuple[Any, ...]] = {}
    for episode in vf_eval(examples, args, tmp_path / "vf-eval"):
        for raw in episode["traces"]:
            trace = vf.Trace.model_validate(raw)
            assert trace.ok, trace.errors
            metrics = {n: r.score for n, r in trace.rewards.items() if r is not None}
            metrics |= {n: v for n, v in trace.metrics.items() if v is not None}
            key = (episode["task"]["data"]["idx"], trace.agent.name or "agent")
            expected[key] = scored(trace.reward, metrics)
    requests = chat_counts(fake_server)

    fake_server.configure(replies=REPLIES, reset_stats=True)
    agent = {"seat": scored_seat} if scored_seat else {}
    env = verifiers_v1.load_environment(env_id, {}, tmp_path, agent=agent)
    finished = run_v1(env, fake_server.base_url, max_concurrent_requests=4)
    got: dict[tuple[int, str], tuple[Any, ...]] = {}
    for example_id, outputs in finished.items():
        assert [o["agent"] for o in outputs] == seats
        for output in outputs:
            assert output["error"] is None, output["error"]
            got[(example_id, output["agent"])] = scored(output["reward"], output["metrics"])
    assert got == expected
    assert chat_counts(fake_server) == requests
    played = env.metadata()["seats"]
    assert {s["harness"] for s in played.values()} == {harness}
    # Rewards differ between examples (or, for the one scripted conversation, between its
    # turns), so a wrong pairing or a lost turn shows.
    rewards = {reward for reward, _ in expected.values()}
    assert len(rewards) > 1 or any(0 < r < 1 for r in rewards)

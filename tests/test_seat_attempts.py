"""A seat an episode plays several times (best-of-n's attempts, a proposer's problem fanned
out to a solver): where a user reads seat figures, its attempts are shown — ``metadata.json``,
``show``'s per-seat and per-record lines, and the report's seat table and rows."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.conftest import BenchmarkProject, read_jsonl
from tests.support.v1_runs import SUM_TASKS

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")

#: A proposer poses each task; a solver answers three variations of it, one play each.
FANOUT = """
class FanoutConfig(vf.TasksetConfig):
    id: str = "attempts-fanout"
    follow_up: bool = False


class FanoutTaskset(vf.Taskset[SumTask, FanoutConfig]):
    def load(self):
        yield from sums(self.config, 5, 40)


class FanoutEnvConfig(vf.EnvConfig):
    proposer: vf.AgentConfig = vf.AgentConfig()
    solver: vf.AgentConfig = vf.AgentConfig()


class FanoutEnv(vf.Env[FanoutEnvConfig]):
    async def run(self, task, agents):
        await agents.proposer.run(task)
        a = int(task.data.answer)
        for k in range(3):
            data = SumData(prompt=f"What is {a} + {k + 1}?", answer=str(a + k + 1))
            await agents.solver.run(type(task)(data, task.config))


__all__ = ["FanoutTaskset", "FanoutEnv"]
"""

PLAYS = 3
EXAMPLES = 5


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def fanout_run(project: BenchmarkProject, fake_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    modules = project.pytester.path / "tasksets"
    modules.mkdir()
    (modules / "attempts_fanout.py").write_text(
        textwrap.dedent(SUM_TASKS) + textwrap.dedent(FANOUT)
    )
    project.pytester.syspathinsert(modules)
    monkeypatch.setenv("PYTHONPATH", str(modules))
    fake_server.configure(accuracy=0.5, salt="attempts")
    (project.evals / "fanout.yaml").write_text(
        "env_id: attempts-fanout\nagent: {seat: solver, harness: 'null'}\n"
        "eval: {max_retries: 0}\ngate: {min_avg_reward: 0.0}\n"
    )
    project.run().assert_outcomes(passed=1)
    (run_dir,) = project.run_dirs("fanout")
    return run_dir


def test_a_seat_s_attempts_are_recorded_and_shown(fanout_run: Any, tmp_path: Any) -> None:
    run_dir = fanout_run
    records = read_jsonl(run_dir / "results.jsonl")
    solver = [r for r in records if r["agent"] == "solver"]
    assert len(solver) == EXAMPLES and all(len(r["attempts"]) == PLAYS for r in solver)
    plays = [[a["reward"] for a in r["attempts"]] for r in solver]
    assert any(len(set(p)) > 1 for p in plays)  # the plays differ: a mean, not a copy
    for record, rewards in zip(solver, plays, strict=True):
        assert record["reward"] == pytest.approx(sum(rewards) / PLAYS)

    metadata = json.loads((run_dir / "metadata.json").read_text())
    seats = metadata["seats"]
    assert seats["solver"]["attempts"] == {"per_rollout": [PLAYS, PLAYS], "plays": 15}
    assert "attempts" not in seats["proposer"]  # played once
    assert metadata["attempts"] == seats["solver"]["attempts"]  # the headline seat's

    shown = _cli("show", str(run_dir), "-n", "10")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    (solver_line,) = [line for line in lines if line.startswith("    solver: ")]
    assert solver_line.endswith("; 3 attempts per rollout (15 plays), reward the mean over them")
    (proposer_line,) = [line for line in lines if line.startswith("    proposer: ")]
    assert "attempts" not in proposer_line
    first = solver[0]
    expected = ", ".join(f"{reward:g}" for reward in plays[0])
    mark = f"reward {first['reward']:g}  attempts {expected}"
    assert f"- #{first['example_id']} r0 [solver]  {mark}" in lines

    # The report: a seat table with each seat's attempts, and each row's plays.
    from pytest_modal_eval.report.page import read_run

    section = read_run(run_dir, "b0")
    assert [(s["name"], s["headline"]) for s in section.seats] == [
        ("proposer", False),
        ("solver", True),
    ]
    assert [row[10] for row in section.rows] == [[p] for p in plays]
    assert section.seats[1]["attempts"] == metadata["seats"]["solver"]["attempts"]
    assert "seats" not in section.extra  # shown in its table, not as raw JSON
    out = tmp_path / "r.html"
    assert _cli("report", str(run_dir), "-o", str(out)).exit_code == 0
    page = out.read_text()
    assert '<tr data-seat="solver" class="headline">' in page
    assert "3 attempts per rollout (15 plays), reward the mean over them</td>" in page

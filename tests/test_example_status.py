"""Each example is shown as solved / partial / missed / errored; a miss fails nothing."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from pytest_modal_eval.runs.example_status import example_status
from tests.conftest import BenchmarkProject, read_jsonl


@pytest.mark.parametrize(
    ("rewards", "error", "status"),
    [
        ([1.0, 1.0], None, "solved"),
        ([1.0, 0.0], None, "partial"),
        ([0.25], None, "partial"),
        ([0.0, 0.0], None, "missed"),
        ([], "ModelError", "errored"),
    ],
)
def test_status_of_an_example(rewards: list[float], error: str | None, status: str) -> None:
    assert example_status(rewards, error) == status


def _statuses(project: BenchmarkProject, name: str) -> dict[str, str]:
    """Example id -> status, from the run's results.jsonl (rewards of every rollout)."""
    [run_dir] = project.run_dirs(name)
    rewards: dict[str, list[float]] = {}
    for record in read_jsonl(run_dir / "results.jsonl"):
        rewards.setdefault(str(record["example_id"]), []).append(float(record["reward"]))
    return {i: example_status(r, None) for i, r in rewards.items()}


def _last_line(result: pytest.RunResult) -> str:
    return result.stdout.lines[-1]


def test_misses_are_shown_as_missed_and_pass_the_item(project: BenchmarkProject) -> None:
    project.add(
        "alpha",
        n=20,
        gate="gate: {min_avg_reward: 0.1}",
        extra_yaml="eval: {rollouts: 2, max_retries: 0}\n",
    )
    project.server.configure(accuracy=0.5, salt_per_rollout=True)
    result = project.run("-v", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    statuses = _statuses(project, "alpha")
    counts = {s: list(statuses.values()).count(s) for s in ("solved", "partial", "missed")}
    assert all(counts.values()), counts  # the data has every kind
    out = result.stdout.str()
    for status, count in counts.items():
        shown = re.findall(rf"{status.upper()} \[example (\d+)\] \(reward=", out)
        assert sorted(shown) == sorted(i for i, s in statuses.items() if s == status)
        assert len(shown) == count
    assert "SUBPASSED" not in out
    assert f"{counts['missed']} subtests missed" in _last_line(result)
    assert f"{counts['solved'] + counts['partial']} subtests passed" in _last_line(result)

    case = ET.parse(project.pytester.path / "junit.xml").getroot().find(".//testcase")
    assert case is not None
    assert case.find("failure") is None and case.find("skipped") is None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["examples_missed"] == str(counts["missed"])
    assert props["examples_solved"] == str(counts["solved"])
    assert props["examples_partial"] == str(counts["partial"])
    assert props["examples_errored"] == "0"
    missed_ids = sorted(i for i, s in statuses.items() if s == "missed")
    assert sorted(str(props["missed_examples"]).split(",")) == missed_ids


def test_quiet_output_counts_misses_in_the_last_line(project: BenchmarkProject) -> None:
    project.add("alpha", n=12, gate="gate: {min_avg_reward: 0.1}")
    project.server.configure(accuracy=0.5)
    result = project.run()
    result.assert_outcomes(passed=1)
    missed = list(_statuses(project, "alpha").values()).count("missed")
    assert missed
    assert f"{missed} subtests missed" in _last_line(result)
    assert "MISSED" not in result.stdout.str()


def test_errored_examples_are_shown_as_errored(project: BenchmarkProject) -> None:
    project.add("alpha", n=30, gate="gate: {min_avg_reward: 0.5, max_error_rate: 0.6}")
    project.server.configure(fail_rate=0.3)
    result = project.run("-v")
    skipped = result.parseoutcomes().get("skipped", 0)
    assert skipped > 0
    result.assert_outcomes(passed=1, skipped=skipped)
    assert len(re.findall(r"ERRORED \[example \d+\]", result.stdout.str())) == skipped


def test_statuses_cross_xdist(project: BenchmarkProject) -> None:
    project.add("alpha", n=12, gate="gate: {min_avg_reward: 0.1}")
    project.server.configure(accuracy=0.5)
    result = project.run("-v", "-n", "2")
    result.assert_outcomes(passed=1)
    missed = list(_statuses(project, "alpha").values()).count("missed")
    assert len(re.findall(r"MISSED \[example \d+\]", result.stdout.str())) == missed
    assert f"{missed} subtests missed" in _last_line(result)


def test_plugins_reading_every_report_in_the_summary_see_passed_examples(
    project: BenchmarkProject,
) -> None:
    """Passed examples' reports are replaced by a shared stand-in; a plugin that reads each
    report's ``__dict__`` in its terminal summary (hypothesis's, installed here) still can."""
    project.add("alpha", n=3)
    result = project.run_subprocess("-p", "hypothesis")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()

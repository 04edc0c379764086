"""The repository's top-level ``conftest.py``: each benchmark's result in the CI job summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, BenchmarkProject


@pytest.fixture
def with_repo_conftest(project: BenchmarkProject) -> BenchmarkProject:
    project.pytester.makeconftest((REPO / "conftest.py").read_text(encoding="utf-8"))
    return project


def test_each_benchmark_appends_its_line_to_the_job_summary(
    with_repo_conftest: BenchmarkProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = with_repo_conftest
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    project.add("passing", n=6, gate="gate: {min_avg_reward: 0.1}")
    project.add("failing", n=6, gate="gate: {min_avg_reward: 0.9}")
    project.server.configure(accuracy=0.5)
    project.run().assert_outcomes(passed=1, failed=1)
    lines = summary.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# earlier step"  # appended, never overwritten
    assert len(lines) == 3
    by_name = {line.split("**")[1]: line for line in lines[1:]}
    assert " PASS; " in by_name["passing"] and "95% CI [" in by_name["passing"]
    assert " FAIL: threshold; " in by_name["failing"]
    assert "outputs/evals/failing--test-model/" in by_name["failing"]


def test_without_github_actions_nothing_is_written(
    with_repo_conftest: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    with_repo_conftest.add("quiet", n=3)
    with_repo_conftest.run().assert_outcomes(passed=1)
    assert not list(with_repo_conftest.pytester.path.glob("*.md"))

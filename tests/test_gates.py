"""Regression gates against stored baselines, end to end through the local endpoint."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import BenchmarkProject, arithmetic_rows
from tests.support.openai_server import FakeModel

N = 200


def correct_ids(accuracy: float, salt: str = "", n: int = N) -> set[int]:
    """Which examples the test server answers right: the same rule the server uses."""
    fake = FakeModel("test-model", {})
    return {
        i
        for i, row in enumerate(arithmetic_rows(n))
        if fake.fraction(salt, row["question"]) < accuracy
    }


def record_baseline(project: BenchmarkProject, accuracy: float, *extra: str) -> None:
    project.server.configure(accuracy=accuracy)
    result = project.run("--snapshot-update", *extra)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*1 snapshot generated*"])


def test_update_writes_a_readable_baseline_that_the_next_run_passes(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.5}")
    record_baseline(project, 0.8)
    stored = json.loads((project.evals / "__baselines__" / "alpha.json").read_text())
    assert stored["n_examples"] == N and stored["binary_single"] is True
    assert set(stored["per_example"]) == {str(i) for i in range(N)}
    assert stored["mean"] == pytest.approx(len(correct_ids(0.8)) / N)
    result = project.run("--eval-fresh", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*diff +0.000*one-sided p = 1.0000 (mcnemar-exact*"])


def test_real_drop_fails_and_lists_exactly_the_flipped_examples(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1}")
    record_baseline(project, 0.9)
    project.server.configure(accuracy=0.6)
    result = project.run("--eval-fresh", "--junitxml=report.xml")
    result.assert_outcomes(failed=1)
    flipped = sorted(correct_ids(0.9) - correct_ids(0.6))
    out = result.stdout.str()
    assert "significant drop from the stored baseline" in out
    assert "mcnemar-exact" in out
    shown = ", ".join(str(i) for i in flipped[:20])
    assert f"solved -> missed ({len(flipped)}): {shown}" in out
    props = {
        p.get("name"): p.get("value", "")
        for p in ET.parse(project.pytester.path / "report.xml").iter("property")
    }
    assert props["solved_to_missed"] == ",".join(str(i) for i in flipped)
    assert float(props["baseline_diff"]) == pytest.approx(-len(flipped) / N)
    assert float(props["baseline_p_value"]) < 0.05
    # The score is above the threshold: the summary row, JUnit and metadata.json say what
    # failed the gate.
    assert (props["verdict"], props["gate_failed"]) == ("fail", "baseline")
    [row] = [line for line in result.stdout.lines if line.startswith("alpha  ")]
    assert ">= 0.1  FAIL: baseline  " in row, row
    [run_dir] = project.run_dirs("alpha")[-1:]
    assert json.loads((run_dir / "metadata.json").read_text())["gate_failed"] == ["baseline"]


def test_sampling_noise_of_realistic_size_passes(project: BenchmarkProject) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.5}")
    record_baseline(project, 0.8)
    # Another "seed": each question's right/wrong is redrawn at the same accuracy.
    project.server.configure(accuracy=0.8, salt="another-seed")
    result = project.run("--eval-fresh", "-v")
    result.assert_outcomes(passed=1)
    flips_down = len(correct_ids(0.8) - correct_ids(0.8, "another-seed"))
    flips_up = len(correct_ids(0.8, "another-seed") - correct_ids(0.8))
    assert flips_down > 10 and flips_up > 10  # real noise, not an identical run
    result.stdout.fnmatch_lines([f"*solved -> missed ({flips_down})*"])


def test_small_drop_within_max_drop_passes(project: BenchmarkProject) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.5, max_drop: 0.2}")
    record_baseline(project, 0.9)
    project.server.configure(accuracy=0.8)
    result = project.run("--eval-fresh", "-v")
    result.assert_outcomes(passed=1)
    # A drop of about 0.1 is tolerated: p is against the 0.2 drop, which it is far from.
    result.stdout.fnmatch_lines(
        [
            "*diff -0.*one-sided p = 1.0000 (mcnemar-exact; alpha 0.05, max_drop 0.2, "
            "p against a drop of 0.2)*"
        ]
    )


def test_changed_configuration_is_reported_not_compared(project: BenchmarkProject) -> None:
    project.add("alpha", n=40, gate="gate: {min_avg_reward: 0.1}")
    record_baseline(project, 1.0)
    project.server.configure(accuracy=0.3)
    result = project.run("--override", "sampling.max_tokens=64")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*note: baseline evals/__baselines__/alpha.json was made under a different "
            "configuration*refresh it with --snapshot-update*"
        ]
    )


def test_baselines_work_under_xdist(project: BenchmarkProject) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1}")
    project.add("beta", n=N, gate="gate: {min_avg_reward: 0.1}")
    project.server.configure(accuracy=0.9)
    first = project.run_subprocess("-n", "2", "--snapshot-update")
    first.assert_outcomes(passed=2)
    project.server.configure(accuracy=0.6)
    result = project.run_subprocess("-n", "2", "--eval-fresh")
    result.assert_outcomes(failed=2)
    assert result.stdout.str().count("significant drop from the stored baseline") == 2


def compared_items(project: BenchmarkProject) -> dict[str, float]:
    """Item name -> its difference from the stored baseline, for the items compared with one."""
    tree = ET.parse(project.pytester.path / "report.xml")
    found = {}
    for case in tree.iter("testcase"):
        props = {p.get("name"): p.get("value", "") for p in case.iter("property")}
        if "baseline_diff" in props:
            found[case.get("name", "")] = float(props["baseline_diff"])
    return found


def two_models(project: BenchmarkProject) -> list[str]:
    """model-b, served beside test-model, misses most questions."""
    project.server.configure(accuracy=1.0, models={"model-b": {"accuracy": 0.3, "salt": "b"}})
    return ["--model", "model-b", "--eval-fresh", "--junitxml=report.xml"]


def test_a_baseline_is_found_however_many_models_the_session_has(
    project: BenchmarkProject,
) -> None:
    """Recorded with one --model, a benchmark's baseline is read by each model's item when the
    session has several (items alpha--test-model, alpha--model-b)."""
    project.add("alpha", n=40, gate="gate: {min_avg_reward: 0.1}")
    record_baseline(project, 1.0)
    result = project.run(*two_models(project))
    result.assert_outcomes(passed=1, failed=1)
    assert "no baseline yet" not in result.stdout.str()
    diffs = compared_items(project)
    assert set(diffs) == {"alpha--test-model", "alpha--model-b"}
    assert diffs["alpha--test-model"] == 0.0 and diffs["alpha--model-b"] < -0.5
    assert result.stdout.str().count("significant drop from the stored baseline") == 1
    assert sorted(p.name for p in (project.evals / "__baselines__").iterdir()) == ["alpha.json"]


def test_snapshot_update_without_the_reference_model_says_no_baseline_was_recorded(
    project: BenchmarkProject,
) -> None:
    """The benchmark's baseline comes from the reference model's item; with that item
    deselected, --snapshot-update writes nothing and says so."""
    project.add("alpha", n=10, gate="gate: {min_avg_reward: 0.1}")
    result = project.run(*two_models(project), "--snapshot-update", "-k", "model-b")
    result.stdout.fnmatch_lines(
        [
            "alpha (model-b): note: no baseline recorded: evals/__baselines__/alpha*.json is "
            "recorded from the reference model test-model only, which this session does not "
            "evaluate (deselected); select its item too*"
        ]
    )
    assert "being recorded" not in result.stdout.str()
    assert not (project.evals / "__baselines__" / "alpha.json").exists()


def test_baselines_named_per_item_are_read_until_the_benchmarks_is_recorded(
    project: BenchmarkProject,
) -> None:
    """Files named after the items of several models (alpha--test-model.json) are still
    read; --snapshot-update records the benchmark's one file from the reference model."""
    project.add("alpha", n=40, gate="gate: {min_avg_reward: 0.1}")
    record_baseline(project, 1.0)
    baselines = project.evals / "__baselines__"
    stored = (baselines / "alpha.json").read_text()
    (baselines / "alpha.json").unlink()
    for item in ("alpha--test-model", "alpha--model-b"):
        (baselines / f"{item}.json").write_text(stored)

    result = project.run(*two_models(project))
    result.assert_outcomes(passed=1, failed=1)
    assert "no baseline yet" not in result.stdout.str()
    assert set(compared_items(project)) == {"alpha--test-model", "alpha--model-b"}

    result = project.run(*two_models(project), "--snapshot-update")
    result.stdout.fnmatch_lines_random(
        [
            "*1 snapshot generated*",
            "alpha (test-model): note: baseline recorded (evals/__baselines__/alpha.json); "
            "evals/__baselines__/alpha--test-model.json is no longer read: git rm it",
            "alpha (model-b): note: baseline evals/__baselines__/alpha*.json is recorded from "
            "the reference model test-model; not compared while it is being recorded",
        ]
    )
    assert json.loads((baselines / "alpha.json").read_text())["model"] == "test-model"

    result = project.run(*two_models(project))
    assert set(compared_items(project)) == {"alpha--test-model", "alpha--model-b"}
    assert "no longer read" not in result.stdout.str()


def test_a_value_that_rounds_to_its_threshold_is_shown_unrounded() -> None:
    """ "mean reward 0.667 < gate.min_avg_reward 0.667" says nothing; the full value does."""
    from pytest_modal_eval.gate.verdict import _unrounded

    assert _unrounded(2 / 3, 0.667) == " (unrounded: 0.6666666666666666)"
    assert _unrounded(0.5, 0.667) == ""


def test_game_payoffs_keep_their_range_and_gate_on_a_negative_threshold(tmp_path) -> None:
    """Rewards outside [0, 1] (a two-player game's payoffs, -2 .. +2): the interval is not
    clipped to [0, 1], and a negative gate.min_avg_reward is a threshold like any other."""
    from pytest_modal_eval.config.schema import GateConfig
    from pytest_modal_eval.gate.verdict import decide
    from pytest_modal_eval.runs.outcome import RunOutcome
    from pytest_modal_eval.stats import summary as stats

    payoffs = [-2.0, -1.0, 1.0, -2.0, 2.0, -1.0, -1.0, 1.0, -2.0, -1.0] * 4
    summary = stats.summarize({str(i): [p] for i, p in enumerate(payoffs)})
    assert summary.mean == pytest.approx(-0.6)
    assert -2.0 <= summary.ci_low < -0.6 < summary.ci_high <= 2.0
    assert summary.ci_low < 0.0  # not clipped to [0, 1]
    outcome = RunOutcome(tmp_path, "r", len(payoffs), 1, summary, {}, 0, {}, 0.0)
    assert decide(outcome, GateConfig(min_avg_reward=-1.0)).passed
    failed = decide(outcome, GateConfig(min_avg_reward=-0.5))
    assert not failed.passed
    assert "mean reward" in failed.reasons[0] and "< gate.min_avg_reward -0.5" in failed.reasons[0]


def test_the_verdict_names_each_part_of_the_gate_that_failed_it(tmp_path) -> None:
    """``failed_by`` (what the summary row, JUnit's ``gate_failed`` and the report show): each
    part once, in the order of its first reason; PASS names none."""
    from pytest_modal_eval.config.schema import GateConfig
    from pytest_modal_eval.gate.verdict import decide, verdict_label
    from pytest_modal_eval.runs.outcome import RunOutcome
    from pytest_modal_eval.stats import summary as stats

    summary = stats.summarize({str(i): [float(i % 2)] for i in range(10)})  # mean 0.5
    outcome = RunOutcome(tmp_path, "r", 12, 1, summary, {10: "boom", 11: "boom"}, 0, {}, 0.0)
    outcome.metric_means = {"format": 0.2}
    gate = GateConfig(min_avg_reward=0.6, min_metrics={"format": 0.5, "length": 0.1})
    verdict = decide(outcome, gate)
    assert verdict.failed_by == ["errors", "threshold", "metrics"]
    assert len(verdict.reasons) == 4  # both metrics fail it: one part, two reasons
    assert verdict.label == "FAIL: errors, threshold, metrics"
    tolerant = GateConfig(min_avg_reward=0.5, max_error_rate=0.2)
    assert decide(outcome, tolerant).label == "PASS"
    assert verdict_label(False) == "FAIL"  # a run recorded without the parts

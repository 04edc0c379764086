"""Several models in one session: items per model, the comparison with the reference model,
the vs_reference gate, pass@k and what a paired test can detect."""

from __future__ import annotations

import itertools
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from pytest_modal_eval.stats import power
from pytest_modal_eval.stats.format import describe_detectable, fmt_interval
from pytest_modal_eval.stats.pass_k import default_ks, pass_at_k, per_example
from pytest_modal_eval.stats.summary import compare_paired
from tests.conftest import BenchmarkProject, arithmetic_rows
from tests.support.openai_server import FakeModel

N = 200
REFERENCE, CHALLENGER = "test-model", "model-b"


def correct_ids(accuracy: float, salt: str = "", n: int = N) -> set[int]:
    """Which examples the test server answers right: the same rule the server uses."""
    fake = FakeModel(REFERENCE, {})
    return {
        i
        for i, row in enumerate(arithmetic_rows(n))
        if fake.fraction(salt, row["question"]) < accuracy
    }


def two_models(project: BenchmarkProject, reference: float, challenger: float) -> list[str]:
    """Serve both models (the challenger redraws which questions it gets right) -> args."""
    project.server.configure(
        accuracy=reference, models={CHALLENGER: {"accuracy": challenger, "salt": "b"}}
    )
    return ["--model", CHALLENGER]


def properties(project: BenchmarkProject, item: str) -> dict[str, str]:
    tree = ET.parse(project.pytester.path / "report.xml")
    case = next(c for c in tree.iter("testcase") if c.get("name") == item)
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_one_item_per_model_with_ids_that_k_selects(project: BenchmarkProject) -> None:
    project.add("alpha", n=4)
    project.add("beta", n=4)
    extra = two_models(project, 1.0, 1.0)
    result = project.run("--collect-only", "-q", *extra)
    result.stdout.fnmatch_lines(
        [
            # Items of one server profile (here: one model) run together, so each model's
            # server can stop once its items are done.
            "evals/alpha.yaml::alpha--test-model",
            "evals/beta.yaml::beta--test-model",
            "evals/alpha.yaml::alpha--model-b",
            "evals/beta.yaml::beta--model-b",
        ]
    )
    selected = project.run("--collect-only", "-q", "-k", "model-b", *extra)
    selected.stdout.fnmatch_lines(["*::alpha--model-b", "*::beta--model-b", "*2/4 tests*"])
    one = project.run("--collect-only", "-q")  # a single model: ids as they always were
    one.stdout.fnmatch_lines(["evals/alpha.yaml::alpha", "evals/beta.yaml::beta"])


def test_comparison_line_and_flips_each_way(project: BenchmarkProject) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1}")
    result = project.run(*two_models(project, 0.9, 0.6), "--junitxml=report.xml")
    result.assert_outcomes(passed=2)  # no vs_reference section: reported, never failed
    ref, new = correct_ids(0.9), correct_ids(0.6, "b")
    down, up = sorted(ref - new), sorted(new - ref)
    assert down and up
    out = result.stdout.str()
    line = next(x for x in out.splitlines() if "model-b vs test-model (reference): reference" in x)
    assert f"over {N} shared examples: diff {(len(new) - len(ref)) / N:+.3f}" in line
    assert "(mcnemar-exact;" in line and "is not detectable at 200 examples (80% power)" in line
    shown = ", ".join(str(i) for i in down[:20])
    assert f"model-b vs test-model (reference): solved -> missed ({len(down)}): {shown}" in out
    assert f"missed -> solved ({len(up)}): " in out
    props = properties(project, "alpha--model-b")
    assert props["model"] == CHALLENGER and props["reference_model"] == REFERENCE
    assert props["reference_solved_to_missed"] == ",".join(str(i) for i in down)
    assert props["reference_missed_to_solved"] == ",".join(str(i) for i in up)
    assert "reference_model" not in properties(project, "alpha--test-model")
    stats = project.server.stats()
    assert stats[f"chat_requests:{REFERENCE}"] == N and stats[f"chat_requests:{CHALLENGER}"] == N


def test_metadata_records_the_comparison_the_summary_prints(project: BenchmarkProject) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1}")
    result = project.run(*two_models(project, 0.9, 0.6), "--junitxml=report.xml")
    result.assert_outcomes(passed=2)
    runs = project.pytester.path / "outputs" / "evals"
    # Run directories only (the benchmark's directory also holds its lock file).
    (reference_run,) = [p for p in (runs / "alpha--test-model").iterdir() if p.is_dir()]
    (challenger_run,) = [p for p in (runs / f"alpha--{CHALLENGER}").iterdir() if p.is_dir()]
    meta = json.loads((challenger_run / "metadata.json").read_text())
    c = meta["vs_reference"]
    assert c["reference_model"] == REFERENCE
    assert c["reference_run_id"] == reference_run.name
    assert c["reference_run_dir"] == f"../../alpha--test-model/{reference_run.name}"
    # The numbers the summary prints and the JUnit properties carry.
    line = next(x for x in result.stdout.lines if "(reference): reference" in x)
    assert (
        f"reference {c['reference_mean']:.3f} -> this model {c['run_mean']:.3f} over "
        f"{c['n_shared']} shared examples: diff {c['diff']:+.3f} (90% CI "
        f"{fmt_interval(c['diff_ci_low'], c['diff_ci_high'], threshold=0.0)}), one-sided p = "
        f"{c['p_value']:.4f} ({c['test']}; alpha 0.05, max_drop 0); a drop under "
        f"{c['detectable_drop']:.3f} is not detectable at {N} examples"
    ) in line
    props = properties(project, f"alpha--{CHALLENGER}")
    for name in ("diff", "diff_ci_low", "diff_ci_high", "p_value", "detectable_drop"):
        assert float(props[f"reference_{name}"]) == pytest.approx(c[name], abs=1e-6), name
    assert props["reference_test"] == c["test"]
    assert props["reference_solved_to_missed"] == ",".join(c["solved_to_missed"])
    assert props["reference_missed_to_solved"] == ",".join(c["missed_to_solved"])
    assert c["solved_to_missed"] and c["missed_to_solved"]
    # The interval beside a one-sided test at alpha 0.05 is two-sided at 1 - 2 alpha.
    assert (c["diff_ci_level"], c["detectable_drop_power"], c["regressed"]) == (0.90, 0.8, True)
    # (regressed: significantly worse; without gate.vs_reference it fails nothing.)
    # The reference's own run records no comparison.
    assert "vs_reference" not in json.loads((reference_run / "metadata.json").read_text())


def test_summary_notes_name_benchmark_and_model_and_are_said_once(
    project: BenchmarkProject,
) -> None:
    gate = "gate: {min_avg_reward: 0.1, vs_reference: {max_drop: 0.0}}"
    project.add("alpha", n=20, gate=gate)
    project.add("beta", n=20, gate=gate)
    result = project.run(*two_models(project, 0.9, 0.9))
    result.assert_outcomes(passed=4)
    lines = result.stdout.lines
    # Four items without a baseline: one line, naming every benchmark and model.
    notes = [line for line in lines if "no baseline yet" in line]
    assert notes == [
        "alpha, beta (test-model, model-b): note: no baseline yet "
        "(evals/__baselines__/<benchmark>.json); record one with --snapshot-update"
    ]
    # A warning of one model's items names that model.
    warnings = [line for line in lines if "WARNING: vs reference test-model" in line]
    assert warnings and all(
        line.startswith(("alpha (model-b): WARNING", "beta (model-b): WARNING",
                         "alpha, beta (model-b): WARNING"))
        for line in warnings
    ), warnings  # fmt: skip
    # Each item's own lines name its benchmark and model.
    subjects = [line.split(": server: ")[0] for line in lines if ": server: start-up" in line]
    assert sorted(subjects) == [
        "alpha (model-b)", "alpha (test-model)", "beta (model-b)", "beta (test-model)",
    ]  # fmt: skip
    # The same command again: four finished runs, each only reported. Each item's line names
    # its run (a note is grouped only where its text is the same).
    again = project.run(*two_models(project, 0.9, 0.9))
    again.assert_outcomes(passed=4)
    reused = sorted(line for line in again.stdout.lines if "nothing to evaluate" in line)
    runs = {
        (row["benchmark"], row["model"]): row["run_id"]
        for row in (json.loads(p.read_text()) for p in project.pytester.path.rglob("metadata.json"))
    }
    assert reused == [
        f"{benchmark} ({model}): note: every selected example was finished in run "
        f"{runs[benchmark, model]}: nothing to evaluate, nothing was asked of the endpoint but "
        "which model it serves"
        for benchmark, model in sorted(runs)
    ]
    assert "<run>" not in again.stdout.str()


def test_summary_notes_of_one_model_name_it_too(project: BenchmarkProject) -> None:
    project.add("alpha", n=4)
    project.add("beta", n=4)
    result = project.run()
    result.assert_outcomes(passed=2)
    lines = result.stdout.lines
    notes = [line for line in lines if "no baseline yet" in line]
    assert notes == [
        "alpha, beta (test-model): note: no baseline yet "
        "(evals/__baselines__/<benchmark>.json); record one with --snapshot-update"
    ]
    subjects = [line.split(": server: ")[0] for line in lines if ": server: start-up" in line]
    assert sorted(subjects) == ["alpha (test-model)", "beta (test-model)"]


def test_undefined_figures_of_one_example_are_n_a_in_junit_xml(project: BenchmarkProject) -> None:
    # One example, two rollouts: no standard error, and the paired t-test of one difference
    # has no interval. The summary shows n/a; JUnit XML says the same, not "nan".
    project.add("alpha", n=1, extra_yaml="eval: {rollouts: 2, max_retries: 0}\n")
    result = project.run(*two_models(project, 1.0, 0.0), "--junitxml=report.xml")
    assert "n/a" in result.stdout.str()
    props = properties(project, "alpha--model-b")
    assert props["stderr"] == "n/a"
    assert props["reference_diff_ci_low"] == props["reference_diff_ci_high"] == "n/a"
    assert props["reference_p_value"] == "n/a"
    assert props["ci_level"] == "0.95"
    assert not [name for name, value in props.items() if value == "nan"]


def test_vs_reference_gate_fails_a_worse_model(project: BenchmarkProject) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1, vs_reference: {alpha: 0.05}}")
    result = project.run(*two_models(project, 0.9, 0.6))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*benchmark alpha (file-qa), model model-b*",
            "alpha--model-b: gate failed",
            "*significantly worse than the reference model test-model (gate.vs_reference)*",
        ]
    )
    assert "FAILED evals/alpha.yaml::alpha--model-b" in result.stdout.str()
    # Its mean is above gate.min_avg_reward: the summary row says what failed it.
    result.stdout.fnmatch_lines(["alpha  *model-b  *>= 0.1  FAIL: vs_reference  *"])


def test_vs_reference_gate_passes_within_max_drop_and_warns_below_detectable(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1, vs_reference: {max_drop: 0.5}}")
    result = project.run(*two_models(project, 0.9, 0.6))
    result.assert_outcomes(passed=2)
    project.add("beta", n=20, gate="gate: {min_avg_reward: 0.1, vs_reference: {max_drop: 0.0}}")
    small = project.run("evals/beta.yaml", "--eval-fresh", *two_models(project, 0.9, 0.9))
    small.assert_outcomes(passed=2)
    small.stdout.fnmatch_lines(
        [
            "*WARNING: vs reference test-model: gate.vs_reference.max_drop 0 is below the smallest "
            "drop this comparison can detect*evaluate more examples*"
        ]
    )


def test_xdist_challenger_waits_for_the_reference(project: BenchmarkProject) -> None:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1, vs_reference: {}}")
    result = project.run_subprocess("-n", "2", *two_models(project, 0.9, 0.6))
    result.assert_outcomes(passed=1, failed=1)
    assert "significantly worse than the reference model test-model" in result.stdout.str()


def test_pass_at_k_in_metadata_junit_and_gate(project: BenchmarkProject) -> None:
    project.add(
        "alpha",
        n=40,
        gate="gate: {min_metrics: {'pass@4': 0.99}}",
        extra_yaml="eval: {rollouts: 4, max_retries: 0}\n",
    )
    project.server.configure(accuracy=0.5, salt_per_rollout=True)
    result = project.run("--junitxml=report.xml")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*metric pass@4 = 0.* < gate.min_metrics.pass@4 0.99*"])
    result.stdout.fnmatch_lines(["alpha  *FAIL: metrics  *"])
    result.stdout.fnmatch_lines(["*pass@k: pass@1 0.* ± 0.*, pass@2 0.*, pass@4 0.*"])
    (run_dir,) = project.run_dirs("alpha")
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert set(meta["pass_at_k"]) == {"pass@1", "pass@2", "pass@4"}
    rewards = np.zeros((40, 4))
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        rewards[record["example_id"], record["rollout"]] = record["reward"]
    expected = {p.name: p.mean for p in pass_at_k(rewards, [1, 2, 4])}
    for name, value in expected.items():
        assert meta["pass_at_k"][name]["mean"] == pytest.approx(value)
        assert float(properties(project, "alpha")[name]) == pytest.approx(value, abs=1e-6)
    assert meta["pass_at_k"]["pass@1"]["mean"] == pytest.approx(meta["avg_reward"])


def test_pass_at_k_larger_than_rollouts_is_a_config_error(project: BenchmarkProject) -> None:
    project.add("alpha", n=4, extra_yaml="eval: {rollouts: 2, pass_k: [1, 4]}\n")
    result = project.run("--collect-only")
    assert "eval: Value error, pass_k [4] needs at least 4 rollouts per example" in (
        result.stdout.str()
    )


@pytest.mark.parametrize("n", range(1, 7))
def test_pass_at_k_matches_brute_force(n: int) -> None:
    rng = np.random.default_rng(n)
    rows = rng.choice([0.0, 0.5, 1.0], size=(25, n))
    for k in range(1, n + 1):
        brute = [
            np.mean(
                [
                    any(row[j] >= 1.0 for j in subset)
                    for subset in itertools.combinations(range(n), k)
                ]
            )
            for row in rows
        ]
        np.testing.assert_allclose(per_example(rows, k), brute, rtol=1e-12)
    (summary,) = pass_at_k(rows, [n])
    assert summary.stderr == pytest.approx(np.std(per_example(rows, n), ddof=1) / 5)


def test_default_ks_are_one_and_powers_of_two() -> None:
    assert default_ks(1) == [1]
    assert default_ks(10) == [1, 2, 4, 8]
    assert default_ks(16) == [1, 2, 4, 8, 16]


def _simulated_mcnemar_power(n: int, noise: float, drop: float, rng: np.random.Generator) -> float:
    counts = rng.multinomial(n, [noise + drop, noise, 1 - 2 * noise - drop], size=20_000)
    down, up = counts[:, 0], counts[:, 1]
    p = np.where(down > 0, special.bdtrc(np.maximum(down - 1, 0), down + up, 0.5), 1.0)
    return float(np.mean(p < 0.05))


@pytest.mark.parametrize(("n", "noise"), [(30, 0.0), (30, 0.1), (200, 0.05)])
def test_detectable_drop_of_mcnemar_matches_a_simulation(n: int, noise: float) -> None:
    rng = np.random.default_rng(7)
    drop = power.detectable_drop_mcnemar(n, noise, 0.05)
    assert 0 < drop < 1
    # 20,000 simulated comparisons: the standard error of a power near 0.8 is 0.003.
    assert _simulated_mcnemar_power(n, noise, drop, rng) == pytest.approx(0.8, abs=0.012)
    assert _simulated_mcnemar_power(n, noise, drop - 0.03, rng) < 0.78


@pytest.mark.parametrize(("n", "sd"), [(30, 0.3), (200, 0.2)])
def test_detectable_drop_of_paired_t_matches_a_simulation(n: int, sd: float) -> None:
    rng = np.random.default_rng(11)
    drop = power.detectable_drop_t(n, sd, 0.05)
    diffs = rng.normal(-drop, sd, size=(20_000, n))
    t = diffs.mean(axis=1) / (diffs.std(axis=1, ddof=1) / math.sqrt(n))
    simulated = float(np.mean(special.stdtr(n - 1, t) < 0.05))
    assert simulated == pytest.approx(0.8, abs=0.012)


def test_detectable_drop_of_a_huge_spread_is_found() -> None:
    # Drops beyond ~8.6e9 have neighbouring floats further apart than 1e-6: the search for the
    # smallest one ends all the same, and the paired t-test's detectable drop scales with sd.
    drop = power.detectable_drop_t(20, 1e11, 0.05)
    assert drop == pytest.approx(power.detectable_drop_t(20, 1.0, 0.05) * 1e11, rel=1e-5)


def test_too_few_examples_detect_nothing() -> None:
    # Exact McNemar at alpha 0.05 needs 5 flips down and none up: 3 examples never get there.
    assert math.isnan(power.detectable_drop_mcnemar(3, 0.0, 0.05))


def test_no_drop_beyond_the_reward_range_is_stated_as_undetectable() -> None:
    # 5 examples whose differences spread by 0.8: the t-test needs a drop over 1 for 80% power,
    # and no drop over 1 exists with rewards in [0, 1].
    assert power.detectable_drop_t(5, 0.8, 0.05) > 1.0
    assert math.isnan(power.detectable_drop_t(5, 0.8, 0.05, width=1.0))
    assert power.detectable_drop_t(30, 0.3, 0.05, width=1.0) == pytest.approx(
        power.detectable_drop_t(30, 0.3, 0.05), abs=1e-5
    )
    assert math.isnan(power.detectable_drop_t(10, 0.0, 0.05))  # no spread: nothing to say
    base = {str(i): x for i, x in enumerate([1.0, 0.0, 1.0, 0.5, 1.0])}
    run = {str(i): x for i, x in enumerate([0.0, 1.0, 1.0, 0.5, 0.0])}
    c = compare_paired(base, run, baseline_binary_single=False, run_binary_single=False)
    assert math.isnan(c.detectable_drop)
    assert "no drop within the reward range is detectable at 5 examples" in describe_detectable(c)
    # Every example flipped (several rollouts): the smallest uniform drop the exact test of a
    # uniform shift calls significant, not "a drop under 0.000".
    flipped = compare_paired(
        {str(i): 1.0 for i in range(10)},
        {str(i): 0.0 for i in range(10)},
        baseline_binary_single=False,
        run_binary_single=False,
    )
    assert flipped.detectable_drop == pytest.approx(0.05 ** (-1 / 10) - 1)
    assert 0.3 < flipped.detectable_drop < 0.4
    # 4 examples that all drop by the whole range give p = 1/16 > 0.05: nothing is detectable.
    four = compare_paired(
        {str(i): 1.0 for i in range(4)},
        {str(i): 0.0 for i in range(4)},
        baseline_binary_single=False,
        run_binary_single=False,
    )
    assert four.p_value == pytest.approx(1 / 16) and math.isnan(four.detectable_drop)


def _stored_runs(project: BenchmarkProject, reference: float, challenger: float) -> list[str]:
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1}")
    result = project.run(*two_models(project, reference, challenger))
    result.assert_outcomes(passed=2)
    base = project.pytester.path / "outputs" / "evals"
    (a,) = [p for p in (base / "alpha--test-model").iterdir() if p.is_dir()]
    (b,) = [p for p in (base / "alpha--model-b").iterdir() if p.is_dir()]
    return [str(a), str(b)]


def _compare(*args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    result = CliRunner().invoke(main, ["compare", *args])
    return result.exit_code, result.output


def test_compare_stored_runs_exit_status_and_json(project: BenchmarkProject) -> None:
    run_a, run_b = _stored_runs(project, 0.9, 0.6)
    ref, new = correct_ids(0.9), correct_ids(0.6, "b")
    status, out = _compare(run_a, run_b)
    assert status == 1, out
    assert f"solved -> missed ({len(ref - new)}): " in out and "FAIL: significant drop" in out
    # The words of --json and of a session's summary: RUN_A is the reference.
    header, figures = out.splitlines()[:2]
    ids = Path(run_b).name, Path(run_a).name
    assert header == f"alpha: {CHALLENGER} (run {ids[0]}) vs {REFERENCE} (reference, run {ids[1]})"
    assert figures.startswith(f"  reference {len(ref) / N:.3f} -> run {len(new) / N:.3f} over ")
    status, out = _compare(run_a, run_b, "--json")
    assert status == 1
    doc = json.loads(out)
    c = doc["comparison"]
    assert c["test"] == "mcnemar-exact" and c["n_shared"] == N
    assert c["solved_to_missed"] == [str(i) for i in sorted(ref - new)]
    assert c["missed_to_solved"] == [str(i) for i in sorted(new - ref)]
    assert c["diff"] == pytest.approx((len(new) - len(ref)) / N)
    assert doc["configuration_differs_in"] == []
    assert 0 < c["detectable_drop"] < 0.2
    # One name per side in every JSON a user scripts against: RUN_A is the reference, RUN_B the
    # run, as in the challenger's metadata.json (vs_reference), figure for figure.
    assert set(doc) == {
        "benchmark", "reference", "run", "seat", "configuration_differs_in", "comparison",
        "warnings",
    }  # fmt: skip
    for side, path, model in (("reference", run_a, REFERENCE), ("run", run_b, CHALLENGER)):
        assert doc[side] == {"path": path, "run_id": Path(path).name, "model": model, "examples": N}
    recorded = json.loads((Path(run_b) / "metadata.json").read_text())["vs_reference"]
    for key in ("reference_model", "reference_run_id", "reference_run_dir"):
        del recorded[key]
    assert c == recorded
    assert not any("baseline" in key for key in c)
    # Tolerating the whole drop, or comparing the other way round: no failure.
    assert _compare(run_a, run_b, "--max-drop", "0.5")[0] == 0
    assert _compare(run_b, run_a)[0] == 0


def test_compare_ends_on_a_run_with_a_huge_reward(project: BenchmarkProject) -> None:
    run_a, run_b = _stored_runs(project, 0.9, 0.9)
    results = Path(run_b) / "results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    records[0]["reward"] = 1e30
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    status, out = _compare(run_a, run_b, "--json")
    assert status == 0, out
    c = json.loads(out)["comparison"]
    assert c["test"] == "paired-t" and not c["regressed"]
    assert c["diff"] == pytest.approx(1e30 / N, rel=1e-6)
    assert c["detectable_drop"] > 1e27  # the spread of the differences is ~7e28


def test_compare_warns_about_max_drop_only_when_given(project: BenchmarkProject) -> None:
    run_a, run_b = _stored_runs(project, 0.9, 0.9)
    status, out = _compare(run_a, run_b)
    assert status == 0, out
    assert "is not detectable at" in out  # what the test can detect is still said
    assert "WARNING" not in out and "--max-drop" not in out
    assert json.loads(_compare(run_a, run_b, "--json")[1])["warnings"] == []
    status, out = _compare(run_a, run_b, "--max-drop", "0")
    assert "WARNING: --max-drop 0 is below the smallest drop this comparison can detect" in out


def test_compare_refuses_runs_of_different_benchmarks(project: BenchmarkProject) -> None:
    run_a, _ = _stored_runs(project, 0.9, 0.9)
    project.add("beta", n=10, gate="gate: {min_avg_reward: 0.1}")
    project.run("evals/beta.yaml").assert_outcomes(passed=1)
    (beta,) = project.run_dirs("beta")
    status, out = _compare(run_a, str(beta))
    assert status == 2 and "compare runs of one benchmark" in out
    status, out = _compare(run_a, str(project.pytester.path))
    assert status == 2 and "a directory, but not a run's (no run_config.json)" in out


def test_adding_a_model_keeps_the_finished_runs_of_the_first(project: BenchmarkProject) -> None:
    """Items are named `bench--model` once several --model are given; the first model's run
    made under the plain name is still found (in its run directory) and not evaluated again."""
    project.add("alpha", n=N)
    project.run().assert_outcomes(passed=1)
    extra = two_models(project, 0.9, 0.6)
    project.server.configure(reset_stats=True)
    project.run(*extra).assert_outcomes(passed=2)
    stats = project.server.stats()
    assert stats.get(f"chat_requests:{REFERENCE}", 0) == 0
    assert stats[f"chat_requests:{CHALLENGER}"] == N


def test_vs_reference_fails_when_no_comparison_was_made(project: BenchmarkProject) -> None:
    """A gate must never go green by not running: a deselected reference fails the gate."""
    project.add("alpha", n=N, gate="gate: {min_avg_reward: 0.1, vs_reference: {alpha: 0.05}}")
    extra = two_models(project, 0.9, 0.9)
    result = project.run(*extra, "-k", "model-b")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*gate.vs_reference: no comparison with the reference model*"])


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_eval_endpoint_runs_a_users_test_once_per_model(
    project: BenchmarkProject, xdist: list[str]
) -> None:
    """With several --model, a test using eval_endpoint runs for each, named like the items."""
    project.add("alpha", n=4)
    project.pytester.makepyfile(
        test_mine="""
        import httpx

        def test_chat(eval_endpoint, request):
            endpoint = eval_endpoint("evals/alpha.yaml")
            assert request.node.name == f"test_chat[{endpoint.model}]"
            httpx.post(
                endpoint.base_url + "/chat/completions",
                json={"model": endpoint.model,
                      "messages": [{"role": "user", "content": "What is 2 + 3?"}]},
                headers=dict(endpoint.headers),
            ).raise_for_status()
            assert eval_endpoint().model == endpoint.model  # the defaults' profile, same model
        """
    )
    extra = two_models(project, 1.0, 1.0)
    project.server.configure(reset_stats=True)
    result = project.run_subprocess("test_mine.py", "-v", *extra, *xdist)
    result.assert_outcomes(passed=2)
    for model in (REFERENCE, CHALLENGER):
        assert any(
            "PASSED" in line and f"test_mine.py::test_chat[{model}]" in line
            for line in result.stdout.lines
        ), model
    stats = project.server.stats()
    assert stats[f"chat_requests:{REFERENCE}"] == stats[f"chat_requests:{CHALLENGER}"] == 1


def test_xdist_challenger_goes_on_when_the_reference_crashes_its_worker(
    project: BenchmarkProject,
) -> None:
    """The controller says for a crashed worker's reference item that it left no results;
    without that, the challenger would wait for them forever."""
    project.add("alpha", n=20, gate="gate: {min_avg_reward: 0.1}")
    project.pytester.makeconftest(
        f"""
        import os

        def pytest_runtest_setup(item):
            if item.name == "alpha--{REFERENCE}":
                os._exit(1)  # the worker dies in the reference item's setup
        """
    )
    result = project.pytester.runpytest_subprocess(
        *project.args("-n", "2", *two_models(project, 0.9, 0.9)), timeout=180
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("failed") == 1, outcomes
    result.stdout.fnmatch_lines(["*crashed its worker*no comparison*"])


#: 100 examples on which the challenger (salt "b23", right 90% of the time) goes solved ->
#: missed on 10 and missed -> solved on 3 against the reference (right 95%): exact one-sided
#: p = 0.046, regressed at alpha 0.05. The 95% two-sided interval holds 0 ([-0.150, +0.001]);
#: the 90% one, whose upper end is the one-sided bound, is [-0.136, -0.001] (rounded outward).
BORDERLINE_N, BORDERLINE_REFERENCE, BORDERLINE_CHALLENGER, BORDERLINE_SALT = 100, 0.95, 0.9, "b23"
BORDERLINE_CI = "90% CI [-0.136, -0.001]"


def _borderline(project: BenchmarkProject, gate: str) -> None:
    n, salt = BORDERLINE_N, BORDERLINE_SALT
    ref = correct_ids(BORDERLINE_REFERENCE, n=n)
    new = correct_ids(BORDERLINE_CHALLENGER, salt, n=n)
    assert (len(ref - new), len(new - ref)) == (10, 3)  # the table the docs cite
    project.add("alpha", n=n, gate=gate)
    project.server.configure(
        accuracy=BORDERLINE_REFERENCE,
        models={CHALLENGER: {"accuracy": BORDERLINE_CHALLENGER, "salt": salt}},
    )


def _report(project: BenchmarkProject) -> str:
    return (project.pytester.path / "outputs" / "evals" / "report.html").read_text()


def test_a_regression_vs_the_reference_comes_with_an_interval_below_zero_everywhere(
    project: BenchmarkProject,
) -> None:
    """10 down / 3 up of 100: "regressed" with the 90% interval, never the 95% one that holds
    0, in the summary, JUnit, metadata.json, the HTML report and `compare`."""
    _borderline(project, "gate: {min_avg_reward: 0.1, vs_reference: {}}")
    result = project.run("--model", CHALLENGER, "--junitxml=report.xml")
    result.assert_outcomes(passed=1, failed=1)
    lines = [x for x in result.stdout.lines if "reference 0.950 -> this model 0.880" in x]
    assert lines and all(BORDERLINE_CI in x for x in lines), lines
    assert "significantly worse than the reference model test-model" in result.stdout.str()
    props = properties(project, f"alpha--{CHALLENGER}")
    assert props["reference_diff_ci_level"] == "0.9"
    assert float(props["reference_diff_ci_high"]) < 0.0
    runs = project.pytester.path / "outputs" / "evals"
    (run_b,) = [p for p in (runs / f"alpha--{CHALLENGER}").iterdir() if p.is_dir()]
    c = json.loads((run_b / "metadata.json").read_text())["vs_reference"]
    assert (c["diff_ci_level"], c["regressed"]) == (0.9, True)
    assert c["diff_ci_high"] < 0.0 and c["p_value"] == pytest.approx(0.0461, abs=1e-4)
    report = _report(project)
    assert "[-0.136, -0.001] (90%)" in report and "(95%)" not in report
    (run_a,) = [p for p in (runs / "alpha--test-model").iterdir() if p.is_dir()]
    status, out = _compare(str(run_a), str(run_b))
    assert status == 1 and BORDERLINE_CI in out and "FAIL: significant drop" in out, out
    doc = json.loads(_compare(str(run_a), str(run_b), "--json")[1])["comparison"]
    assert doc["confidence"] == 0.9 and doc["diff_ci_high"] < 0.0 and doc["regressed"]


def test_a_regression_vs_the_baseline_comes_with_an_interval_below_zero_everywhere(
    project: BenchmarkProject,
) -> None:
    """The same table against a stored baseline: the summary, JUnit, metadata.json's reasons
    and the HTML report."""
    _borderline(project, "gate: {min_avg_reward: 0.1}")
    project.run("--snapshot-update").assert_outcomes(passed=1)
    project.server.configure(accuracy=BORDERLINE_CHALLENGER, salt=BORDERLINE_SALT)
    result = project.run("--eval-fresh", "--junitxml=report.xml")
    result.assert_outcomes(failed=1)
    lines = [x for x in result.stdout.lines if "baseline 0.950 -> run 0.880" in x]
    assert lines and all(BORDERLINE_CI in x for x in lines), lines
    props = properties(project, "alpha")
    assert props["baseline_diff_ci_level"] == "0.9"
    assert float(props["baseline_diff_ci_high"]) < 0.0
    newest = project.run_dirs("alpha")[-1]
    reasons = json.loads((newest / "metadata.json").read_text())["gate_reasons"]
    assert any(BORDERLINE_CI in r for r in reasons), reasons
    report = _report(project)
    assert "[-0.136, -0.001] (90%)" in report and "(95%)" not in report


def test_the_report_gives_each_comparison_its_own_level(project: BenchmarkProject) -> None:
    """Benchmarks gated at different alphas: each row of the comparison with the reference
    shows its own interval's level (1 - 2 alpha), not the first one's."""
    project.add("alpha", n=20, gate="gate: {min_avg_reward: 0.1, vs_reference: {}}")
    project.add("beta", n=20, gate="gate: {min_avg_reward: 0.1, vs_reference: {alpha: 0.01}}")
    project.run(*two_models(project, 0.9, 0.9)).assert_outcomes(passed=4)
    report = _report(project)
    levels = {}
    for name in ("alpha", "beta"):
        group = report.split(f'data-benchmark="{name}"')[1].split("</table>")[0]
        row = group.split('data-role="challenger"')[1].split("</tr>")[0]
        levels[name] = [level for level in ("(90%)", "(98%)", "(95%)") if level in row]
    assert levels == {"alpha": ["(90%)"], "beta": ["(98%)"]}, levels

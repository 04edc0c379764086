"""gate.early_stop end to end: a 1,000-example file-qa benchmark against the test endpoint
(real HTTP on 127.0.0.1) at known accuracy, and the confidence sequence it stops on."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from pytest_modal_eval.runs.paths import RunPaths, read_listing
from tests.conftest import BenchmarkProject
from tests.test_deployments import LocalRuns, local  # noqa: F401 (the fixture)

N = 1000
GATE = "gate: {min_avg_reward: 0.6, early_stop: true}"
#: Few examples in flight when the gate is decided, so that how many were evaluated by then
#: does not depend on the machine's pace (and a 200-example benchmark shows the saving).
FEW_IN_FLIGHT = ("--override", "eval.max_concurrent=8")


def _run(project: BenchmarkProject, accuracy: float, *extra: str) -> pytest.RunResult:
    project.server.configure(accuracy=accuracy)
    return project.run("--junitxml=report.xml", *extra)


def _props(project: BenchmarkProject) -> dict[str, str]:
    return {
        p.get("name", ""): p.get("value", "")
        for p in ET.parse(project.pytester.path / "report.xml").iter("property")
    }


def _metadata(project: BenchmarkProject) -> dict[str, object]:
    (run_dir,) = project.run_dirs("big")
    data: dict[str, object] = json.loads((run_dir / "metadata.json").read_text())
    return data


def _sent_after_the_verdict(project: BenchmarkProject) -> tuple[dict[str, Any], Any, int]:
    """The run's early-stop record (decided), its errors and the requests the server got,
    checked to be exactly those decided on, in flight at the verdict and answered ahead."""
    metadata = _metadata(project)
    early = metadata["early_stop"]
    assert isinstance(early, dict) and early["decided"], early
    requests = project.server.stats()["chat_requests"]
    assert requests == early["decided_after"] + early["in_flight"] + early["answered_ahead"]
    return early, metadata["errors"], requests


def test_far_above_passes_after_a_small_share_and_says_so(project: BenchmarkProject) -> None:
    project.add("big", n=N, gate=GATE)
    result = _run(project, 0.95, *FEW_IN_FLIGHT)
    result.assert_outcomes(passed=1)
    early = _metadata(project)["early_stop"]
    assert isinstance(early, dict) and early["decided"] and early["verdict"] == "pass"
    assert early["decided_after"] < 0.15 * N
    assert early["evaluated"] < 0.3 * N  # with the examples in flight when it was decided
    low, high = early["intervals"]["avg_reward"]
    assert 0.6 <= low < high
    props = _props(project)
    assert props["early_stop_verdict"] == "pass"
    assert (
        props["early_stop"]
        == f"decided after {early['decided_after']:,} of 1,000 examples (early stop)"
    )
    result.stdout.fnmatch_lines(
        ["*note: decided after * of 1,000 examples (early stop): PASS decided by*random subset*"]
    )
    (run_dir,) = project.run_dirs("big")
    listing = read_listing(RunPaths(run_dir))
    assert listing.state_text == f"stopped early {early['evaluated']:,} of 1,000"
    report = (project.pytester.path / "outputs" / "evals" / "report.html").read_text()
    assert early["summary"] in report


@pytest.mark.parametrize("concurrency", [(), FEW_IN_FLIGHT])
def test_nothing_is_sent_after_the_verdict(
    project: BenchmarkProject, concurrency: tuple[str, ...]
) -> None:
    """A clear PASS on 1,000 questions: the server receives exactly the examples the verdict
    was decided on plus those in flight then (sent and not yet recorded, or recorded and
    waiting for their turn), each of which holds one of the max_concurrent * (1 + prefetch)
    workers; examples a worker had set up without sending (eval.prefetch) are dropped, and
    every request sent is recorded."""
    project.add("big", n=N, gate=GATE)
    _run(project, 0.95, *concurrency).assert_outcomes(passed=1)
    early, errors, requests = _sent_after_the_verdict(project)
    assert early["in_flight"] < (8 if concurrency else 64) * 2  # eval.prefetch 1
    assert requests == early["evaluated"] + errors


def test_far_below_fails_as_early_with_the_deciding_interval(project: BenchmarkProject) -> None:
    project.add("big", n=N, gate="gate: {min_avg_reward: 0.6}")
    result = _run(project, 0.25, "--early-stop")  # the switch, for a YAML without early_stop
    result.assert_outcomes(failed=1)
    early = _metadata(project)["early_stop"]
    assert isinstance(early, dict) and early["verdict"] == "fail"
    assert early["decided_after"] < 0.15 * N
    low, high = early["intervals"]["avg_reward"]
    assert low < high < 0.6
    result.stdout.fnmatch_lines(
        [
            "*mean reward is below gate.min_avg_reward 0.6: its 90.0% confidence sequence*"
            "lies entirely below it, decided after*(early stop)*"
        ]
    )
    # The sequence decided against the threshold: the verdict names it.
    assert _props(project)["gate_failed"] == "threshold"
    result.stdout.fnmatch_lines(["big  *>= 0.6  FAIL: threshold  *"])


def test_near_the_threshold_runs_to_the_end(project: BenchmarkProject) -> None:
    # The full-run mean is 0.602. The send order depends on the endpoint's URL (its port), so
    # it differs between sessions; at alpha 0.05 about 6% of orders decide before 90% of the
    # examples (a simulation over 300 orders; 3.7% wrongly). At alpha 0.001 none of 300 did.
    project.add("big", n=N, gate="gate: {min_avg_reward: 0.6, early_stop: true, alpha: 0.001}")
    result = _run(project, 0.6)
    early = _metadata(project)["early_stop"]
    assert isinstance(early, dict) and early["decided"] is False, early
    assert _metadata(project)["n_evaluated"] == N
    assert project.server.stats()["chat_requests"] == N
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)


def test_a_run_without_early_stop_sends_only_the_rest(project: BenchmarkProject) -> None:
    project.add("big", n=N, gate=GATE)
    _run(project, 0.95).assert_outcomes(passed=1)
    first = project.server.stats()["chat_requests"]
    (run_dir,) = project.run_dirs("big")
    project.server.reset()
    result = _run(project, 0.95, "--no-early-stop")
    result.assert_outcomes(passed=1)
    assert project.run_dirs("big") == [run_dir]  # the same run goes on
    assert project.server.stats()["chat_requests"] == N - first
    metadata = _metadata(project)
    assert metadata["n_evaluated"] == N and metadata["early_stop"] is None


def _newest_metadata(project: BenchmarkProject, name: str = "big") -> dict[str, Any]:
    run_dir = project.run_dirs(name)[-1]  # run ids begin with their start time
    data: dict[str, Any] = json.loads((run_dir / "metadata.json").read_text())
    return data


def _with_baseline(project: BenchmarkProject, n: int, baseline: float) -> None:
    """A benchmark whose stored baseline was recorded at accuracy ``baseline``."""
    project.add("big", n=n, gate="gate: {min_avg_reward: 0.1, early_stop: true}")
    project.server.configure(accuracy=baseline)
    project.run("--snapshot-update").assert_outcomes(passed=1)
    project.server.reset()


def test_far_below_its_baseline_fails_early_on_the_paired_difference(
    project: BenchmarkProject,
) -> None:
    _with_baseline(project, 200, 0.95)
    # Far above min_avg_reward: only the comparison can fail it.
    result = _run(project, 0.5, "--eval-fresh", *FEW_IN_FLIGHT)
    result.assert_outcomes(failed=1)
    early = _newest_metadata(project)["early_stop"]
    assert early["decided"] and early["verdict"] == "fail", early
    assert early["deciding"] == "vs_baseline"
    assert project.server.stats()["chat_requests"] < 0.5 * 200
    compared = early["comparisons"]["vs_baseline"]
    assert compared["regressed"] is True
    low, high = compared["diff_interval"]
    assert low < high < 0.0
    result.stdout.fnmatch_lines(
        [
            "*significant drop from the stored baseline evals/__baselines__/big.json: the "
            "*confidence sequence of the mean difference * lies entirely below "
            "-gate.max_drop 0, decided after * of 200 examples (early stop)*"
        ]
    )


def test_far_above_its_baseline_passes_early(project: BenchmarkProject) -> None:
    _with_baseline(project, 200, 0.3)
    result = _run(project, 0.95, "--eval-fresh", *FEW_IN_FLIGHT)
    result.assert_outcomes(passed=1)
    early = _newest_metadata(project)["early_stop"]
    assert early["decided"] and early["verdict"] == "pass", early
    assert early["comparisons"]["vs_baseline"]["regressed"] is False
    assert early["comparisons"]["vs_baseline"]["diff_interval"][0] >= 0.0
    assert project.server.stats()["chat_requests"] < 0.5 * 200
    result.stdout.fnmatch_lines(
        ["*difference from the stored baseline * in [[]+*: no regression*random subset*"]
    )


def test_equal_to_its_baseline_runs_to_the_end(project: BenchmarkProject) -> None:
    # The same answers as the baseline's: the difference is 0 on every example, and a drop
    # of more than gate.max_drop 0 is ruled out only by the last one.
    _with_baseline(project, 200, 0.95)
    result = _run(project, 0.95, "--eval-fresh")
    result.assert_outcomes(passed=1)
    assert project.server.stats()["chat_requests"] == 200
    assert _newest_metadata(project)["n_evaluated"] == 200


def _two_models(project: BenchmarkProject, challenger: float) -> None:
    """A 400-example benchmark gated against the reference model (answering right 90% of the
    time), and model-b answering right ``challenger`` of the time (other questions)."""
    gate = "gate: {min_avg_reward: 0.1, early_stop: true, vs_reference: {max_drop: 0.0}}"
    project.add("big", n=400, gate=gate)
    models = {"model-b": {"accuracy": challenger, "salt": "b"}}
    project.server.configure(accuracy=0.9, models=models)


def test_the_reference_comparison_stops_early_once_the_reference_finished(
    project: BenchmarkProject,
) -> None:
    _two_models(project, 0.3)
    result = project.run("--model", "model-b", "--junitxml=report.xml", *FEW_IN_FLIGHT)
    result.assert_outcomes(passed=1, failed=1)
    reference = _newest_metadata(project)
    # The reference runs to the end: the other models are compared with all of it.
    assert reference["n_evaluated"] == 400
    assert "the session's other models are compared with this one" in str(reference["early_stop"])
    early = _challenger(project)["early_stop"]
    assert early["decided"] and early["deciding"] == "vs_reference", early
    # Decided before the end; with few examples in flight, few more were evaluated (with the
    # default hundreds in flight, the examples sent meanwhile depend on the machine's pace).
    assert early["decided_after"] < 0.5 * 400
    assert early["evaluated"] < 0.6 * 400
    assert early["comparisons"]["vs_reference"]["regressed"] is True
    result.stdout.fnmatch_lines(["*significant drop from the reference model test-model*"])


def _challenger(project: BenchmarkProject) -> dict[str, Any]:
    runs = project.pytester.path / "outputs" / "evals" / "big--model-b"
    (metadata,) = runs.glob("*/metadata.json")
    data: dict[str, Any] = json.loads(metadata.read_text())
    return data


def test_a_deselected_reference_leaves_the_thresholds_to_decide(
    project: BenchmarkProject,
) -> None:
    _two_models(project, 0.9)
    # The challenger alone: no comparison can be made (the gate fails for want of it), so
    # none is waited for and the minimum decides.
    alone = project.run("--model", "model-b", "-k", "model-b", *FEW_IN_FLIGHT)
    alone.assert_outcomes(failed=1)
    early = _challenger(project)["early_stop"]
    assert early["decided"] and early["comparisons"] == {}, early
    # Decided before the end; with few examples in flight, few more were evaluated (with the
    # default hundreds in flight, the examples sent meanwhile depend on the machine's pace).
    assert early["decided_after"] < 0.5 * 400
    assert early["evaluated"] < 0.6 * 400


def test_a_run_stopped_early_is_decided_again_without_the_endpoint(
    project: BenchmarkProject,
) -> None:
    project.add("big", n=N, gate=GATE)
    _run(project, 0.95).assert_outcomes(passed=1)
    first = _metadata(project)["early_stop"]
    project.server.reset()
    again = _run(project, 0.95)
    again.assert_outcomes(passed=1)
    stats = project.server.stats()
    # Only which model the endpoint serves is asked (the run's key names it), as for a run
    # with every example finished; no example is sent.
    assert stats.get("chat_requests", 0) == 0 and stats.get("models_requests", 0) == 1, stats
    again.stdout.fnmatch_lines(
        ["*stopped early with the gate decided (gate.early_stop): nothing to send*"]
    )
    early = _metadata(project)["early_stop"]
    assert isinstance(early, dict) and isinstance(first, dict)
    assert early["decided_after"] == first["decided_after"] and early["verdict"] == "pass"


def test_a_run_stopped_early_with_errored_examples_sends_nothing_again(
    project: BenchmarkProject,
) -> None:
    """Examples that errored before the verdict are replayed from the checkpoint as errors,
    as the run took them: the sequences reach the same decision and nothing is sent (were they
    skipped, every example after the first of them would wait for it to be evaluated again)."""
    gate = "gate: {min_avg_reward: 0.6, early_stop: true, max_error_rate: 0.6}"
    project.add("big", n=N, gate=gate)
    project.server.configure(fail_rate=0.3)
    no_retries = ("--override", "eval.max_retries=0")
    _run(project, 0.95, *FEW_IN_FLIGHT, *no_retries).assert_outcomes(passed=1)
    first = _metadata(project)
    early = first["early_stop"]
    assert isinstance(early, dict) and early["decided"] and first["errors"], first
    project.server.reset()
    again = _run(project, 0.95, *FEW_IN_FLIGHT, *no_retries)
    again.assert_outcomes(passed=1)
    stats = project.server.stats()
    assert stats.get("chat_requests", 0) == 0 and stats.get("models_requests", 0) == 1, stats
    again.stdout.fnmatch_lines(
        ["*stopped early with the gate decided (gate.early_stop): nothing to send*"]
    )
    redone = _metadata(project)["early_stop"]
    assert isinstance(redone, dict) and redone["decided_after"] == early["decided_after"]


def test_a_run_stopped_early_starts_no_local_server_again(local: LocalRuns) -> None:  # noqa: F811
    local.project.add("big", n=100, gate=GATE)
    # The fake vLLM answers every example right.
    local.run(*FEW_IN_FLIGHT).assert_outcomes(passed=1)
    assert len(local.started()) == 1
    again = local.run(*FEW_IN_FLIGHT)
    again.assert_outcomes(passed=1)
    assert len(local.started()) == 1
    again.stdout.fnmatch_lines(["*stopped early with the gate decided*no server was started*"])


def test_a_run_stopped_early_with_errored_examples_starts_no_local_server_again(
    local: LocalRuns,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The examples that errored are replayed from the checkpoint as errors before anything
    is served: the gate is decided again without a server."""
    local.project.add("big", n=100, gate="gate: {min_avg_reward: 0.6, early_stop: true, "
                      "max_error_rate: 0.6}")  # fmt: skip
    monkeypatch.setenv("FAKE_VLLM_SETTINGS", json.dumps({"fail_rate": 0.3}))
    no_retries = ("--override", "eval.max_retries=0")
    local.run(*FEW_IN_FLIGHT, *no_retries).assert_outcomes(passed=1)
    outputs = local.project.pytester.path / "outputs" / "evals"
    (metadata,) = outputs.glob("big--local--*/*/metadata.json")
    first = json.loads(metadata.read_text())
    assert first["early_stop"]["decided"] and first["errors"], first
    assert len(local.started()) == 1
    again = local.run(*FEW_IN_FLIGHT, *no_retries)
    again.assert_outcomes(passed=1)
    assert len(local.started()) == 1
    again.stdout.fnmatch_lines(["*stopped early with the gate decided*no server was started*"])


def test_under_xdist_the_reference_comparison_is_taken_up_once_the_reference_finishes(
    project: BenchmarkProject,
) -> None:
    """The reference on one worker, the challenger on the other: when the challenger starts,
    the reference has not finished (a FIFO makes the reference wait for the challenger's
    setup) and its comparison is open. The challenger's requests are held until the
    reference's item is over; its sequences then take up the reference's results and the
    comparison decides the run early.

    The items must not share a worker: there the FIFO would wait for a setup that cannot
    start. Under ``--dist loadgroup`` each item is a work unit of its own (its own
    ``xdist_group``), and xdist hands each worker a unit before any worker gets a second, so
    the two items run on the two workers whatever order xdist keeps its units in."""
    _two_models(project, 0.3)
    fifo = project.pytester.path / "challenger-started"
    os.mkfifo(fifo)
    release = {"models": {"model-b": {"accuracy": 0.3, "salt": "b"}}}
    project.server.configure(models={"model-b": {**release["models"]["model-b"], "hold": True}})
    project.pytester.makeconftest(
        f"""
        import json
        import urllib.request

        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(items):
            for item in items:  # before xdist's own implementation reads the groups
                item.add_marker(pytest.mark.xdist_group(item.name))

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_setup(item):
            if item.name == "big--test-model":
                with open({str(fifo)!r}, "rb"):  # until the challenger's setup is done
                    pass
            try:
                return (yield)
            finally:
                if item.name == "big--model-b":
                    with open({str(fifo)!r}, "wb"):
                        pass

        def pytest_runtest_teardown(item):
            if item.name == "big--test-model":  # its results are posted: let model-b answer
                request = urllib.request.Request(
                    {project.server.url + "/admin/config"!r},
                    data=json.dumps({json.dumps(release)}).encode(),
                    headers={{"Content-Type": "application/json"}},
                )
                urllib.request.urlopen(request, timeout=10).close()
        """
    )
    result = project.pytester.runpytest_subprocess(
        *project.args("-n", "2", "--dist", "loadgroup", "--model", "model-b", *FEW_IN_FLIGHT),
        timeout=300,
    )
    result.assert_outcomes(passed=1, failed=1)
    assert _newest_metadata(project)["n_evaluated"] == 400  # the reference: all of it
    early = _challenger(project)["early_stop"]
    assert early["decided"] and early["deciding"] == "vs_reference", early
    assert early["comparisons"]["vs_reference"]["regressed"] is True
    assert project.server.stats()["chat_requests:model-b"] < 0.5 * 400


#: file-qa whose rubric pays 100 for a right answer (a score out of 100, not in [0, 1]); with
#: ``first_wrong`` the first example sent scores 0 and every other one 100, whatever it answers.
SCALED_QA = """
import verifiers as vf

from pytest_modal_eval.envs import file_qa

first: list[str] = []


class FirstSent(vf.SingleTurnEnv):
    async def run_group(self, rows, *args, **kwargs):
        if not first:
            first.append(rows[0]["answer"])
        return await super().run_group(rows, *args, **kwargs)


def load_environment(path, base_dir, first_wrong=False):
    env = file_qa.load_environment(path, base_dir=base_dir)
    if not first_wrong:

        def out_of_100(completion, answer, **_):
            text = completion if isinstance(completion, str) else completion[-1]["content"]
            return 100.0 if file_qa.answers_match(file_qa.final_answer(text), answer) else 0.0

        return vf.SingleTurnEnv(eval_dataset=env.eval_dataset, rubric=vf.Rubric([out_of_100]))
    first.clear()

    def first_sent_scores_zero(answer, **_):
        return 0.0 if answer == first[0] else 100.0

    rubric = vf.Rubric(funcs=[first_sent_scores_zero], weights=[1.0])
    return FirstSent(eval_dataset=env.eval_dataset, rubric=rubric)
"""


def _scaled(project: BenchmarkProject, n: int, gate: str, first_wrong: bool = False) -> None:
    """Benchmark ``big`` on :data:`SCALED_QA`, rewards 0 or 100."""
    project.add("big", n=n)  # its data
    modules = project.pytester.mkdir("envs")
    (modules / "scaled_qa.py").write_text(SCALED_QA)
    project.pytester.syspathinsert(modules)
    args = f"{{path: data/big.jsonl, base_dir: '{project.evals}', first_wrong: {first_wrong}}}"
    (project.evals / "big.yaml").write_text(
        f"env_id: scaled-qa\nenv_args: {args}\neval: {{max_retries: 0}}\n{gate}\n"
    )


def test_a_minimum_outside_the_assumed_range_is_a_config_error(
    project: BenchmarkProject,
) -> None:
    # Rewards 0 or 100, mean ~50: with rewards assumed in [0, 1], a minimum of 10 could only
    # ever be decided wrongly, so the file is refused before anything is sent.
    _scaled(project, 50, "gate: {min_avg_reward: 10, early_stop: true}")
    result = _run(project, 0.5)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*evals/big.yaml: invalid benchmark configuration*",
            "*gate.min_avg_reward 10 is outside [[]0, 1[]], the rewards' range gate.early_stop "
            "assumes (the default): declare the range*"
            "gate.reward_range: [[]lowest, highest[]]*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert project.server.stats().get("chat_requests", 0) == 0


def test_a_declared_reward_range_decides_on_the_rewards_scale(project: BenchmarkProject) -> None:
    _scaled(project, N, "gate: {min_avg_reward: 10, early_stop: true, reward_range: [0, 100]}")
    result = _run(project, 0.5, *FEW_IN_FLIGHT)
    result.assert_outcomes(passed=1)
    early = _metadata(project)["early_stop"]
    assert isinstance(early, dict) and early["decided"] and early["verdict"] == "pass", early
    assert early["decided_after"] < 0.15 * N
    low, high = early["intervals"]["avg_reward"]
    assert 10 <= low < 50 < high <= 100  # on the rewards' scale, not [0, 1]
    # The reported interval lies within the declared range too: every reward at one end of
    # it, pass/fail, Wilson's interval.
    metadata = _metadata(project)
    assert metadata["ci_method"] == "wilson", metadata
    assert 0 <= metadata["ci"][0] < metadata["avg_reward"] < metadata["ci"][1] <= 100


def test_a_reward_outside_the_range_takes_back_a_decision_and_the_run_goes_on(
    project: BenchmarkProject,
) -> None:
    # The first example sent scores 0: a minimum of 1 is then ruled out, FAIL. Every other one
    # scores 100, outside the assumed [0, 1]: the decision is taken back and every example is
    # evaluated (mean 99.5 of 200: PASS).
    _scaled(project, 200, "gate: {min_avg_reward: 1, early_stop: true}", first_wrong=True)
    result = _run(project, 1.0, *FEW_IN_FLIGHT)
    result.assert_outcomes(passed=1)
    metadata = _metadata(project)
    assert metadata["n_evaluated"] == 200
    early = metadata["early_stop"]
    assert isinstance(early, dict) and early["decided"] is False, early
    assert "outside [0, 1], the range early stop assumes (gate.reward_range)" in early["reason"]
    result.stdout.fnmatch_lines(["*early stop: avg_reward of example * is 100, outside*"])


def test_the_error_rate_is_over_the_examples_sent(project: BenchmarkProject) -> None:
    project.add(
        "big", n=N, gate="gate: {min_avg_reward: 0.5, max_error_rate: 0.05, early_stop: true}"
    )
    project.server.configure(fail_rate=0.25)
    result = _run(project, 1.0, *FEW_IN_FLIGHT)
    result.assert_outcomes(failed=1)
    metadata = _metadata(project)
    early = metadata["early_stop"]
    assert isinstance(early, dict) and early["decided"], early
    errors = metadata["errors"]
    assert isinstance(errors, int)
    sent = early["evaluated"] + errors
    # Far more than 5% of the examples sent, though fewer than 5% of the 1,000 selected.
    assert 0.05 * sent < errors < 0.05 * N and sent < 0.5 * N
    result.stdout.fnmatch_lines(
        [
            f"*{errors} of {sent} examples sent could not be evaluated (error rate *% > "
            "gate.max_error_rate 5.0%)*"
        ]
    )


def test_a_value_outside_the_range_takes_back_a_decision_already_made() -> None:
    from pytest_modal_eval.runs.early_stop import EarlyStop

    early = EarlyStop(list(range(10)), list(range(10)), {"avg_reward": 1.0}, 0.05)
    early.finished(0, {"avg_reward": 0.0})
    assert early.decided  # the full mean can no longer reach 1
    early.finished(1, {"avg_reward": 100.0})  # in flight when it was decided
    assert not early.decided and early.undone is not None and early.off is not None
    assert "taken back" in early.off and "outside [0, 1]" in early.off


def test_examples_answered_ahead_of_the_decision_count_as_ahead() -> None:
    """Examples answered out of turn wait for those before them; when the one that completes
    the turn decides the gate, those still waiting were answered ahead of the decision (what
    the run counts as sent beyond the decided ones), though they are then taken to check
    their values."""
    from pytest_modal_eval.runs.early_stop import EarlyStop

    early = EarlyStop(list(range(10)), list(range(10)), {"avg_reward": 1.0}, 0.05)
    for later in (1, 2, 3):  # answered before example 0, whose turn comes first
        early.finished(later, {"avg_reward": 0.0})
    assert not early.decided and early.ahead == 3
    early.finished(0, {"avg_reward": 0.0})  # decides at its own turn: the mean cannot reach 1
    assert early.decided and early.decision is not None and early.decision.after == 1
    assert early.ahead == 3


#: file-qa's questions through the installed verifiers 0.3 (its classic API), not through the
#: plugin's own file-qa runner: what any installed environment goes through.
FRAMEWORK_QA = """
from pytest_modal_eval.envs.file_qa import load_environment as file_qa


def load_environment(path):
    return file_qa(path)
"""


def test_nothing_is_sent_after_the_verdict_through_verifiers(project: BenchmarkProject) -> None:
    """The same as :func:`test_nothing_is_sent_after_the_verdict` for an environment that
    verifiers plays (the classic API's client and workers)."""
    from pytest_modal_eval.client.installed_envs import installed_api

    if installed_api() != "classic":
        pytest.skip("the classic API's path; verifiers 0.4 has none")
    project.add("big", n=N, gate=GATE)
    project.play_with("big", "framework-qa", "framework_qa", FRAMEWORK_QA)
    _run(project, 0.95, *FEW_IN_FLIGHT).assert_outcomes(passed=1)
    early, errors, requests = _sent_after_the_verdict(project)
    assert requests == early["evaluated"] + errors < N

"""Everything that can be checked without a request, checked at collection: before any server
starts, in ``pytest --collect-only`` (which also loads each environment and, with ``-v``,
prints each benchmark's plan) and in ``pytest-modal-eval benchmarks``.

The endpoint is ``tests/support/openai_server.py`` (its counter of every request, to any path,
shows nothing was asked of it) and ``--backend local`` runs the fake vLLM of
``tests/support/fake_vllm`` (its start log shows no server was started).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pytest_modal_eval.cli import main
from tests.conftest import BenchmarkProject
from tests.test_deployments import MODEL, XDIST, LocalRuns, local  # noqa: F401 (the fixture)


def _broken_benchmarks(project: BenchmarkProject) -> None:
    """One good benchmark and one of each kind of problem collection finds."""
    project.add("good", n=12)
    project.add("nodata", n=3)
    (project.evals / "data" / "nodata.jsonl").unlink()
    (project.evals / "uninstalled.yaml").write_text("env_id: gsm8k-not-installed\n")
    (project.evals / "typo.yaml").write_text("env_id: file-qa\ngate: {min_avg_rewrd: 0.5}\n")


def _requests(project: BenchmarkProject) -> int:
    """Requests the endpoint received, to any path (its model list, a chat, a health check)."""
    return int(project.server.stats().get("requests", 0))


def test_collect_only_names_each_broken_benchmark_and_asks_nothing(
    project: BenchmarkProject,
) -> None:
    _broken_benchmarks(project)
    # Found only by loading the environment: an argument file-qa does not take.
    badarg = project.add("badarg", n=3)
    badarg.write_text(badarg.read_text().replace("env_args:\n", "env_args:\n  pathh: x\n"))
    result = project.run("--co")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*evals/badarg.yaml: this benchmark cannot run",
            # verifiers 0.3: "'pathh'; the env_args it takes: path, system_prompt"; 0.4:
            # "env_args.pathh: Extra inputs are not permitted (fields: path, system_prompt, task)"
            "*environment 'file-qa' rejected env_args*pathh*path, system_prompt*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*evals/nodata.yaml: this benchmark cannot run",
            "  env_args.path: data file */evals/data/nodata.jsonl does not exist (a relative "
            "path is relative to the benchmark YAML's directory)",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*evals/typo.yaml: invalid benchmark configuration", "*did you mean 'min_avg_reward'?*"]
    )
    result.stdout.fnmatch_lines(
        [
            "*evals/uninstalled.yaml: this benchmark cannot run",
            "  env_id: environment 'gsm8k-not-installed' is not installed*",
        ]
    )
    assert "<BenchmarkItem good>" in out and "Traceback" not in out
    assert "4 errors" in out
    assert _requests(project) == 0
    # A mistyped --override key is a usage error, said with the fix; a value of the wrong
    # type, an error of the benchmark it does not fit.
    override = project.run("--co", "evals/good.yaml", "--override", "gate.min_avg_rewrd=0.5")
    assert override.ret == pytest.ExitCode.USAGE_ERROR
    override.stderr.fnmatch_lines(
        ["*--override gate.min_avg_rewrd: unknown key*(did you mean 'min_avg_reward'?)*"]
    )
    mistyped = project.run("--co", "evals/good.yaml", "--override", "eval.rollouts=many")
    assert mistyped.ret == pytest.ExitCode.INTERRUPTED
    mistyped.stdout.fnmatch_lines(["*eval.rollouts*many*"])
    assert "Traceback" not in override.stderr.str() + mistyped.stdout.str()
    assert _requests(project) == 0
    # -k selects among the benchmarks that can be collected; the others stay errors.
    selected = project.run("--co", "-q", "-k", "good")
    assert selected.ret == pytest.ExitCode.INTERRUPTED
    selected.stdout.fnmatch_lines(["evals/good.yaml::good"])
    # A whole run stops at the errors that need no loading (badarg's shows when its item is
    # set up), before anything is asked of the endpoint.
    run = project.run()
    assert (
        run.ret == pytest.ExitCode.INTERRUPTED and "3 errors during collection" in run.stdout.str()
    )
    assert _requests(project) == 0
    # Its own benchmark fixed, one of them runs with the rest left out of the session.
    project.run("evals/good.yaml").assert_outcomes(passed=1)


def test_collect_only_verbose_prints_the_configuration_and_the_plan(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=40, gate="gate: {min_avg_reward: 0.5, max_drop: 0.02}")
    project.server.configure(accuracy=0.8)
    project.run("--snapshot-update").assert_outcomes(passed=1)  # a stored baseline
    project.server.configure(reset_stats=True)
    # Settings from the ini file are shown with the command line's.
    project.pytester.makeini(
        "[pytest]\naddopts = -p no:randomly\nmodal_eval_api_key_env = MY_EVAL_KEY\n"
        "modal_eval_report = ini-report.html\n"
    )
    result = project.run(
        "--co", "-v", "--override", "eval.rollouts=1", "--override", "sampling.temperature=0.3"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert _requests(project) == 0
    result.stdout.fnmatch_lines(
        [
            "*benchmark plans*",
            "evals/alpha.yaml",
            "  plan: 40 examples x 1 rollout = 40 requests (at least: one per model turn)",
            "  gate:",
            "    mean reward >= 0.5 (gate.min_avg_reward)",
            "    errored examples: none tolerated (gate.max_error_rate 0)",
            "    baseline evals/__baselines__/alpha.json: model test-model, mean 0.* over 40 "
            "examples",
            "      compared on the 40 examples both have (mcnemar-exact, alpha 0.05)",
            "      smallest drop detected with 80% power: 0.* (if the run's answers were "
            "independent of the baseline's; *",
            "      gate.max_drop 0.02 is below it: a drop in between may pass unnoticed; *",
            "  resolved configuration (defaults < the YAML < --override: eval.rollouts=1, "
            "sampling.temperature=0.3):",
            "    env_id: file-qa",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "      temperature: 0.3",
            "*  session (command line < ini < defaults):",
            "    models:",
            "    - test-model",
            "    backend: endpoint",
            f"    base_url: {project.server.base_url}",
            "    api_key_env: MY_EVAL_KEY",
            "*    report: *ini-report.html",
        ]
    )
    # The figure is the power module's for that noise: a 0/1 baseline at its solved share.
    from pytest_modal_eval.stats.power import detectable_drop_mcnemar

    baseline = json.loads((project.evals / "__baselines__" / "alpha.json").read_text())
    p = baseline["mean"]
    drop = detectable_drop_mcnemar(40, p * (1 - p), 0.05)
    assert f"smallest drop detected with 80% power: {drop:.3f} (" in result.stdout.str()
    # Without -v, no plan; no run is started either way.
    quiet = project.run("--co", "-q")
    assert "benchmark plans" not in quiet.stdout.str()
    assert len(project.run_dirs("alpha")) == 1


@XDIST
def test_a_missing_data_file_fails_before_a_local_server_starts(
    local: LocalRuns,  # noqa: F811
    dist: list[str],
) -> None:
    local.project.add("alpha", n=3)
    local.project.add("beta", n=3)
    (local.project.evals / "data" / "beta.jsonl").unlink()
    result = local.run(*dist)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    # Under xdist too: xdist would run alpha, which collected; the session stops instead.
    result.stdout.fnmatch_lines(["*Interrupted: 1 error during collection*"])
    result.stdout.fnmatch_lines(["*evals/beta.yaml: this benchmark cannot run", "*env_args.path:*"])
    assert local.started() == []


def test_collect_only_checks_a_local_model_and_starts_nothing(local: LocalRuns) -> None:  # noqa: F811
    local.project.add("alpha", n=3)
    ok = local.run("--co", "-v")
    assert ok.ret == pytest.ExitCode.OK, ok.stdout.str()
    ok.stdout.fnmatch_lines(["  plan: 3 examples x 1 rollout = 3 requests*", "    backend: local"])
    (local.project.pytester.path / MODEL / "model.safetensors").unlink()
    no_weights = local.run("--co")
    assert no_weights.ret == pytest.ExitCode.INTERRUPTED
    no_weights.stdout.fnmatch_lines(
        [
            "*evals/alpha.yaml: this benchmark cannot run",
            f"  --model {MODEL}: the directory holds no weights (*.safetensors*",
        ]
    )
    assert local.started() == []


def test_benchmarks_command_lists_a_missing_data_file_as_broken(
    project: BenchmarkProject,
) -> None:
    _broken_benchmarks(project)
    result = CliRunner().invoke(main, ["benchmarks"])
    assert result.exit_code == 1
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["good"][-1] == "ok" and rows["good"][5] == "12"  # the examples loaded
    assert rows["nodata"][-1] == "broken" and rows["uninstalled"][-1] == "broken"
    assert "BROKEN " in result.stderr and "nodata.jsonl does not exist" in result.stderr
    assert "INVALID " in result.stderr and "did you mean 'min_avg_reward'?" in result.stderr
    as_json = json.loads(CliRunner().invoke(main, ["benchmarks", "--json", "--quick"]).stdout)
    problems = {row.get("name"): row.get("problems") for row in as_json}
    assert problems["good"] == [] and len(problems["nodata"]) == 1
    # Checked with --override, as pytest would run it.
    good = ["benchmarks", "evals/good.yaml"]
    moved = CliRunner().invoke(main, [*good, "--override", "env_args.path=nope.jsonl"])
    assert moved.exit_code == 1
    assert "env_args.path (from --override): data file " in moved.stderr
    assert "evals/nope.jsonl does not exist" in moved.stderr
    wrong_type = CliRunner().invoke(main, [*good, "--override", "eval.rollouts=many"])
    assert wrong_type.exit_code == 1 and "eval.rollouts" in wrong_type.stderr
    typo = CliRunner().invoke(main, [*good, "--override", "gate.min_avg_rewrd=0.5"])
    assert typo.exit_code == 2  # a usage error, as pytest's
    assert "did you mean 'min_avg_reward'?" in typo.stderr
    assert _requests(project) == 0

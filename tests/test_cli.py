"""The command line against output directories made by real runs (file-qa env, test server).

Runs are made by the plugin itself: complete, with errored examples, and killed (a pytest
subprocess sent SIGKILL partway, leaving what a crash leaves). The commands then run in-process
through click's runner; ``--json`` output is parsed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pytest_modal_eval.cli import COMMANDS, main
from pytest_modal_eval.runs.locate import iter_runs
from pytest_modal_eval.runs.paths import RunPaths
from tests.conftest import REPO, BenchmarkProject


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


_MADE: dict[str, Path] = {}


@pytest.fixture
def outputs(project: BenchmarkProject, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real runs: complete, with errors, and killed partway; made once per module and
    copied into each test's project (the runs take seconds, the copies milliseconds)."""
    target = project.pytester.path / "outputs" / "evals"
    if "outputs" not in _MADE:
        made = make_outputs(project)
        _MADE["outputs"] = tmp_path_factory.mktemp("cli-runs") / "evals"
        shutil.copytree(made, _MADE["outputs"], symlinks=True)
    else:
        project.add("good", n=6)
        shutil.copytree(_MADE["outputs"], target, symlinks=True)
    return target


def make_outputs(project: BenchmarkProject) -> Path:
    project.add("good", n=6)
    project.add("flaky", n=6, gate="gate: {max_error_rate: 1.0}")
    project.run("evals/good.yaml").assert_outcomes(passed=1)
    project.server.configure(fail_rate=0.5)
    project.run("evals/flaky.yaml")
    project.server.configure(fail_rate=0.0, delay=0.3)
    project.add("slow", n=40, extra_yaml="eval: {max_concurrent: 1, max_retries: 0}\n")
    kill_partway(project, "evals/slow.yaml")
    return project.pytester.path / "outputs" / "evals"


def kill_partway(project: BenchmarkProject, target: str, after: int = 3) -> None:
    """Run ``target`` in a pytest subprocess and SIGKILL it once ``after`` of its examples
    are in the checkpoint."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", target, "-p", "no:cacheprovider", *project.args()],
        cwd=project.pytester.path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    progressed = False
    deadline = time.monotonic() + 60
    outputs = project.pytester.path / "outputs" / "evals"
    while not progressed and time.monotonic() < deadline:
        time.sleep(0.1)
        for run in iter_runs(outputs):
            if not run.dir.parent.name.startswith(f"{Path(target).stem}--"):
                continue
            meta = run.read_checkpoint_meta() or {}
            progressed = len(meta.get("completed_example_ids") or []) >= after
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    assert progressed, "the run never checkpointed"


SERIAL = "eval: {max_concurrent: 1, max_retries: 0}\n"


def by_benchmark(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["benchmark"]: row for row in rows}


def test_runs_lists_each_state(outputs: Path) -> None:
    rows = by_benchmark(as_json(cli("runs", "--json")))
    assert set(rows) == {"good", "flaky", "slow"}
    good, flaky, slow = rows["good"], rows["flaky"], rows["slow"]
    assert (good["state"], good["done"], good["total"], good["errors"]) == ("complete", 6, 6, 0)
    assert good["avg_reward"] == 1.0 and good["model"] == "test-model"
    assert flaky["state"] == "with errors" and 0 < flaky["errors"] < 6
    assert flaky["done"] == 6 - flaky["errors"]
    assert slow["state"] == "incomplete" and slow["total"] == 40 and 3 <= slow["done"] < 40
    assert slow["avg_reward"] is None

    table = cli("runs").stdout
    assert f"incomplete {slow['done']} of 40" in table
    assert f"with errors ({flaky['errors']})" in table
    assert "1.000 ± 0.000" in table


def test_runs_shows_each_runs_gate_verdict(project: BenchmarkProject) -> None:
    """The verdict of the session that judged the run, in ``metadata.json`` and in ``runs``."""
    project.add("hard", n=4, gate="gate: {min_avg_reward: 0.5}")
    project.server.configure(accuracy=0.0)
    project.run().assert_outcomes(failed=1)
    (row,) = as_json(cli("runs", "--json"))
    assert row["verdict"] == "fail"
    [run_dir] = project.run_dirs("hard")
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["verdict"] == "fail"
    assert any("gate.min_avg_reward 0.5" in reason for reason in metadata["gate_reasons"])

    project.server.configure(accuracy=1.0)
    project.run("--override", "gate.min_avg_reward=0.0").assert_outcomes(passed=1)
    (row,) = as_json(cli("runs", "--json"))
    assert row["verdict"] == "pass"  # the same run, judged again by a session with a lower gate
    assert " pass " in cli("runs").stdout.lower()


def test_the_report_shows_the_threshold_the_verdict_applied(project: BenchmarkProject) -> None:
    """The threshold is recorded with the verdict: the report of a run judged again under
    another gate shows that gate's threshold, not the one the run was started with."""
    from pytest_modal_eval.report.page import read_run

    project.add("hard", n=4, gate="gate: {min_avg_reward: 0.5}")
    project.run()
    [run_dir] = project.run_dirs("hard")
    assert json.loads((run_dir / "metadata.json").read_text())["threshold"] == 0.5
    assert read_run(run_dir, "hard").threshold == 0.5

    project.run("--override", "gate.min_avg_reward=0.25")
    run_config = json.loads((run_dir / "run_config.json").read_text())
    assert run_config["config"]["gate"]["min_avg_reward"] == 0.5  # as the run was started
    assert json.loads((run_dir / "metadata.json").read_text())["threshold"] == 0.25
    assert read_run(run_dir, "hard").threshold == 0.25
    # A run recorded without a threshold shows the gate it was started with.
    metadata = json.loads((run_dir / "metadata.json").read_text())
    del metadata["threshold"]
    (run_dir / "metadata.json").write_text(json.dumps(metadata))
    assert read_run(run_dir, "hard").threshold == 0.5


def test_a_verdict_that_cannot_be_recorded_is_a_warning(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_modal_eval.gate import record

    def read_only(path: Path, value: Any) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    project.add("alpha", n=2)
    monkeypatch.setattr(record, "write_json_atomic", read_only)
    result = project.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "alpha (test-model): WARNING: the verdict could not be recorded in *metadata.json: "
            "*Permission denied*"
        ]
    )


def test_a_resumed_run_is_incomplete_until_its_session_ends(project: BenchmarkProject) -> None:
    """A run that ended with errors, then was resumed and killed, is incomplete (k of n), not
    the earlier session's "with errors"; finishing it makes it complete."""
    project.add("flaky", n=12, gate="gate: {max_error_rate: 1.0}", extra_yaml=SERIAL)
    project.server.configure(fail_rate=0.5)
    project.run("evals/flaky.yaml").assert_outcomes(passed=1)
    (before,) = as_json(cli("runs", "--json"))
    assert before["state"] == "with errors" and before["done"] < 12

    # The resumed session gets exactly one more answer; its next request is held until the
    # kill, so the run cannot finish first however slow this machine is.
    project.server.configure(fail_rate=0.0, hold_after=project.server.stats()["chat_requests"] + 1)
    kill_partway(project, "evals/flaky.yaml", after=before["done"] + 1)
    (killed,) = as_json(cli("runs", "--json"))
    assert killed["run_id"] == before["run_id"]
    assert killed["state"] == "incomplete", killed
    assert killed["done"] == before["done"] + 1 and killed["total"] == 12
    assert f"incomplete {killed['done']} of 12" in cli("runs").stdout
    paths = RunPaths(Path(killed["dir"]))
    assert not paths.finished() and not paths.results.exists()
    assert len({r["example_id"] for r in paths.records() if not r.get("error")}) >= killed["done"]

    project.server.configure(hold_after=None)
    project.run("evals/flaky.yaml").assert_outcomes(passed=1)
    (after,) = as_json(cli("runs", "--json"))
    assert (after["run_id"], after["state"], after["done"]) == (before["run_id"], "complete", 12)


def test_runs_filters_and_limits(outputs: Path) -> None:
    assert [r["benchmark"] for r in as_json(cli("runs", "--json", "-b", "good"))] == ["good"]
    assert as_json(cli("runs", "--json", "-m", "other/model")) == []
    newest = as_json(cli("runs", "--json", "-l", "1"))
    assert [r["benchmark"] for r in newest] == ["slow"]  # newest first


def test_runs_output_dir_from_option_env_and_ini(outputs: Path, pytester: pytest.Pytester) -> None:
    moved = pytester.path / "elsewhere"
    outputs.rename(moved)
    assert as_json(cli("runs", "--json")) == []
    assert len(as_json(cli("runs", "--json", "--eval-output-dir", str(moved)))) == 3
    assert len(as_json(cli("runs", "--json", env={"MODAL_EVAL_OUTPUT_DIR": "elsewhere"}))) == 3
    pytester.makeini("[pytest]\nmodal_eval_output_dir = elsewhere\n")
    assert len(as_json(cli("runs", "--json"))) == 3


def test_show_complete_run(outputs: Path) -> None:
    run = by_benchmark(as_json(cli("runs", "--json")))["good"]
    shown = as_json(cli("show", run["run_id"], "--json", "-n", "100"))
    assert shown["run"]["state"] == "complete"
    assert shown["config"]["env_id"] == "file-qa"
    assert len(shown["examples"]) == 6
    first = shown["examples"][0]
    assert {"prompt", "completion", "answer", "reward"} <= set(first)
    text = cli("show", run["dir"]).stdout  # by directory too
    assert "reward 1" in text and "prompt:" in text and "What is" in text
    assert as_json(cli("show", run["run_id"], "--missed", "--json"))["examples"] == []


def test_show_lists_only_the_settings_that_applied_to_the_run(outputs: Path) -> None:
    """An endpoint run started no server: no infra, vllm or chat template is shown for it."""
    run = by_benchmark(as_json(cli("runs", "--json")))["good"]
    lines = cli("show", run["run_id"]).stdout.splitlines()
    settings = {
        line.split(":")[0].strip() for line in lines if line.startswith("  ") and ":" in line
    }
    assert {"env_id", "endpoint", "sampling", "eval", "gate", "env_args"} <= settings
    assert not settings & {"infra", "vllm", "chat_template"}, lines
    # The record itself is whole: --json shows the run's configuration as written.
    assert {"infra", "vllm"} <= set(
        as_json(cli("show", run["run_id"], "--json"))["config"]["config"]
    )


def test_show_prompt_line_is_the_question_as_in_the_report(project: BenchmarkProject) -> None:
    """A system prompt is the same on every example: the prompt line shows the last user
    message, as the report's prompt column does, and --json the whole prompt."""
    project.add("arith", n=2)
    system = "You are a careful calculator. Think step by step and box the final answer."
    project.run("--override", f"env_args.system_prompt={system}").assert_outcomes(passed=1)
    [run] = as_json(cli("runs", "--json"))
    lines = cli("show", run["run_id"]).stdout.splitlines()
    assert [line for line in lines if line.lstrip().startswith("prompt:")] == [
        "    prompt:     What is 10 + 3?",
        "    prompt:     What is 11 + 4?",
    ]
    [first, _] = as_json(cli("show", run["run_id"], "--json"))["examples"]
    assert first["prompt"][0] == {"role": "system", "content": system}


def test_show_states_a_models_comparison_with_the_reference_as_the_summary_did(
    project: BenchmarkProject,
) -> None:
    project.add("arith", n=20, gate="gate: {min_avg_reward: 0.1}")
    project.server.configure(accuracy=0.9, models={"model-b": {"accuracy": 0.5, "salt": "b"}})
    result = project.run("--model", "model-b")
    result.assert_outcomes(passed=2)
    prefix = "arith: model-b vs test-model (reference): "
    summary = [line[len(prefix) :] for line in result.stdout.lines if line.startswith(prefix)]
    assert summary[0].startswith("reference ") and len(summary) >= 2  # figures, then flips
    runs = by_benchmark(as_json(cli("runs", "--json", "-m", "model-b")))
    shown = cli("show", runs["arith"]["run_id"]).stdout.splitlines()
    [at] = [i for i, line in enumerate(shown) if line.startswith("  vs        test-model")]
    reference = by_benchmark(as_json(cli("runs", "--json", "-m", "test-model")))["arith"]
    assert shown[at] == f"  vs        test-model (reference, run {reference['run_id']}):"
    assert [line.strip() for line in shown[at + 1 : at + 1 + len(summary)]] == summary
    # The reference's own run has nothing to compare with.
    assert not any(
        line.startswith("  vs ") for line in cli("show", reference["dir"]).stdout.splitlines()
    )


def test_show_errored_and_missed(outputs: Path) -> None:
    run = by_benchmark(as_json(cli("runs", "--json")))["flaky"]
    errored = as_json(cli("show", run["run_id"], "--errored", "--json", "-n", "100"))["examples"]
    assert len(errored) == run["errors"] and all(e["error"] for e in errored)
    missed = as_json(cli("show", run["run_id"], "--missed", "--json", "-n", "100"))["examples"]
    assert missed == []  # the ones that answered were right; errored ones are not "missed"
    assert "ERROR" in cli("show", run["run_id"], "--errored").stdout


def test_show_killed_run_reads_the_checkpoint(outputs: Path) -> None:
    run = by_benchmark(as_json(cli("runs", "--json")))["slow"]
    shown = as_json(cli("show", run["run_id"], "--json", "-n", "1000"))
    assert shown["run"]["state"] == "incomplete"
    assert len({e["example_id"] for e in shown["examples"]}) >= run["done"]


def test_show_unknown_run_exits_1(outputs: Path) -> None:
    result = CliRunner().invoke(main, ["show", "no-such-run"])
    assert result.exit_code == 1
    assert "no-such-run: no such directory, nor a run id in " in result.output


def test_benchmarks_lists_collected_files(project: BenchmarkProject) -> None:
    project.add("good", n=3)
    rows = as_json(cli("benchmarks", "--json"))
    assert [(r["name"], r["env_id"], r["installed"]) for r in rows] == [("good", "file-qa", True)]
    assert "good" in cli("benchmarks").stdout


def test_benchmarks_invalid_file_exits_1(project: BenchmarkProject) -> None:
    project.add("good", n=3)
    (project.evals / "typo.yaml").write_text("env_id: file-qa\nsampling: {temprature: 1}\n")
    (project.evals / "other.yaml").write_text("env_id: no-such-env\n")
    result = CliRunner().invoke(main, ["benchmarks"])
    assert result.exit_code == 1
    assert "typo.yaml" in result.stderr and "sampling.temprature" in result.stderr
    rows = {
        Path(r["file"]).name: r
        for r in json.loads(CliRunner().invoke(main, ["benchmarks", "--json"]).stdout)
    }
    assert rows["other.yaml"]["installed"] is False
    assert "error" in rows["typo.yaml"]


def test_doctor_offline(project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch) -> None:
    project.add("good", n=3)
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROXY_TOKEN_ID", "VLLM_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(project.pytester.path / "no-modal.toml"))
    result = CliRunner().invoke(main, ["doctor", "--offline", "--json"])
    assert result.exit_code == 1  # no Modal token
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["modal token"]["status"] == "FAIL"
    assert "modal token new" in checks["modal token"]["fix"]
    assert checks["modal secrets"]["status"] == "skipped"
    assert checks["benchmark good.yaml"]["status"] == "ok"
    assert checks["output directory"]["status"] == "ok"

    # Serving elsewhere: only what that needs; the endpoint is checked for the model.
    result = CliRunner().invoke(
        main,
        ["doctor", "--no-modal", "--base-url", project.server.base_url, "--model", "test-model"],
    )
    assert result.exit_code == 0, result.output
    assert "ok   endpoint" in result.stdout
    result = CliRunner().invoke(
        main, ["doctor", "--no-modal", "--base-url", project.server.base_url, "--model", "other"]
    )
    assert result.exit_code == 1 and "not 'other'" in result.stdout
    result = CliRunner().invoke(
        main, ["doctor", "--no-modal", "--offline", "--base-url", "http://127.0.0.1:9/v1"]
    )
    assert result.exit_code == 0 and "not checked: endpoint" in result.stdout


@pytest.mark.parametrize("offline", [[], ["--offline"]], ids=["online", "offline"])
def test_doctor_refuses_credentials_in_the_base_url(
    project: BenchmarkProject, offline: list[str]
) -> None:
    """As a run does: the URL is refused before any request, and its password is not shown."""
    url = project.server.base_url.replace("http://", "http://alice:S3cretPW@")
    asked = project.server.stats().get("models_requests", 0)
    result = CliRunner().invoke(
        main, ["doctor", "--no-modal", *offline, "--base-url", url, "--model", "test-model"]
    )
    assert result.exit_code == 2, result.output
    assert "--base-url must not contain credentials" in result.output
    assert "--api-key-env" in result.output
    assert "S3cretPW" not in result.output
    assert project.server.stats().get("models_requests", 0) == asked


def test_every_command_is_registered_and_documented() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest_modal_eval", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in COMMANDS:
        assert name in result.stdout
    docs = (REPO / "docs" / "cli.md").read_text()
    for name in COMMANDS:
        assert f"`{name}" in docs


def test_run_layout_is_read_through_run_paths(outputs: Path) -> None:
    runs = list(iter_runs(outputs))
    assert len(runs) == 3 and all(isinstance(r, RunPaths) for r in runs)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pytest.ini", "[pytest]\nmodal_eval_output_dir = out\nmodal_eval_files =\n  b/*.yaml\n"),
        (
            "pyproject.toml",
            '[tool.pytest.ini_options]\nmodal_eval_output_dir = "out"\n'
            'modal_eval_files = ["b/*.yaml"]\n',
        ),
    ],
)
def test_project_reads_ini_as_pytest_does(tmp_path: Path, name: str, text: str) -> None:
    """Pins the private pytest API cli/project.py uses (``determine_setup`` and the
    ``ConfigValue`` it returns): this fails loudly if pytest changes it."""
    from pytest_modal_eval.cli.common import resolve_output_dir
    from pytest_modal_eval.cli.project import Project

    (tmp_path / name).write_text(text)
    (tmp_path / "sub").mkdir()
    project = Project.find(tmp_path / "sub")
    assert project.rootdir == tmp_path and project.inipath == tmp_path / name
    assert project.ini_lines("modal_eval_files", []) == ["b/*.yaml"]
    assert resolve_output_dir(None, project, environ={}) == tmp_path / "sub" / "out"
    assert resolve_output_dir(None, project, {"MODAL_EVAL_OUTPUT_DIR": "/x"}) == Path("/x")
    assert resolve_output_dir("/y", project, {"MODAL_EVAL_OUTPUT_DIR": "/x"}) == Path("/y")


@pytest.mark.parametrize(
    ("command", "status"),
    [
        (["report", "{path}", "-o", "{tmp}/r.html"], 1),
        (["push", "{path}", "--to", "org/evals"], 1),
        (["compare", "{path}", "{tmp}"], 2),  # 1 is compare's "significant drop"
    ],
)
@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_run_path_that_is_not_a_directory_is_the_commands_error(
    tmp_path: Path, command: list[str], status: int, kind: str
) -> None:
    """Every command taking runs names the path (or id) and the fix in one line, with the exit
    status it gives any run it cannot use (never click's usage error)."""
    path = tmp_path / "outputs" / "evals" / "no-such-run"
    if kind == "file":
        path.parent.mkdir(parents=True)
        path.write_text("not a run\n")
    args = [a.format(path=path, tmp=tmp_path) for a in command]
    result = CliRunner().invoke(main, args, env={"HF_TOKEN": "hf_x"})
    assert result.exit_code == status, result.output
    problem = "no such directory" if kind == "missing" else "not a directory"
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: {path}: {problem}, nor a run id in ")
    assert "; give a run id (or a unique prefix) or a run directory" in line
    assert "pytest-modal-eval runs --json" in line


def test_show_names_the_fix_for_an_unknown_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["show", str(tmp_path / "missing"), "--eval-output-dir", str(tmp_path)]
    )
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert f"{tmp_path / 'missing'}: no such directory, nor a run id in {tmp_path}; give" in line
    assert "pytest-modal-eval runs --json" in line


def test_doctor_reads_the_key_variable_from_the_ini_as_pytest_does(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--api-key-env`` unset: the key is read from the variable ini ``modal_eval_api_key_env``
    names, as a run, ``show``, ``report`` and ``push`` read it; the option still wins."""
    project.pytester.makeini(
        "[pytest]\naddopts = -p no:randomly\nmodal_eval_api_key_env = GATEWAY_KEY\n"
    )
    project.server.configure(require_key="gateway-secret")
    monkeypatch.setenv("GATEWAY_KEY", "gateway-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "wrong-key")
    args = ["doctor", "--no-modal", "--base-url", project.server.base_url, "--model", "test-model"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "ok   endpoint" in result.stdout
    result = CliRunner().invoke(main, [*args, "--api-key-env", "OPENAI_API_KEY"])
    assert result.exit_code == 1
    assert "answered HTTP 401" in result.stdout and "$OPENAI_API_KEY" in result.stdout
    assert "gateway-secret" not in result.stdout and "wrong-key" not in result.stdout
    # A mistyped variable name: doctor says it is unset, and how to set it, as a run does.
    typo = CliRunner().invoke(main, [*args, "--api-key-env", "GATEWAY_KEYY"])
    assert typo.exit_code == 1
    assert "$GATEWAY_KEYY, the variable --api-key-env names" in typo.stdout
    assert "is not set" in typo.stdout and "export GATEWAY_KEYY=<key>" in typo.stdout


def test_the_output_directory_has_one_rule_and_reads_the_ini_only_when_it_decides() -> None:
    """The plugin and every command resolve the output directory through one function, which
    looks for the ini file only when neither the option nor the environment decides."""
    from pytest_modal_eval.config.locations import output_dir_from

    asked: list[str] = []

    def ini() -> str:
        asked.append("ini")
        return "from-ini"

    assert output_dir_from("/opt", ini, Path("/w"), {"MODAL_EVAL_OUTPUT_DIR": "/e"}) == Path("/opt")
    assert output_dir_from(None, ini, Path("/w"), {"MODAL_EVAL_OUTPUT_DIR": "/e"}) == Path("/e")
    assert asked == []
    assert output_dir_from(None, ini, Path("/w"), {}) == Path("/w/from-ini")
    assert output_dir_from(None, lambda: "", Path("/w"), {}) == Path("/w/outputs/evals")
    assert asked == ["ini"]

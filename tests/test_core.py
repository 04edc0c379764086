"""The core: benchmark YAMLs collected as items, evaluated against a real local endpoint."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from pytest_modal_eval.runs.record import RolloutRecord
from tests.conftest import BenchmarkProject, classic_only, read_jsonl, subtest_counts


def test_help_documents_every_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*LLM evaluations (pytest-modal-eval)*"])
    for option in (
        "--model=ORG/NAME",
        "--override=KEY=VALUE",
        "--backend=*",
        "--base-url=URL",
        "--api-key-env=VAR",
        "--eval-output-dir=DIR",
        "--eval-fresh",
        "--keep-deployment",
        "--vllm-python=PATH",
    ):
        result.stdout.fnmatch_lines([f"*{option}*"])
    for ini in ("modal_eval_files", "modal_eval_backend", "modal_eval_output_dir"):
        result.stdout.fnmatch_lines([f"*{ini}*"])


def test_collects_benchmarks_only(project: BenchmarkProject) -> None:
    project.add("alpha")
    project.add("beta")
    workflows = project.pytester.mkdir(".github")
    (workflows / "ci.yaml").write_text("on: push\njobs: {}\n")
    (project.pytester.path / "docker-compose.yml").write_text("services: {}\n")
    result = project.pytester.runpytest("--co", "-q")
    result.stdout.fnmatch_lines(["evals/alpha.yaml::alpha", "evals/beta.yaml::beta"])
    assert "ci.yaml" not in result.stdout.str()
    assert "docker-compose" not in result.stdout.str()
    assert result.ret == 0


def test_without_model_the_item_errors_not_skips(project: BenchmarkProject) -> None:
    project.add("alpha")
    result = project.pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no model given. Pass --model ORG/NAME*"])


def test_passing_gate_reports_subtests_and_summary(project: BenchmarkProject) -> None:
    project.add("alpha", n=12)
    result = project.run("-v")
    result.assert_outcomes(passed=1)
    assert subtest_counts(result) == {"passed": 12}
    result.stdout.fnmatch_lines(
        [
            "*SOLVED [[]example *[]] (reward='1.000', done='1/12'*",
            "*evaluation summary*",
            "alpha*test-model*1.000 ± 0.000*PASS*",
        ]
    )


def test_progress_is_logged_and_verifiers_logs_go_to_the_run(project: BenchmarkProject) -> None:
    project.add("alpha", n=20)
    project.server.configure(fail_rate=0.2)
    result = project.run("--log-cli-level=INFO")
    result.stdout.fnmatch_lines(
        ["*alpha: 2/20 examples, mean reward so far *", "*alpha: 20/20 examples*"]
    )
    out = result.stdout.str()
    assert "Aborted rollout" not in out and "HTTP Request: POST" not in out
    [run_dir] = project.run_dirs("alpha")
    # What verifiers logs for a failed request: 0.3 ends the rollout, 0.4's interception server
    # reports the failed model call.
    failed = "Aborted rollout" if installed_api() == "classic" else "model call failed"
    assert failed in (run_dir / "logs" / "verifiers.log").read_text()


def test_failing_gate_gives_the_numbers(project: BenchmarkProject) -> None:
    project.add("alpha", n=40, gate="gate: {min_avg_reward: 0.9}")
    project.server.configure(accuracy=0.5)
    result = project.run()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "alpha: gate failed" in out
    assert "< gate.min_avg_reward 0.9" in out
    assert "95% CI" in out and "40 examples x 1 rollouts evaluated, 0 errored" in out
    assert "Traceback" not in out and "pytest_modal_eval/" not in out


def test_selection_by_k_and_tags(project: BenchmarkProject) -> None:
    project.add("alpha", extra_yaml="tags: [math]\n")
    project.add("beta", extra_yaml="tags: [code]\n")
    result = project.run("-k", "beta")
    result.assert_outcomes(passed=1, deselected=1)
    result = project.run("-m", "math")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*alpha*PASS*"])
    result = project.run("-m", "not eval")
    result.assert_outcomes(deselected=2)


def test_overrides_change_the_run(project: BenchmarkProject) -> None:
    project.add("alpha", n=10)
    result = project.run("--override", "eval.num_examples=3", "-v")
    result.assert_outcomes(passed=1)
    assert subtest_counts(result) == {"passed": 3}
    project.server.configure(accuracy=0.0)
    result = project.run(
        "--override", "gate.min_avg_reward=0.25", "--override", "env_args.system_prompt=Be brief."
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*< gate.min_avg_reward 0.25*"])
    # The env_args override changed the prompt, so it is a second, separate run.
    runs = project.run_dirs("alpha")
    assert len(runs) == 2
    prompts = [read_jsonl(run / "results.jsonl")[0]["prompt"][0] for run in runs]
    assert {"role": "system", "content": "Be brief."} in prompts


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sampling.temperature", "expected KEY=VALUE"),
        ("samplng.temperature=1", "unknown namespace 'samplng' (did you mean 'sampling'?)"),
        (
            "sampling.temprature=1",
            "unknown key 'temprature' in 'sampling' (did you mean 'temperature'?)",
        ),
        ("sampling", "expected KEY=VALUE"),
        ("sampling=1", "name a field"),
    ],
)
def test_bad_override_is_a_usage_error(
    project: BenchmarkProject, override: str, message: str
) -> None:
    project.add("alpha")
    result = project.run("--override", override)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_override_of_wrong_type_names_key_and_type(project: BenchmarkProject) -> None:
    project.add("alpha")
    result = project.run("--override", "eval.rollouts=many")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*evals/alpha.yaml: invalid benchmark configuration*",
            "*eval.rollouts (from --override): Input should be a valid integer (got 'many')*",
        ]
    )


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("env_id: [unclosed\n", "invalid YAML (line 2, column 1): expected"),
        ("env_id: file-qa\nbogus: 1\n", "bogus: unknown key; allowed here: env_id, name"),
        (
            "env_id: file-qa\ninfra: {gpux: 1}\n",
            "infra.gpux: unknown key (did you mean 'gpu'?); allowed here: gpu,",
        ),
        ("env_id: file-qa\nvllm: {tp: 2}\n", "vllm.tp: unknown key; allowed here: max_model_len"),
        ("env_id: file-qa\nsampling: {temp: 1}\n", "sampling.temp: unknown key"),
        (
            "env_id: file-qa\neval: {rollout: 2}\n",
            "eval.rollout: unknown key (did you mean 'rollouts'",
        ),
        (
            "env_id: file-qa\ngate: {min_avg_rewrd: 1}\n",
            "gate.min_avg_rewrd: unknown key (did you mean 'min_avg_reward'?); allowed here:",
        ),
        ("env_id: file-qa\nenv_arg: {}\n", "env_arg: unknown key (did you mean 'env_args'?)"),
        (
            "env_id: file-qa\nsampling: {temperature: hot}\n",
            "sampling.temperature: Input should be a valid number (got 'hot')",
        ),
        ("env_id: file-qa\ninfra: {gpu: Z80}\n", "infra.gpu: Value error, unknown GPU type 'Z80'"),
        ("name: x\n", "env_id: required field is missing"),
        ("env_id: file-qa\nchat_template: fancy\n", "chat_template: Value error, use one of"),
        ("env_id: file-qa\nchat_template: t.jinja\n", "chat_template: file 't.jinja' not found"),
        ("env_id: file-qa\ntags: [has space]\n", "must be a Python identifier"),
        ("- a\n- b\n", "a benchmark must be a YAML mapping"),
    ],
)
def test_yaml_errors_are_collection_errors_naming_file_and_field(
    project: BenchmarkProject, yaml_text: str, expected: str
) -> None:
    (project.evals / "broken.yaml").write_text(yaml_text)
    result = project.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "ERROR collecting evals/broken.yaml" in out
    assert expected in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"question": "q", "answer": "1"}\nnot json\n', "*alpha.jsonl:2: not valid JSON*"),
        ('{"question": "q"}\n', "*alpha.jsonl:1: missing 'answer'*"),
    ],
)
def test_bad_file_qa_data_names_file_and_line(
    project: BenchmarkProject, content: str, expected: str
) -> None:
    project.add("alpha")
    (project.evals / "data" / "alpha.jsonl").write_text(content)
    result = project.run()
    # The environment loads in setup, before any server: a broken dataset is an error of the
    # benchmark, not a failure of the model. (A missing file, or environment, is found
    # earlier, at collection: tests/test_precheck.py.)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*{expected}*"])
    assert "Traceback" not in result.stdout.str()


def test_env_not_installed_errors_with_install_hint(project: BenchmarkProject) -> None:
    (project.evals / "gsm.yaml").write_text("env_id: gsm8k-nonexistent\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error: nothing started
    result.stdout.fnmatch_lines(
        ["*env_id: environment 'gsm8k-nonexistent' is not installed*uv pip install*"]
    )
    assert project.server.stats().get("models_requests", 0) == 0


def test_unreachable_endpoint_fails_fast_once(project: BenchmarkProject) -> None:
    project.add("alpha")
    project.add("beta")
    result = project.pytester.runpytest(
        "--model", "test-model", "--base-url", "http://127.0.0.1:9/v1"
    )
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*endpoint http://127.0.0.1:9/v1 is unreachable*"])
    assert "subtests" not in result.stdout.str()


def test_endpoint_serving_another_model(project: BenchmarkProject) -> None:
    project.add("alpha")
    result = project.pytester.runpytest(
        "--model", "org/other", "--base-url", project.server.base_url
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*does not serve model 'org/other'; it serves: test-model*"])


def test_errored_examples_fail_the_gate_by_default(project: BenchmarkProject) -> None:
    project.add("alpha", n=30)
    project.server.configure(fail_rate=0.3)
    result = project.run()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["FAILED evals/alpha.yaml::alpha - alpha: gate failed"])
    out = result.stdout.str()
    # Each errored example is its own failed subtest (counted as failed), plus the item.
    errored = len([line for line in result.stdout.lines if line.startswith("ERRORED [example")])
    assert errored > 0
    assert result.parseoutcomes()["failed"] == errored + 1
    assert f"{errored} of 30 examples could not be evaluated" in out
    assert "ERRORED [example" in out and "could not be evaluated" in out
    assert "gate.max_error_rate 0.0%" in out
    # The reason names the HTTP status and what the server said, not only the errors' types.
    [first] = [line for line in out.splitlines() if "examples could not be evaluated" in line]
    assert "500" in first and "injected failure" in first, first


def test_error_rate_within_the_gate_passes(project: BenchmarkProject) -> None:
    project.add("alpha", n=30, gate="gate: {min_avg_reward: 0.5, max_error_rate: 0.6}")
    project.server.configure(fail_rate=0.3)
    result = project.run("-v", "-rs")
    skipped = result.parseoutcomes().get("skipped", 0)
    assert skipped > 0
    result.assert_outcomes(passed=1, skipped=skipped)
    assert subtest_counts(result)["passed"] + skipped == 30
    result.stdout.fnmatch_lines(["*ERRORED*example*could not be evaluated*gate.max_error_rate*"])


def test_output_files_and_fields(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-123")
    project.add("alpha", n=6, extra_yaml="eval: {rollouts: 2, max_retries: 0}\n")
    project.server.configure(accuracy=0.5)
    result = project.run()
    assert result.ret in (0, 1)
    [run_dir] = project.run_dirs("alpha")
    names = {p.name for p in run_dir.iterdir()}
    assert {
        "run_config.json",
        "checkpoint.jsonl",
        "checkpoint_meta.json",
        "results.jsonl",
        "metadata.json",
        "logs",
    } <= names
    results = read_jsonl(run_dir / "results.jsonl")
    assert len(results) == 12
    assert {(r["example_id"], r["rollout"]) for r in results} == {
        (i, r) for i in range(6) for r in range(2)
    }
    # Every line is exactly the typed record (runs/record.py, the documented schema) plus one
    # top-level key per reward metric of the environment.
    schema = list(RolloutRecord.__annotations__)
    for record in results:
        metric_keys = list(record["metrics"])
        assert "correct" in metric_keys
        assert sorted(record) == sorted([*schema, *metric_keys])
        assert record["correct"] == record["metrics"]["correct"]
    meta = json.loads((run_dir / "metadata.json").read_text())
    for key in (
        "env_id",
        "model",
        "num_examples",
        "rollouts_per_example",
        "sampling_args",
        "time_ms",
        "avg_reward",
        "avg_metrics",
        "stderr",
        "ci",
        "errors",
    ):
        assert key in meta
    assert meta["num_examples"] == 6 and meta["rollouts_per_example"] == 2
    config = json.loads((run_dir / "run_config.json").read_text())
    for key in (
        "model_id",
        "model_slug",
        "benchmark",
        "server_profile",
        "sampling",
        "rollouts",
        "started_at",
        "checkpoint_dir",
        "answer_hash",
        "versions",
    ):
        assert key in config
    assert config["model_slug"] == "test-model"
    ckmeta = json.loads((run_dir / "checkpoint_meta.json").read_text())
    assert ckmeta["completed_example_ids"] == list(range(6))
    assert ckmeta["completed_rollouts"] == 12
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert "sk-secret-value-123" not in path.read_text(errors="replace"), path


def test_junit_properties(project: BenchmarkProject) -> None:
    project.add("alpha", n=8)
    project.run("--junitxml=report.xml")
    tree = ET.parse(project.pytester.path / "report.xml")
    props = {p.get("name"): p.get("value", "") for p in tree.iter("property")}
    for name in (
        "avg_reward",
        "stderr",
        "ci_low",
        "ci_high",
        "n_examples",
        "rollouts",
        "errors",
        "threshold",
        "run_dir",
    ):
        assert name in props, props
    assert float(props["avg_reward"]) == 1.0
    assert props["n_examples"] == "8"


def test_xdist_two_benchmarks(project: BenchmarkProject) -> None:
    project.add("alpha", n=8)
    project.add("beta", n=8)
    result = project.run_subprocess("-n", "2")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert out.count("evaluation summary") == 1
    result.stdout.fnmatch_lines(["alpha*PASS*", "beta*PASS*"])


def test_eval_endpoint_fixture_serves_users_own_tests(project: BenchmarkProject) -> None:
    project.add("alpha")
    project.pytester.makepyfile(
        test_mine="""
        import httpx

        def test_chat(eval_endpoint):
            endpoint = eval_endpoint("evals/alpha.yaml")
            assert endpoint.model == "test-model"
            reply = httpx.post(
                endpoint.base_url + "/chat/completions",
                json={"model": endpoint.model,
                      "messages": [{"role": "user", "content": "What is 2 + 3?"}]},
                headers=dict(endpoint.headers),
            ).json()
            assert "\\\\boxed{5}" in reply["choices"][0]["message"]["content"]
            assert eval_endpoint() == endpoint  # same profile, same deployment
        """
    )
    result = project.run("test_mine.py")
    result.assert_outcomes(passed=1)


def test_api_key_comes_from_the_named_variable_only(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("alpha", n=4)
    project.server.configure(require_key="sk-right")
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*refused the credentials (HTTP 401*$OPENAI_API_KEY*"])
    monkeypatch.setenv("MY_EVAL_KEY", "sk-right")
    # A mistyped variable name: the error says it is unset, and how to set it.
    typo = project.run("--api-key-env", "MY_EVAL_KEYY")
    typo.assert_outcomes(errors=1)
    typo.stdout.fnmatch_lines(
        ["*HTTP 401*$MY_EVAL_KEYY, the variable --api-key-env names*not set*export MY_EVAL_KEYY=*"]
    )
    project.run("--api-key-env", "MY_EVAL_KEY").assert_outcomes(passed=1)
    assert project.server.stats()["completed_requests"] == 4
    for path in (project.pytester.path / "outputs").rglob("*"):
        if path.is_file():
            assert "sk-right" not in path.read_text(errors="replace")


def test_endpoint_going_down_mid_run_aborts_once(project: BenchmarkProject) -> None:
    project.add("alpha", n=200, extra_yaml="eval: {max_concurrent: 4, max_retries: 0}\n")
    project.server.configure(fail_rate=1.0)
    result = project.run()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*the first * examples all failed to evaluate (e.g. *Error*)*looks down*re-run*"]
    )
    # It stopped early instead of sending every remaining request.
    assert project.server.stats()["chat_requests"] < 40


def test_output_dir_from_the_environment(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("alpha", n=3)
    monkeypatch.setenv("MODAL_EVAL_OUTPUT_DIR", str(project.pytester.path / "elsewhere"))
    project.run().assert_outcomes(passed=1)
    assert list((project.pytester.path / "elsewhere").glob("alpha--*/*/results.jsonl"))
    project.run("--eval-output-dir", "third").assert_outcomes(passed=1)
    assert list((project.pytester.path / "third").glob("alpha--*/*/results.jsonl"))


def test_absolute_path_option_with_a_space_is_a_usage_error(
    project: BenchmarkProject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    project.add("alpha")
    model_dir = tmp_path_factory.mktemp("model")
    result = project.pytester.runpytest("--model", str(model_dir), "--backend", "local")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"Write --model={model_dir} instead" in result.stderr.str()


#: The server's answer time in the slot-wait test: long enough that what a loaded machine
#: adds to a measured generation time stays well under it.
ANSWER_MS = 200


# With verifiers 0.4 a rollout's generation time also holds the hop through verifiers'
# interception server and its trace bookkeeping (~40 ms per rollout here, docs/verifiers.md),
# so these bounds hold for the classic path only.
@classic_only()
@pytest.mark.parametrize("prefetch", [0, 1])
def test_time_waiting_for_a_request_slot_is_not_generation_time(
    project: BenchmarkProject, prefetch: int
) -> None:
    project.add("alpha", n=12, extra_yaml=f"eval: {{max_concurrent: 2, prefetch: {prefetch}}}\n")
    project.server.configure(delay=ANSWER_MS / 1000)
    project.run().assert_outcomes(passed=1)
    [run_dir] = project.run_dirs("alpha")
    records = read_jsonl(run_dir / "results.jsonl")
    waits = sorted(r["slot_wait_ms"] for r in records)
    generation = sorted(r["generation_ms"] for r in records)
    # Generation is the server's answer time, which a slower machine only lengthens.
    assert generation[0] >= 0.9 * ANSWER_MS, generation
    if prefetch:
        # Two examples wait while two are answered: about one answer time of waiting each,
        # reported apart. Counted in generation, it would add a whole answer time to it.
        waited = [r for r in records if r["slot_wait_ms"] >= ANSWER_MS / 2]
        assert len(waited) >= len(records) // 2, waits
        for record in waited:
            extra = record["generation_ms"] - ANSWER_MS
            assert extra < record["slot_wait_ms"] / 2, (record["generation_ms"], waits)
    else:
        assert waits[-1] < 5, waits
        assert generation[len(generation) // 2] < 1.5 * ANSWER_MS, generation


def test_a_close_bundled_environment_is_suggested(project: BenchmarkProject) -> None:
    (project.evals / "qa.yaml").write_text("env_id: fileqa\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*env_id: environment 'fileqa' is not installed; did you mean 'file-qa', bundled*"]
    )


def test_an_env_args_mistake_given_by_override_names_the_override(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=2)
    # Found when the environment loads (setup): the override it rejected.
    result = project.run("--override", "env_args.pathh=x.jsonl")
    result.assert_outcomes(errors=1)
    [line] = [x for x in result.stdout.lines if x.startswith("alpha (test-model): ERROR:")]
    assert line.startswith("alpha (test-model): ERROR: --override env_args.pathh: "), line
    assert "alpha.yaml" not in line.split(": environment")[0]
    # Found at collection: a bundled environment's data file that does not exist.
    missing = project.run("--override", "env_args.path=nope.jsonl")
    assert missing.ret == pytest.ExitCode.INTERRUPTED
    missing.stdout.fnmatch_lines(
        ["  env_args.path (from --override): data file */evals/nope.jsonl does not exist*"]
    )

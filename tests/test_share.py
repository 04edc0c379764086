"""Sharing runs: Hub pushes against a local server speaking the Hub's HTTP API, MLflow logging
into a real local MLflow store, and no secret in anything shared."""

from __future__ import annotations

import io
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard, HfApi
from huggingface_hub.errors import RepositoryNotFoundError
from mlflow.tracking import MlflowClient

from pytest_modal_eval.cli import main as cli_main
from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.redact import REDACTED, Redactor
from pytest_modal_eval.share import bundle, hub, tracking
from tests.conftest import HUB_TOKEN, BenchmarkProject
from tests.support.hub_server import HubServer

#: MLflow 3.17 queries SQLAlchemy 2.1 with a deprecated loader; these tests read its store.
MLFLOW_READS = pytest.mark.filterwarnings(
    "ignore:The ``noload`` loader strategy:DeprecationWarning"
)


def _preload_mlflow_store() -> None:
    """Open a SQLite MLflow store once, before pytester snapshots ``sys.modules``: modules first
    imported inside a test are dropped after it, and SQLAlchemy re-imported fails."""
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        MlflowClient(tracking_uri=f"sqlite:///{folder}/preload.db").search_experiments()


_preload_mlflow_store()

TOKEN = HUB_TOKEN
ENV_SECRET = "sk-env-secret-4f1c9a7e2b"  # an API key the run used, from the environment
INLINE_SECRET = "sk-inline-secret-77d0e3"  # an API key written into env_args


def make_run(
    output: Path,
    benchmark: str = "qa",
    run_id: str = "20260101-000000-aaaaaaaa",
    rewards: tuple[float, ...] = (1.0, 0.0, 1.0),
    env_args: dict[str, Any] | None = None,
    finished: bool = True,
) -> Path:
    """A run directory as the plugin writes it (the e2e test below checks against real ones)."""
    run_dir = output / f"{benchmark}--test-model" / run_id
    run_dir.mkdir(parents=True)
    sampling = {"temperature": 0.0, "max_tokens": 64}
    run_config = {
        "run_id": run_id,
        "model_id": "test-model",
        "model_slug": "test-model",
        "benchmark": benchmark,
        "benchmark_file": f"/home/someone/project/evals/{benchmark}.yaml",
        "env_id": "file-qa",
        "server_profile": None,
        "endpoint": "http://127.0.0.1:9/v1",
        "chat_template": None,
        "sampling": sampling,
        "rollouts": 1,
        "num_examples": len(rewards),
        "config": {
            "env_id": "file-qa",
            "env_args": {"path": f"data/{benchmark}.jsonl", **(env_args or {})},
            "sampling": sampling,
        },
        "versions": {"python": "3.11.7", "pytest-modal-eval": "0.1.0"},
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
    }
    (run_dir / "run_config.json").write_text(json.dumps(run_config))
    records = [
        {
            "example_id": i,
            "rollout": 0,
            "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
            "completion": [{"role": "assistant", "content": str(i + 1)}],
            "task": "default",
            "answer": str(i + 1),
            "reward": reward,
            "info": {},
            "error": None,
            "token_usage": None,
            "metrics": {"correct": reward},
        }
        for i, reward in enumerate(rewards)
    ]
    (run_dir / "checkpoint.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if finished:
        (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        mean = sum(rewards) / len(rewards)
        metadata = {
            "env_id": "file-qa",
            "benchmark": benchmark,
            "model": "test-model",
            "run_id": run_id,
            "num_examples": len(rewards),
            "rollouts_per_example": 1,
            "time_ms": 1234.5,
            "avg_reward": mean,
            "avg_metrics": {"correct": mean},
            "stderr": 0.25,
            "ci": [0.1, 0.9],
            "n_evaluated": len(rewards),
            "errors": 0,
            "truncated_rollouts": 0,
            "pass@2": 0.75,
        }
        (run_dir / "metadata.json").write_text(json.dumps(metadata))
    return run_dir


def push(run_dirs: list[Path], repo: str = "org/evals", private: bool = False) -> hub.PushResult:
    redactor = Redactor.from_environ()
    runs = [bundle.load_run(d, redactor) for d in run_dirs]
    return hub.push_runs(
        runs,
        repo,
        token=hub.hub_token({"HF_TOKEN": TOKEN}),
        redactor=redactor,
        private=private,
        log_dir=run_dirs[0].parent / "logs",
    )


def front_matter(card: bytes) -> dict[str, Any]:
    text = card.decode()
    assert text.startswith("---\n")
    data: dict[str, Any] = yaml.safe_load(text[4:].split("\n---\n", 1)[0])
    return data


# -- redaction --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("OPENAI_API_KEY", True),
        ("HF_TOKEN", True),
        ("client_secret", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("password", True),
        ("api_keys", True),
        ("secrets", True),
        ("passwords", True),
        ("access_tokens", True),
        ("bearer", True),
        ("session_cookie", True),
        ("Cookie", True),
        ("pat", True),
        ("GITHUB_PAT", True),
        ("authToken", True),
        ("accessToken", True),
        ("clientSecret", True),
        ("openaiApiKey", True),
        ("apiKey", True),
        ("passphrase", True),
        ("maxTokens", False),
        ("tokenUsage", False),
        ("apiKeyVar", False),
        ("max_tokens", False),
        ("max_new_tokens", False),
        ("special_tokens", False),
        ("token_usage", False),
        ("answer_key", False),
        ("api_key_var", False),
        ("path", False),
        ("pattern", False),
        ("file_path", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    redactor = Redactor()
    assert (redactor.json({name: "value"})[name] == REDACTED) is secret


def test_redactor_replaces_env_values_and_url_passwords() -> None:
    redactor = Redactor.from_environ({"OPENAI_API_KEY": ENV_SECRET, "HOME": "/home/someone"})
    assert redactor.values == [ENV_SECRET]  # only secret-named variables count
    text = redactor.text(f"key={ENV_SECRET} at https://user:pw@host/v1 in /home/someone")
    assert text == f"key={REDACTED} at https://{REDACTED}@host/v1 in /home/someone"
    with pytest.raises(ShareError, match="still contains the value of a secret"):
        redactor.check("x/metadata.json", f'{{"k": "{ENV_SECRET}"}}'.encode())


# -- Hub --------------------------------------------------------------------------------------


def test_push_creates_one_configuration_per_benchmark_and_model(
    hub_server: HubServer, tmp_path: Path
) -> None:
    runs = [make_run(tmp_path, "qa"), make_run(tmp_path, "math", rewards=(0.0, 1.0))]
    result = push(runs, private=True)
    assert result.commit is not None
    assert hub_server.repos[("dataset", "org/evals")].private
    with pytest.raises(RepositoryNotFoundError):  # a private repository, asked without token
        HfApi(endpoint=hub_server.url, token=False).dataset_info("org/evals")
    files = hub_server.files("org/evals")
    for config in ("qa--test-model", "math--test-model"):
        assert {
            f"{config}/results.parquet",
            f"{config}/metadata.json",
            f"{config}/run_config.json",
        } <= set(files)
    # The Parquet file went through Git LFS (the repository's .gitattributes says so).
    parquet = files["qa--test-model/results.parquet"]
    assert parquet in hub_server.lfs.values()
    table = pq.read_table(io.BytesIO(parquet))
    assert table.column("reward").to_pylist() == [1.0, 0.0, 1.0]
    assert table.column("prompt").to_pylist()[1] == [{"role": "user", "content": "What is 1 + 1?"}]
    assert table.column("info").to_pylist() == ["{}", "{}", "{}"]  # Parquet has no empty struct
    card = files["README.md"]
    assert front_matter(card)["configs"] == [
        {
            "config_name": name,
            "data_files": [{"split": "latest", "path": f"{name}/results.parquet"}],
        }
        for name in ("math--test-model", "qa--test-model")
    ]
    # `datasets` reads the configurations from the card as the Hub's viewer does.
    configs = MetadataConfigs.from_dataset_card_data(DatasetCard(card.decode()).data)
    assert configs["qa--test-model"]["data_files"] == [
        {"split": "latest", "path": "qa--test-model/results.parquet"}
    ]
    text = card.decode()
    assert "| `qa--test-model` | qa | test-model | 0.667 ± 0.250 | [0.100, 0.900] |" in text
    assert "pytest evals/qa.yaml --model test-model" in text
    assert "0123456789abcdef0123456789abcdef01234567" in text
    assert json.loads(files["qa--test-model/metadata.json"])["avg_reward"] == 2 / 3


def test_pushing_the_same_runs_twice_changes_nothing(hub_server: HubServer, tmp_path: Path) -> None:
    # The server leaves file oids out of its preupload answer, so huggingface_hub cannot drop
    # unchanged files itself: only the plugin's own check keeps the second push empty.
    hub_server.preupload_oids = False
    runs = [make_run(tmp_path, "qa"), make_run(tmp_path, "math")]
    first = push(runs)
    commits = len(hub_server.repos[("dataset", "org/evals")].commits)
    requests = len(hub_server.requests)
    again = push(runs)
    assert again.commit is None and again.uploaded == []
    assert len(hub_server.repos[("dataset", "org/evals")].commits) == commits
    assert sorted(again.unchanged) == sorted(first.uploaded)
    sent = hub_server.requests[requests:]
    writes = [r for r in sent if r[0] in ("PUT", "POST") and "/paths-info/" not in r[1]]
    assert writes == [("POST", "/api/repos/create")]  # create_repo(exist_ok=True), no upload
    # A newer run of one benchmark replaces only that configuration's files.
    newer = make_run(tmp_path, "qa", run_id="20260102-000000-bbbbbbbb", rewards=(0.0, 0.0, 0.0))
    third = push([*runs, newer])
    assert third.commit is not None
    assert set(third.uploaded) == {
        "README.md",
        "qa--test-model/metadata.json",
        "qa--test-model/results.parquet",
        "qa--test-model/run_config.json",
    }


def test_card_keeps_configurations_pushed_before(hub_server: HubServer, tmp_path: Path) -> None:
    push([make_run(tmp_path, "qa")])
    push([make_run(tmp_path, "math")])
    card = hub_server.files("org/evals")["README.md"]
    names = [c["config_name"] for c in front_matter(card)["configs"]]
    assert names == ["math--test-model", "qa--test-model"]
    # Read back through the Hub's download endpoint (resolve), not from local files.
    assert any(path.startswith("/datasets/org/evals/resolve/") for _, path in hub_server.requests)


def test_push_sends_no_secret(
    hub_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    run = make_run(tmp_path, "qa", env_args={"api_key": INLINE_SECRET})
    results = run / "results.jsonl"
    results.write_text(results.read_text().replace('"What is 0 + 1?"', f'"{ENV_SECRET}"'))
    push([run])
    config = json.loads(hub_server.files("org/evals")["qa--test-model/run_config.json"])
    assert config["config"]["env_args"]["api_key"] == REDACTED
    for data in hub_server.stored_bytes():
        assert TOKEN.encode() not in data
        assert ENV_SECRET.encode() not in data
        assert INLINE_SECRET.encode() not in data


def test_hub_token_only_from_hf_token() -> None:
    with pytest.raises(ShareError, match="HF_TOKEN"):
        hub.hub_token({"HUGGING_FACE_HUB_TOKEN": TOKEN})
    assert hub.hub_token({"HF_TOKEN": f" {TOKEN}\n"}) == TOKEN


@pytest.mark.parametrize("bad", ["evals", "org/", "/evals", "org/evals/x", "org/../x", "o rg/x"])
def test_repo_id_is_checked(bad: str) -> None:
    with pytest.raises(ShareError, match="give ORG/NAME"):
        hub.check_repo_id(bad)


def test_cli_push(hub_server: HubServer, tmp_path: Path) -> None:
    output = tmp_path / "outputs"
    make_run(output, "qa")
    newest = make_run(output, "qa", run_id="20260102-000000-bbbbbbbb", rewards=(0.0, 1.0, 1.0))
    unfinished = make_run(output, "math", finished=False)
    runner = CliRunner()
    result = runner.invoke(cli_main, ["push", str(output), "--to", "org/cli", "--private"])
    assert result.exit_code == 0, result.output
    assert f"skipped {unfinished}: not finished" in result.output
    assert "skipped" in result.output and "20260102-000000-bbbbbbbb is newer" in result.output
    assert "Hub: pushed qa--test-model to" in result.output
    files = hub_server.files("org/cli")
    assert json.loads(files["qa--test-model/metadata.json"])["run_id"] == newest.name
    again = runner.invoke(cli_main, ["push", str(newest), "--to", "org/cli"])
    assert again.exit_code == 0, again.output
    assert "already has qa--test-model; nothing pushed" in again.output
    # Naming an unfinished run itself is an error that says so.
    failed = runner.invoke(cli_main, ["push", str(unfinished), "--to", "org/cli"])
    assert failed.exit_code == 1
    assert "no metadata.json, so the run has not finished" in failed.output


def test_cli_push_needs_hf_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    run = make_run(tmp_path)
    result = CliRunner().invoke(cli_main, ["push", str(run), "--to", "org/evals"])
    assert result.exit_code == 1
    assert "needs a token with write access in the HF_TOKEN environment variable" in result.output


def _push_cli(run: Path, output: Path) -> list[str]:
    """``push RUN --to org/evals`` as a user types it: its exit status must be 1; its lines."""
    result = CliRunner().invoke(
        cli_main, ["push", str(run), "--to", "org/evals", "--eval-output-dir", str(output)]
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return result.output.splitlines()


def test_cli_push_names_an_unexpected_failure_and_keeps_its_traceback(
    hub_server: HubServer, tmp_path: Path
) -> None:
    """A Hub answering what huggingface_hub cannot read is no network or token problem: the
    line names the error's type and says where its traceback is, secrets replaced."""
    hub_server.info_answer = []  # repository info that is not an object
    [line] = _push_cli(make_run(tmp_path), tmp_path)
    log = tmp_path / "logs" / hub.PUSH_LOG
    assert line.startswith(
        f"Error: pushing to org/evals at {hub_server.url} failed with an unexpected TypeError: "
    )
    assert line.endswith(f"; not a network or token problem: the traceback is in {log}")
    assert "network and HF_ENDPOINT" not in line and "HF_TOKEN" not in line
    kept = log.read_text()
    assert "Traceback (most recent call last)" in kept and "dataset_info" in kept
    assert TOKEN not in kept


@pytest.mark.parametrize(
    "token",
    [f"hf_copied\u2019{TOKEN}", f"hf_two\nlines_{TOKEN}", f"hf_a space_{TOKEN}"],
    ids=["non-ascii", "line-break", "space"],
)
def test_a_token_that_cannot_be_sent_is_named_and_never_shown(
    token: str, hub_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", token)
    [line] = _push_cli(make_run(tmp_path), tmp_path)
    assert line.startswith("Error: HF_TOKEN holds a character no Hub token has (a space, a line")
    assert TOKEN not in line and "network" not in line
    assert hub_server.requests == []  # refused before anything was sent


# -- MLflow -----------------------------------------------------------------------------------


@MLFLOW_READS
def test_mlflow_logs_one_run_per_benchmark_and_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    output = tmp_path / "outputs"
    run_dirs = [
        make_run(output, "qa", env_args={"api_key": INLINE_SECRET}),
        make_run(output, "math"),
    ]
    (run_dirs[0] / "report.html").write_text(f"<html><p>{ENV_SECRET}</p></html>")
    redactor = Redactor.from_environ()
    runs = [bundle.load_run(d, redactor) for d in run_dirs]
    uri = tracking.tracking_uri({}, output)
    assert uri == f"sqlite:///{output.resolve()}/mlflow.db"
    logged = tracking.log_runs(runs, uri, output_dir=output)
    assert [r.new for r in logged] == [True, True]

    client = MlflowClient(tracking_uri=uri)
    stored = client.get_run(logged[0].mlflow_run_id)
    assert stored.info.run_name == "qa--test-model"
    assert stored.data.metrics["reward"] == pytest.approx(2 / 3)
    assert stored.data.metrics["stderr"] == 0.25
    assert stored.data.metrics["ci_low"] == 0.1 and stored.data.metrics["ci_high"] == 0.9
    assert stored.data.metrics["pass_at_2"] == 0.75
    assert stored.data.metrics["errors"] == 0 and stored.data.metrics["time_s"] == 1.2345
    assert stored.data.params["model_id"] == "test-model"
    assert stored.data.params["config.sampling.temperature"] == "0.0"
    assert stored.data.params["config.env_args.api_key"] == REDACTED
    assert (
        stored.data.tags["mlflow.source.git.commit"] == "0123456789abcdef0123456789abcdef01234567"
    )
    artifacts = {a.path for a in client.list_artifacts(stored.info.run_id)}
    assert artifacts == {"metadata.json", "report.html", "results.jsonl", "run_config.json"}
    assert (output / "mlartifacts").is_dir()  # beside the store, not in the working directory

    again = tracking.log_runs(runs, uri, output_dir=output)
    assert [r.new for r in again] == [False, False]
    experiment = client.get_experiment_by_name("pytest-modal-eval")
    assert experiment is not None
    assert len(client.search_runs([experiment.experiment_id])) == 2
    assert_no_secret(output / "mlflow.db", output / "mlartifacts")


def assert_no_secret(*places: Path) -> None:
    for place in places:
        files = [place] if place.is_file() else [p for p in place.rglob("*") if p.is_file()]
        assert files
        for path in files:
            data = path.read_bytes()
            for secret in (ENV_SECRET, INLINE_SECRET, TOKEN):
                assert secret.encode() not in data, f"{secret} in {path}"


def test_mlflow_missing_is_a_clear_usage_error(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("qa", n=2)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what an absent package looks like
    result = project.run("--mlflow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--mlflow needs MLflow, which is not installed: pip install 'pytest-modal-eval?mlflow?'"]
    )


def test_options_are_documented_and_checked(project: BenchmarkProject) -> None:
    result = project.pytester.runpytest("--help")
    for option in ("--push-to-hub=ORG/NAME", "--hub-private", "--mlflow", "--wandb"):
        result.stdout.fnmatch_lines([f"*{option}*"])
    project.add("qa", n=2)
    bad = project.run("--push-to-hub", "not-a-repo")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--push-to-hub: 'not-a-repo' is not a Hub repository id*"])
    alone = project.run("--hub-private")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(["*--hub-private needs --push-to-hub ORG/NAME*"])


def test_a_failed_push_is_reported_and_fails_the_session(
    project: BenchmarkProject, hub_server: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_not_the_right_token")
    project.add("qa", n=2)
    result = project.run("--push-to-hub", "org/evals")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*shared results*",
            "Hub: pushing to org/evals failed: the Hub refused HF_TOKEN (401) for org/evals: "
            "it needs write access to org *",
        ]
    )
    result.stdout.fnmatch_lines(["*evaluation summary*"])  # the results are still shown
    assert hub_server.repos == {}


# -- end to end -------------------------------------------------------------------------------


@MLFLOW_READS
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_push_and_mlflow_at_session_end(
    project: BenchmarkProject,
    hub_server: HubServer,
    monkeypatch: pytest.MonkeyPatch,
    xdist: list[str],
) -> None:
    """file-qa against the OpenAI-compatible test server, which demands the API key from the
    environment: both options at once, and nothing secret in what either shares."""
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    project.server.configure(require_key=ENV_SECRET)
    project.add("alpha", n=4)
    project.add("beta", n=3)
    result = project.run_subprocess("--push-to-hub", "org/e2e", "--hub-private", "--mlflow", *xdist)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*shared results*",
            "Hub: pushed alpha--test-model, beta--test-model to *org/e2e*",
            "MLflow (sqlite:///*mlflow.db): logged *",
        ]
    )
    repo = hub_server.repos[("dataset", "org/e2e")]
    assert repo.private and len(repo.commits) == 2  # .gitattributes, then one push
    files = hub_server.files("org/e2e")
    table = pq.read_table(io.BytesIO(files["alpha--test-model/results.parquet"]))
    assert table.num_rows == 4 and table.column("reward").to_pylist() == [1.0] * 4
    results = project.run_dirs("alpha")[0] / "results.jsonl"
    assert table.column("example_id").to_pylist() == [
        json.loads(line)["example_id"] for line in results.read_text().splitlines()
    ]

    output = project.pytester.path / "outputs" / "evals"
    client = MlflowClient(tracking_uri=f"sqlite:///{output}/mlflow.db")
    experiment = client.get_experiment_by_name("pytest-modal-eval")
    assert experiment is not None
    found = client.search_runs([experiment.experiment_id], order_by=["attributes.run_name"])
    assert [r.info.run_name for r in found] == [
        "alpha--test-model",
        "beta--test-model",
    ]
    assert found[0].data.metrics["reward"] == 1.0
    assert found[0].data.params["config.env_args.path"] == "data/alpha.jsonl"

    for data in hub_server.stored_bytes():
        assert ENV_SECRET.encode() not in data and TOKEN.encode() not in data
    assert_no_secret(output / "mlflow.db", output / "mlartifacts")

    # The same session again: every run resumes as finished and nothing is evaluated. The
    # runs' metadata.json is rewritten by that session (its time and resumed count), so those
    # two files are pushed again; nothing else is, and MLflow keeps the runs it has.
    before = hub_server.files("org/e2e")
    again = project.run_subprocess("--push-to-hub", "org/e2e", "--mlflow", *xdist)
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines(
        ["Hub: pushed * (commit *, 2 files changed, 5 unchanged)", "MLflow (*): already had *"]
    )
    after = hub_server.files("org/e2e")
    assert {path for path in after if after[path] != before[path]} == {
        "alpha--test-model/metadata.json",
        "beta--test-model/metadata.json",
    }
    # Pushing the same run directories once more changes nothing.
    commits = len(repo.commits)
    pushed = CliRunner().invoke(cli_main, ["push", str(output), "--to", "org/e2e"])
    assert pushed.exit_code == 0, pushed.output
    assert "already has alpha--test-model, beta--test-model" in pushed.output
    assert len(repo.commits) == commits


@pytest.mark.parametrize(
    ("mean", "stderr", "ci", "shown"),
    [
        (0.5, 0.25, [0.1, 0.9], "| 0.500 ± 0.250 | [0.100, 0.900] |"),
        # Numbers that arrive as text (a metadata.json written by hand or by another tool)
        # are still numbers, as the terminal summary writes them.
        ("0.5", "0.25", ["0.1", 0.9], "| 0.500 ± 0.250 | [0.100, 0.900] |"),
        (None, float("nan"), [None, "x"], "| n/a ± n/a | [n/a, n/a] |"),
        (1, 0, "not a list", "| 1.000 ± 0.000 | n/a |"),
    ],
)
def test_card_writes_numbers_as_the_summary_does(
    mean: Any, stderr: Any, ci: Any, shown: str
) -> None:
    from pytest_modal_eval.share.card import CardEntry, render_card

    metadata = {"benchmark": "qa", "model": "m", "avg_reward": mean, "stderr": stderr, "ci": ci}
    card = render_card("org/evals", [CardEntry("qa--m", metadata, {})])
    assert shown in card, card


@pytest.mark.parametrize(
    ("recorded", "shown"),
    [
        ({"source": "model:tokenizer_config.json"}, "model's own (tokenizer_config.json)"),
        ({"source": "fallback:math"}, "fallback math"),
        ({"source": "extra_args:--chat-template"}, "given in vllm.extra_args"),
        ({"source": "unknown: model files not reachable"}, "unknown: model files not reachable"),
        (None, "unknown (an endpoint's own)"),
    ],
)
def test_card_names_the_chat_template_the_run_recorded(recorded: Any, shown: str) -> None:
    """The card says which template served the run as run_config.json records it: a model's
    own template is not "custom", and an endpoint's unknown one is not the model's own."""
    from pytest_modal_eval.share.card import CardEntry, render_card

    metadata = {"benchmark": "qa", "model": "m", "avg_reward": 1, "stderr": 0, "ci": [1, 1]}
    run_config = {"model_id": "m", "chat_template": recorded}
    card = render_card("org/evals", [CardEntry("qa--m", metadata, run_config)])
    [row] = [line for line in card.splitlines() if line.startswith("| `qa--m` | m |")]
    assert f"| {shown} |" in row, row


def test_the_mlflow_ui_is_documented_from_the_full_package() -> None:
    """The [mlflow] extra (mlflow-skinny) logs runs but ships no UI: no Flask and none of the
    UI's built pages, so docs/share.md runs `mlflow ui` from the full package instead."""
    import mlflow

    assert not (Path(mlflow.__file__).parent / "server" / "js").exists()
    page = (Path(__file__).resolve().parent.parent / "docs" / "share.md").read_text()
    commands = [line for line in page.splitlines() if line.startswith("$ ") and "mlflow ui" in line]
    assert commands and all("uvx --from mlflow mlflow ui" in line for line in commands)


#: Secrets only the project's settings make secret: neither variable's name looks secret.
GATEWAY_SECRET = "gw-MARKgateway-5e1f0a"
SIGNING_SECRET = "sign-MARKsigning-9c2b7d"


@pytest.mark.parametrize("named_by", ["option", "ini"])
def test_commands_outside_a_session_keep_the_projects_secrets_out(
    hub_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named_by: str
) -> None:
    """Hand-written run files that hold the values of the variable --api-key-env (or ini
    ``modal_eval_api_key_env``) names and of one ini ``modal_eval_secret_env`` lists: ``push``,
    ``report`` and ``show`` find them as a pytest session of the project would."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("GATEWAY", GATEWAY_SECRET)
    monkeypatch.setenv("ACME_SIGNING", SIGNING_SECRET)
    ini = "[pytest]\nmodal_eval_secret_env =\n    ACME_SIGNING\n"
    option = ["--api-key-env", "GATEWAY"] if named_by == "option" else []
    if named_by == "ini":
        ini += "modal_eval_api_key_env = GATEWAY\n"
    (project / "pytest.ini").write_text(ini)
    run = make_run(project / "outputs" / "evals", env_args={"note": f"signed {SIGNING_SECRET}"})
    for name in ("checkpoint.jsonl", "results.jsonl"):
        path = run / name
        said = f"the gateway said {json.dumps(GATEWAY_SECRET)[1:-1]} for {SIGNING_SECRET}"
        path.write_text(path.read_text().replace("What is 0 + 1?", said))
    runner = CliRunner()
    outputs = []
    for args in (["show", str(run)], ["show", str(run), "--json"]):
        shown = runner.invoke(cli_main, [*args, *option])
        assert shown.exit_code == 0, shown.output
        assert f"the gateway said {REDACTED} for {REDACTED}" in shown.output, shown.output
        assert f"signed {REDACTED}" in shown.output, shown.output
        outputs.append(shown.output)
    reported = runner.invoke(cli_main, ["report", str(run), "-o", "report.html", *option])
    assert reported.exit_code == 0, reported.output
    page = (project / "report.html").read_text()
    assert f"the gateway said {REDACTED} for {REDACTED}" in page
    pushed = runner.invoke(cli_main, ["push", str(run), "--to", "org/cli", *option])
    assert pushed.exit_code == 0, pushed.output
    assert "Hub: pushed qa--test-model" in pushed.output
    uploaded = hub_server.stored_bytes()
    assert any(f"the gateway said {REDACTED}".encode() in data for data in uploaded)
    places = [*outputs, reported.output, page, pushed.output]
    places += [data.decode(errors="replace") for data in uploaded]
    assert [place for place in places if "MARK" in place] == []

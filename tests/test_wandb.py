"""``--wandb``: the real wandb SDK in offline mode, read back with ``wandb leet inspect`` (an
offline run keeps no summary file), and no secret in anything it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BenchmarkProject, read_jsonl

API_KEY = "sk-wandb-secret-8e2f61c0d4"  # the endpoint's key, echoed back by a careless gateway
WANDB = str(Path(sys.executable).with_name("wandb"))


def inspect(run_dir: Path, *extra: str) -> Any:
    """What ``wandb leet inspect`` reads from an offline run's transaction log."""
    done = subprocess.run(
        [WANDB, "leet", "inspect", *extra, "--json", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    if "--summary" in extra:
        return json.loads(done.stdout)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.fixture
def offline(project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """W&B offline, with its own directories kept under the test's (artifact staging, cache,
    settings): everything it writes is found and searched."""
    home = tmp_path / "wandb-home"
    for name in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_DIR", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "evals-test")
    for name in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(name, str(home / name.lower()))
    return home


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_an_offline_wandb_run_per_benchmark_holds_the_figures_and_the_table(
    project: BenchmarkProject,
    offline: Path,
    monkeypatch: pytest.MonkeyPatch,
    xdist: list[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    project.server.configure(require_key=API_KEY, fail_rate=0.2, echo_auth=True, accuracy=0.6)
    tolerant = "gate: {min_avg_reward: 0.0, max_error_rate: 1.0}"
    eval_yaml = "eval: {rollouts: 2, max_retries: 0}"
    project.add("alpha", n=6, gate=tolerant, extra_yaml=eval_yaml)
    project.add("beta", n=3, gate="gate: {min_avg_reward: 0.99}", extra_yaml=eval_yaml)
    result = project.run_subprocess("--wandb", "--api-key-env", "OPENAI_API_KEY", *xdist)
    assert result.ret == 1, result.stdout.str()  # beta's gate fails
    result.stdout.fnmatch_lines(
        [
            "*shared results*",
            "W&B (offline): logged alpha--test-model, beta--test-model;"
            " upload with `wandb sync */wandb/offline-run-* */wandb/offline-run-*`",
        ]
    )
    output = project.pytester.path / "outputs" / "evals"
    runs = sorted((output / "wandb").glob("offline-run-*"))
    assert len(runs) == 2
    by_name = {inspect(run, "--summary")["name"]: run for run in runs}
    assert set(by_name) == {"alpha--test-model", "beta--test-model"}

    for name, run in by_name.items():
        benchmark = name.split("--")[0]
        [run_dir] = project.run_dirs(benchmark)
        metadata = json.loads((run_dir / "metadata.json").read_text())
        state = inspect(run, "--summary")
        summary = state["summary"]
        assert summary["reward"] == pytest.approx(metadata["avg_reward"])
        assert summary["stderr"] == pytest.approx(metadata["stderr"])
        assert [summary["ci_low"], summary["ci_high"]] == pytest.approx(metadata["ci"])
        assert summary["verdict"] == metadata["verdict"]
        assert summary["errors"] == metadata["errors"]
        assert summary["examples"] == metadata["n_evaluated"]
        config = state["config"]
        assert config["benchmark"] == benchmark and config["rollouts"] == 2
        assert config["modal_eval.run_id"] == run_dir.name
        assert config["config"]["env_args"]["path"] == f"data/{benchmark}.jsonl"
        assert state["project"] == "evals-test" and state["state"] == "finished"

        # The per-example table: one row per example, as results.jsonl has them.
        [table_file] = list(run.glob("files/media/table/per_example_*.table.json"))
        table = json.loads(table_file.read_text())
        assert table["columns"] == ["example_id", "reward", "answer", "reference", "status"]
        records = read_jsonl(run_dir / "results.jsonl")
        by_example: dict[int, list[dict[str, Any]]] = {}
        for record in records:
            by_example.setdefault(record["example_id"], []).append(record)
        assert [row[0] for row in table["data"]] == sorted(by_example)
        for example_id, reward, answer, reference, status in table["data"]:
            mine = sorted(by_example[example_id], key=lambda r: r["rollout"])
            if any(r["error"] for r in mine):
                assert (reward, status) == (None, "errored")
            else:
                assert reward == pytest.approx(sum(r["reward"] for r in mine) / len(mine))
                assert status in ("solved", "partial", "missed")
                assert answer == mine[0]["completion"][-1]["content"]
            assert reference == mine[0]["answer"]

        # The run's files as an artifact, logged with the run.
        records_of_run = inspect(run)
        kinds = {r.get("type") for r in records_of_run}
        assert "artifact" in kinds, kinds
        assert any(
            "results.jsonl" in json.dumps(r) for r in records_of_run if r.get("type") == "artifact"
        )

    # Nothing W&B wrote or staged holds a secret.
    assert any("upstream refused" in json.dumps(r) for r in read_jsonl(_results(project, "alpha")))
    for place in (output / "wandb", offline):
        for file in (p for p in place.rglob("*") if p.is_file()):
            data = file.read_bytes()
            assert API_KEY.encode() not in data, file
    assert "wandb:" not in result.stdout.str() + result.stderr.str()


def _results(project: BenchmarkProject, name: str) -> Path:
    return project.run_dirs(name)[0] / "results.jsonl"


def test_wandb_missing_is_a_clear_usage_error(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("qa", n=2)
    monkeypatch.setitem(sys.modules, "wandb", None)  # what an absent package looks like
    result = project.run("--wandb")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--wandb needs wandb, which is not installed: pip install 'pytest-modal-eval?wandb?'"]
    )


def test_a_secret_left_in_what_wandb_would_get_stops_the_log(tmp_path: Path) -> None:
    """The last check: a value the redactor knows, still in a run's figures, is refused
    before W&B is handed anything."""
    from pytest_modal_eval.exceptions import ShareError
    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.share import bundle, wandb_runs
    from tests.test_share import make_run

    run_dir = make_run(tmp_path / "out")
    run = bundle.load_run(run_dir, Redactor())
    leaked = bundle.SharedRun(
        run.paths, {**run.metadata, "verdict": API_KEY}, run.run_config, run.results_text, {}
    )
    with pytest.raises(ShareError, match="still contains the value of a secret"):
        wandb_runs.log_runs([leaked], output_dir=tmp_path, redactor=Redactor([API_KEY]))
    assert not (tmp_path / "wandb").exists()

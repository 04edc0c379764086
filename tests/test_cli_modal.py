"""deploy, status and stop against stand-ins for Modal (there is no Modal emulator).

``status`` and ``stop`` talk to Modal through :class:`ModalApps`; here an in-memory
implementation stands in for ``modal app list --json`` and ``App.lookup(...).stop()``.
``deploy`` runs the real :class:`ModalServer` with the fake ``modal`` CLI of
``test_modal_app.py``, its URL lookup pointed at the OpenAI test server, and the real local
proxy in between. Not tested here: Modal's own answers to these calls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pytest_modal_eval.cli import main
from pytest_modal_eval.cli.deploy import deploy_spec
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.model_names import model_label
from pytest_modal_eval.serving.modal.app import model_tag
from pytest_modal_eval.serving.modal.apps import AppRecord, parse_app_list
from pytest_modal_eval.serving.modal.backend import ModalServer
from tests.conftest import FakeServer
from tests.test_modal_app import FAKE_CLI, PROXY_ENV, calls

OURS = {"created-by": "pytest-modal-eval"}


class FakeApps:
    def __init__(self, records: list[AppRecord]) -> None:
        self.records = records
        self.stopped: list[str] = []

    def deployed(self) -> list[AppRecord]:
        return [r for r in self.records if r.name not in self.stopped]

    def web_url(self, name: str) -> str | None:
        return f"https://ws--{name}-serve.modal.run"

    def stop(self, name: str) -> None:
        if name == "eval-broken-0000000000":
            raise ServingError(f"could not stop Modal app {name}: refused")
        self.stopped.append(name)

    def startups(self, name: str) -> list[dict[str, Any]]:
        return [{"seconds": 95.2, "snapshot": False, "at": 0.0}] if "qwen" in name else []


def record(name: str, model: str, tags: dict[str, str] | None = None) -> AppRecord:
    all_tags = {**OURS, "model": model_tag(model), "gpu": "H100x2", "tp": "2", "dp": "1"}
    return AppRecord(
        name,
        f"ap-{name}",
        "deployed",
        1,
        "2026-11-27T06:00:00+00:00",
        all_tags if tags is None else tags,
    )


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    # deploy_spec asks the Hub which commit a model is; here a closed port answers at once.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.fixture
def apps() -> FakeApps:
    return FakeApps(
        [
            record("eval-qwen2-5-7b-instruct-aaaaaaaaaa", "Qwen/Qwen2.5-7B-Instruct"),
            record("eval-llama-bbbbbbbbbb", "meta/llama"),
            record("eval-someone-elses-app", "x/y", tags={}),  # our prefix, not our tag
            record("other-app", "x/y"),  # our tag, not our prefix
        ]
    )


def run(apps: FakeApps, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), obj={"modal_apps": apps}, input=stdin)


def test_status_lists_only_ours(apps: FakeApps) -> None:
    result = run(apps, "status", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["app"] for r in rows] == [
        "eval-qwen2-5-7b-instruct-aaaaaaaaaa",
        "eval-llama-bbbbbbbbbb",
    ]
    assert rows[0]["model"] == "Qwen--Qwen2.5-7B-Instruct" and rows[0]["tp"] == "2"
    assert rows[0]["startups"][0]["seconds"] == 95.2
    table = run(apps, "status").stdout
    assert "95s" in table and "https://ws--eval-llama" in table


def test_stop_by_model_stops_only_that_model(apps: FakeApps) -> None:
    result = run(apps, "stop", "-m", "Qwen/Qwen2.5-7B-Instruct", "-y")
    assert result.exit_code == 0, result.output
    assert apps.stopped == ["eval-qwen2-5-7b-instruct-aaaaaaaaaa"]


def test_an_apps_model_tag_is_the_models_label_which_stop_matches(
    apps: FakeApps, tmp_path: Path
) -> None:
    """The tag ``status`` shows is the spelling test ids and run listings use, so ``stop -m``
    finds an app by the id however it is written (here with a trailing ``/``)."""
    yaml = tmp_path / "b.yaml"
    yaml.write_text("env_id: file-qa\n")
    spec = deploy_spec("org/some-model", yaml, [])
    assert spec.tags()["model"] == model_label("org/some-model") == "org--some-model"
    apps.records.append(AppRecord(spec.app_name(), "ap-x", "deployed", 1, "", spec.tags()))
    result = run(apps, "stop", "-m", "org/some-model/", "-y")
    assert result.exit_code == 0, result.output
    assert apps.stopped == [spec.app_name()]


def test_stop_all_never_touches_other_apps(apps: FakeApps) -> None:
    assert run(apps, "stop", "--all", stdin="n\n").exit_code == 1  # declined: aborted
    assert apps.stopped == []
    assert run(apps, "stop", "--all", "-y").exit_code == 0
    assert apps.stopped == ["eval-qwen2-5-7b-instruct-aaaaaaaaaa", "eval-llama-bbbbbbbbbb"]


def test_stop_by_benchmark_matches_the_deployed_name(apps: FakeApps, tmp_path: Path) -> None:
    yaml = tmp_path / "b.yaml"
    yaml.write_text("env_id: file-qa\ninfra: {gpu: 'H100:2'}\nvllm: {tensor_parallel_size: 2}\n")
    name = deploy_spec("Qwen/Qwen2.5-7B-Instruct", yaml, []).app_name()
    apps.records.append(record(name, "Qwen/Qwen2.5-7B-Instruct"))
    result = run(apps, "stop", "-m", "Qwen/Qwen2.5-7B-Instruct", "-b", str(yaml), "-y")
    assert result.exit_code == 0, result.output
    assert apps.stopped == [name]


def test_stop_usage_and_failures(apps: FakeApps) -> None:
    assert run(apps, "stop").exit_code == 2
    assert run(apps, "stop", "-m", "a/b", "--all").exit_code == 2
    assert "nothing to stop" in run(apps, "stop", "-m", "nobody/none", "-y").stdout
    apps.records.append(record("eval-broken-0000000000", "b/b"))
    result = run(apps, "stop", "-m", "b/b", "-y")
    assert result.exit_code == 1 and "refused" in result.output


def test_parse_app_list() -> None:
    text = json.dumps(
        [
            {
                "app_id": "ap-1",
                "description": "eval-x-1",
                "state": "deployed",
                "tasks": "2",
                "created_at": "2026-11-27 06:00",
                "stopped_at": None,
            },
            {
                "app_id": "ap-2",
                "description": "eval-y-2",
                "state": "stopped",
                "tasks": "0",
                "created_at": "2026-11-26 06:00",
                "stopped_at": "2026-11-26 07:00",
            },
        ]
    )
    first, second = parse_app_list(text)
    assert (first.name, first.tasks, first.live) == ("eval-x-1", 2, True)
    assert second.live is False
    assert not AppRecord("eval-x-1", "ap-1", "deployed", 0, "", {}).ours


def test_deploy_deploys_waits_and_leaves_it_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_server: FakeServer
) -> None:
    script = tmp_path / "fake_modal.py"
    script.write_text(FAKE_CLI)
    monkeypatch.setenv("FAKE_MODAL_RECORD", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    for name, value in PROXY_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ModalServer, "_web_url", lambda self, name: fake_server.url)
    monkeypatch.setattr(ModalServer, "_read_template_dict", lambda self, name: {"source": "model"})
    yaml = tmp_path / "b.yaml"
    yaml.write_text("env_id: file-qa\ninfra: {gpu: 'L4'}\n")

    result = CliRunner().invoke(
        main,
        [
            "deploy",
            "-m",
            "test-model",
            "-b",
            str(yaml),
            "--warm",
            "--eval-output-dir",
            str(tmp_path / "out"),
        ],
        obj={"modal_server_options": {"modal_cli": [sys.executable, str(script)]}},
    )
    assert result.exit_code == 0, result.output
    spec = deploy_spec("test-model", yaml, [], warm=True)
    assert spec.profile.infra.min_containers == 1
    argv = [c["argv"] for c in calls(tmp_path / "calls.jsonl")]
    assert argv[0][:3] == ["deploy", "-m", "pytest_modal_eval.serving.modal.app"]
    assert argv[0][-1] == spec.app_name()
    assert not any(a[:2] == ["app", "stop"] for a in argv)  # left running
    assert f"url: {fake_server.url}" in result.stdout
    assert "start-up: deploy" in result.stdout and "until_serving" in result.stdout
    assert f"pytest-modal-eval stop -m test-model -b {yaml}" in result.stdout


def test_deploy_without_token_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "none.toml"))
    yaml = tmp_path / "b.yaml"
    yaml.write_text("env_id: file-qa\n")
    result = CliRunner().invoke(main, ["deploy", "-m", "a/b", "-b", str(yaml)])
    assert result.exit_code == 1 and "modal token new" in result.output
    bad = CliRunner().invoke(main, ["deploy", "-m", "a/b", "-b", str(yaml), "--override", "x=1"])
    assert bad.exit_code == 2 and "unknown namespace" in bad.output

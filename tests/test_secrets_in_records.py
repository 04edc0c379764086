"""Secret settings never reach a run's records, yet still change its answer key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_modal_eval.redact import (
    REDACTED,
    keyed,
    mask_args,
    mask_config,
    mask_mapping,
    mask_profile,
    redact_args,
)
from pytest_modal_eval.runs.resume import answer_fields, canonical_hash
from tests.conftest import BenchmarkProject

SECRET = "vllm-key-4f9c2e81d7"


def _fields(env_args: dict[str, object], extra_args: list[str]) -> dict[str, object]:
    return answer_fields(
        model="m",
        env_id="file-qa",
        env_args=env_args,
        dataset_fingerprint="d",
        sampling={},
        rollouts=1,
        chat_template=None,
        vllm={"extra_args": extra_args},
        endpoint_identity=None,
    )


def test_secret_values_are_keyed_not_written() -> None:
    fields = _fields(
        {"api_key": "env-secret-123456", "nested": {"password": "pw-987654321"}, "n": 3},
        ["--api-key", SECRET, f"--hf-token={SECRET}", "--max-model-len", "512"],
    )
    text = json.dumps(fields)
    assert SECRET not in text and "env-secret-123456" not in text and "pw-987654321" not in text
    assert fields["env_args"] == {
        "api_key": keyed("env-secret-123456"),
        "nested": {"password": keyed("pw-987654321")},
        "n": 3,
    }
    # Flags that only look alike keep their values.
    assert mask_args(["--max-tokens", "5", "--tokenizer", "t"]) == [
        "--max-tokens", "5", "--tokenizer", "t",
    ]  # fmt: skip
    assert mask_mapping({"max_tokens": 5, "token_usage": True}) == {
        "max_tokens": 5, "token_usage": True,
    }  # fmt: skip


def test_a_logged_command_shows_no_secret_flag_value() -> None:
    cmd = ["vllm", "serve", "m", "--hf-token", SECRET, f"--api-key={SECRET}", "--max-tokens", "5"]
    assert redact_args(cmd) == [
        "vllm", "serve", "m", "--hf-token", REDACTED, f"--api-key={REDACTED}", "--max-tokens", "5",
    ]  # fmt: skip


def test_a_changed_secret_changes_the_key() -> None:
    one = canonical_hash(_fields({"api_key": "first-secret-1"}, []))
    two = canonical_hash(_fields({"api_key": "second-secret-2"}, []))
    assert one != two
    assert one == canonical_hash(_fields({"api_key": "first-secret-1"}, []))
    assert canonical_hash(_fields({}, ["--api-key", "a-secret-1"])) != canonical_hash(
        _fields({}, ["--api-key", "a-secret-2"])
    )


def test_mask_profile_masks_the_server_profiles_extra_args() -> None:
    profile = {"backend": "local", "model": "m", "vllm": {"extra_args": [f"--api-key={SECRET}"]}}
    assert SECRET not in json.dumps(mask_profile(profile))


def test_mask_config_masks_env_args_and_extra_args() -> None:
    config = {"env_args": {"token": SECRET}, "vllm": {"extra_args": ["--api-key", SECRET]}}
    assert SECRET not in json.dumps(mask_config(config))


def test_a_run_writes_no_secret_setting(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("alpha", n=3, extra_yaml=f"vllm: {{extra_args: ['--api-key', '{SECRET}']}}\n")
    result = project.run()
    assert result.ret == 0, result.stdout.str()
    [run_dir] = project.run_dirs("alpha")
    written = [p for p in Path(project.pytester.path).rglob("*") if p.is_file()]
    records = [p for p in written if ".pytest_cache" in p.parts or run_dir in p.parents]
    assert any(p.name == "run_config.json" for p in records)
    assert any(".pytest_cache" in p.parts for p in records)
    for path in records:
        assert SECRET.encode() not in path.read_bytes(), path
    # The key still holds a stand-in, which changes with the secret.
    config = json.loads((run_dir / "run_config.json").read_text())
    assert config["answer_fields"]["vllm"]["extra_args"] == ["--api-key", keyed(SECRET)]

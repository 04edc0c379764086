"""Secret settings never reach a run's records, yet still change its answer key."""

from __future__ import annotations

import json
import textwrap
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
from pytest_modal_eval.runs.answer_key import answer_fields, canonical_hash
from pytest_modal_eval.runs.local_key import local_key
from tests.conftest import BenchmarkProject, read_jsonl

SECRET = "vllm-key-4f9c2e81d7"
#: An output directory's key (``runs.local_key``) for the unit tests' stand-ins.
KEY = bytes(range(32))


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
        secret_key=KEY,
    )


def test_secret_values_are_keyed_not_written() -> None:
    fields = _fields(
        {"api_key": "env-secret-123456", "nested": {"password": "pw-987654321"}, "n": 3},
        ["--api-key", SECRET, f"--hf-token={SECRET}", "--max-model-len", "512"],
    )
    text = json.dumps(fields)
    assert SECRET not in text and "env-secret-123456" not in text and "pw-987654321" not in text
    assert fields["env_args"] == {
        "api_key": keyed("env-secret-123456", KEY),
        "nested": {"password": keyed("pw-987654321", KEY)},
        "n": 3,
    }
    # Flags that only look alike keep their values.
    assert mask_args(["--max-tokens", "5", "--tokenizer", "t"], KEY) == [
        "--max-tokens", "5", "--tokenizer", "t",
    ]  # fmt: skip
    assert mask_mapping({"max_tokens": 5, "token_usage": True}, KEY) == {
        "max_tokens": 5, "token_usage": True,
    }  # fmt: skip


def test_secrets_are_keyed_at_any_depth_under_plural_names_and_in_urls() -> None:
    env_args = {
        "judges": [{"model": "j1", "api_key": "list-secret-1"}, {"model": "j2"}],
        "api_keys": ["plural-secret-1", "plural-secret-2"],
        "secrets": {"judge": "plural-secret-3"},
        "session_cookie": "cookie-secret-1",
        "judge_base_url": "https://u:url-secret-1@host/v1",
        "mirrors": [{"url": "http://bob:url-secret-2@10.0.0.1:8000/v1"}],
        "path": "data/qa.jsonl",
        "api_key_var": "JUDGE_API_KEY",
    }
    masked = mask_mapping(env_args, KEY)
    assert "secret-" not in json.dumps(masked)
    assert masked == {
        "judges": [{"model": "j1", "api_key": keyed("list-secret-1", KEY)}, {"model": "j2"}],
        "api_keys": keyed(repr(["plural-secret-1", "plural-secret-2"]), KEY),
        "secrets": keyed(repr({"judge": "plural-secret-3"}), KEY),
        "session_cookie": keyed("cookie-secret-1", KEY),
        "judge_base_url": f"https://{keyed('u:url-secret-1', KEY)}@host/v1",
        "mirrors": [{"url": f"http://{keyed('bob:url-secret-2', KEY)}@10.0.0.1:8000/v1"}],
        "path": "data/qa.jsonl",
        "api_key_var": "JUDGE_API_KEY",
    }


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"judges": [{"api_key": "list-secret-1"}]}, {"judges": [{"api_key": "list-secret-2"}]}),
        ({"api_keys": ["plural-secret-1"]}, {"api_keys": ["plural-secret-2"]}),
        ({"url": "https://u:url-secret-1@host/v1"}, {"url": "https://u:url-secret-2@host/v1"}),
    ],
    ids=["list", "plural", "url"],
)
def test_a_changed_hidden_secret_changes_the_key(
    first: dict[str, object], second: dict[str, object]
) -> None:
    assert canonical_hash(_fields(first, [])) != canonical_hash(_fields(second, []))


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
    assert SECRET not in json.dumps(mask_profile(profile, KEY))


def test_mask_config_masks_env_args_and_extra_args() -> None:
    config = {"env_args": {"token": SECRET}, "vllm": {"extra_args": ["--api-key", SECRET]}}
    assert SECRET not in json.dumps(mask_config(config, KEY))


#: An environment that takes credentials in ``env_args`` (as judge-backed ones do) and asks
#: file-qa's questions.
SECRET_QA = """
import sys

from pytest_modal_eval.envs.file_qa import load_environment as file_qa


def load_environment(path, fail=0, **credentials):
    if fail:  # as an environment that cannot start prints what it was given
        print(f"cannot start with {credentials}", file=sys.stderr)
        raise RuntimeError("the environment failed to load")
    return file_qa(path)
"""


def secret_qa_benchmark(project: BenchmarkProject, env_args: str, rest: str = "") -> None:
    """``evals/alpha.yaml`` running :data:`SECRET_QA` on ``alpha``'s data (``project.add``
    it first), with more ``env_args`` lines and more top-level YAML."""
    project.pytester.makepyfile(secret_qa=SECRET_QA)
    project.pytester.syspathinsert()  # for an in-process run (a subprocess runs in its folder)
    indented = textwrap.indent(textwrap.dedent(env_args), "  ")
    (project.evals / "alpha.yaml").write_text(
        "env_id: secret-qa\nenv_args:\n"
        f"  path: {project.evals / 'data' / 'alpha.jsonl'}\n{indented}"
        + textwrap.dedent(rest)
        + "eval: {max_retries: 0}\ngate: {min_avg_reward: 0.5}\n"
    )


#: Secrets of every shape a benchmark's ``env_args`` may give them, each marked: a YAML number
#: under a secret-named key, a ``{name, value}`` pair, an ``Authorization`` header in a list of
#: pairs, a value of several lines (one of them too short to be a secret alone).
NUMBER = 31415926535
SHAPES = f"""\
judges: [{{model: j1, api_key: {SECRET}-list}}]
api_keys: [{SECRET}-plural]
judge_base_url: "https://judge:{SECRET}-url@judge.example/v1"
judge: {{api_key: {NUMBER}}}
env: [{{name: SEARCH_API_KEY, value: pair-MARKpair-0001}}]
headers: [[Authorization, "Bearer bearer-MARKbearer-0002"]]
private_key: "-----BEGIN KEY-----\\nline-MARKline-0003\\nMARK\\n-----END KEY-----"
"""
#: How the questions quote them (the question of a record, the report's prompt column).
QUOTED = (
    f"{NUMBER} pair-MARKpair-0001 bearer-MARKbearer-0002 line-MARKline-0003 "
    "'-----BEGIN KEY-----\nline-MARKline-0003\nMARK\n-----END KEY-----'"
)


def test_a_run_writes_no_secret_setting_of_any_shape(project: BenchmarkProject) -> None:
    """Every file the run wrote (records, the report, logs, the resume index) and every line
    it printed is free of the secrets, whatever their shape, although each question quotes
    them; an environment that fails to load and prints its settings shows none either. The
    answer key still holds stand-ins."""
    rows = [{"question": f"What is {i} + 3? ({QUOTED})", "answer": str(i + 3)} for i in range(3)]
    project.add("alpha", rows=rows)
    secret_qa_benchmark(project, SHAPES)
    beta = (
        (project.evals / "alpha.yaml").read_text().replace("env_args:\n", "env_args:\n  fail: 1\n")
    )
    (project.evals / "beta.yaml").write_text(beta)
    result = project.run("-v", "-rA")
    out = "\n".join(result.outlines + result.errlines)
    assert "'judge': {'api_key': [redacted]}" in out, out  # beta's environment says it
    [run_dir] = project.run_dirs("alpha")
    written = [p for p in Path(project.pytester.path).rglob("*") if p.is_file()]
    records = [p for p in written if not p.is_relative_to(project.evals) and p.suffix != ".py"]
    assert {"run_config.json", "results.jsonl", "report.html"} <= {p.name for p in records}
    assert any(".pytest_cache" in p.parts for p in records)
    for name, data in [*((str(p), p.read_bytes()) for p in records), ("terminal", out.encode())]:
        for secret in (SECRET.encode(), b"MARK", str(NUMBER).encode()):
            assert secret not in data, name
    question = read_jsonl(run_dir / "results.jsonl")[0]["prompt"][-1]["content"]
    assert question == f"What is 0 + 3? ({REDACTED} {REDACTED} {REDACTED} {REDACTED} '{REDACTED}')"
    # The key still holds stand-ins, which change with the secrets.
    fields = json.loads((run_dir / "run_config.json").read_text())["answer_fields"]
    key = local_key(project.pytester.path / "outputs" / "evals")
    assert fields["env_args"]["judges"] == [
        {"model": "j1", "api_key": keyed(f"{SECRET}-list", key)}
    ]
    assert fields["env_args"]["api_keys"] == keyed(repr([f"{SECRET}-plural"]), key)
    assert fields["env_args"]["judge_base_url"] == (
        f"https://{keyed(f'judge:{SECRET}-url', key)}@judge.example/v1"
    )
    assert fields["env_args"]["judge"] == {"api_key": keyed(repr(NUMBER), key)}
    assert fields["env_args"]["env"] == [
        {"name": "SEARCH_API_KEY", "value": keyed("pair-MARKpair-0001", key)}
    ]
    assert fields["env_args"]["headers"] == [
        ["Authorization", keyed("Bearer bearer-MARKbearer-0002", key)]
    ]


def test_a_short_secret_settings_stand_in_gives_nothing_away(
    project: BenchmarkProject, tmp_path: Path
) -> None:
    """``run_config.json`` (which ``push`` uploads) holds a stand-in for ``password: "731"``
    that no one can compute from the secret alone: the same secret gives another stand-in
    under another output directory's key, and that key is kept beside the runs, readable by
    its owner only, in no run directory. The session says once that the secret is too short to
    be searched for in text. (That one key gives one stand-in per secret, so the
    run is continued while the secret stays, is :func:`test_a_changed_secret_changes_the_key`.)"""
    from pytest_modal_eval.redact import STAND_IN
    from pytest_modal_eval.runs.local_key import KEY_FILE

    project.add("alpha", n=2)
    secret_qa_benchmark(project, 'password: "731"\n')
    output = project.pytester.path / "outputs" / "evals"
    elsewhere = tmp_path / "elsewhere"
    result = project.run()
    assert result.ret == 0
    # Said once, naming the setting, not its value.
    warned = [line for line in result.outlines if "SecretWarning" in line]
    assert len(warned) == 1 and "env_args.password: its value is 3 characters" in warned[0]
    assert "731" not in warned[0]
    assert project.run("--eval-output-dir", str(elsewhere)).ret == 0
    [run_dir] = project.run_dirs("alpha")
    [other_dir] = [p.parent for p in elsewhere.glob("*/*/run_config.json")]

    def written(run: Path) -> tuple[str, str]:
        config = json.loads((run / "run_config.json").read_text())
        return config["config"]["env_args"]["password"], config["answer_hash"]

    (mine, my_hash), (theirs, their_hash) = written(run_dir), written(other_dir)
    assert STAND_IN.fullmatch(mine) and STAND_IN.fullmatch(theirs)
    assert mine != theirs and my_hash != their_hash
    key = output / KEY_FILE
    assert key.stat().st_mode & 0o777 == 0o600
    assert not any(p.name == KEY_FILE for p in run_dir.rglob("*"))
    assert keyed("731", local_key(output)) == mine

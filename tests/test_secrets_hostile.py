"""Secrets against outputs pytest and the command line make outside test reports: warnings,
``--override`` values, a model that says the key, the ``show`` command, a server's log written
by the xdist controller."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pytest_modal_eval.cli import main
from pytest_modal_eval.config.overrides import parse_override
from pytest_modal_eval.exceptions import OptionError
from pytest_modal_eval.redact import REDACTED
from tests.conftest import BenchmarkProject, FakeServer, read_jsonl
from tests.test_deployments import LocalRuns, local  # noqa: F401 (the fixture)
from tests.test_resume import start_pytest
from tests.test_run_files import outputs, write_run
from tests.test_secrets_in_records import secret_qa_benchmark

KEY = "sk-hostile-MARKhostile-7f3a"


def _leaks(project: BenchmarkProject, out: str) -> list[str]:
    root = project.pytester.path
    places = [
        (p.relative_to(root).as_posix(), p.read_bytes())
        for p in root.rglob("*")
        if p.is_file() and not p.is_relative_to(project.evals) and p.suffix != ".py"
    ]
    places.append(("terminal", out.encode()))
    return [name for name, data in places if b"MARKhostile" in data]


WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])


def _session(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch, args: list[str], **files: str
) -> str:
    """The output of a session with the key in ``OPENAI_API_KEY`` and ``files`` (Python
    modules by name) beside a small benchmark."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    project.add("alpha", n=2)
    project.pytester.makepyfile(**files)
    result = project.run_subprocess(*args)
    return "\n".join(result.outlines + result.errlines)


@WORKERS
def test_a_warning_holding_the_key_is_redacted_in_the_summary(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    warns = """
        import os, warnings

        def test_gateway_warns():
            warnings.warn(f"gateway answered for {os.environ['OPENAI_API_KEY']}")
        """
    out = _session(
        project, monkeypatch, ["-rA", "-W", "always::UserWarning", *workers], test_warns=warns
    )
    assert "warnings summary" in out and "gateway answered for [redacted]" in out, out
    assert _leaks(project, out) == []


@pytest.mark.parametrize(
    "override",
    [
        f"env_args.api_key={KEY}",
        f"env_args.judge.api_key={KEY}",
        f"env_args.judge={{model: j, api_key: {KEY}}}",
        f"env_args.judge_base_url=https://bob:{KEY}@judge.example/v1",
        f"vllm.extra_args=[--api-key, {KEY}]",
        f"vllm.extra_args=[--hf-token={KEY}]",
        f"env_args.env=[{{name: SEARCH_API_KEY, value: {KEY}}}]",  # a pair under any name
        f"env_args.tool.headers=[[Authorization, 'Bearer {KEY}']]",
        f"env_args.api_key=[{KEY}",  # not valid YAML: the error must not quote it either
    ],
)
def test_a_secret_override_is_refused_without_echo(override: str) -> None:
    with pytest.raises(OptionError, match="not accepted on the command line") as info:
        parse_override(override)
    assert "MARKhostile" not in str(info.value)


@pytest.mark.parametrize(
    "override",
    ["env_args.judge.api_key_var=ACME_KEY", "vllm.extra_args=[--max-model-len, '4096']"],
)
def test_settings_that_name_a_secret_are_accepted(override: str) -> None:
    assert parse_override(override)[0] == override.partition("=")[0]


def test_a_secret_override_stops_the_session_without_echo(project: BenchmarkProject) -> None:
    project.add("alpha", n=2)
    result = project.run("--override", f"env_args.api_key={KEY}")
    out = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "--override env_args.api_key: secrets are not accepted" in out, out
    assert project.server.stats().get("chat_requests", 0) == 0
    assert _leaks(project, out) == []


def test_a_model_that_says_the_key(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    project.server.configure(replies={"What is": f"my key is {KEY}"}, require_key=KEY)
    project.add("alpha", n=2)
    result = project.run("-v")
    out = "\n".join(result.outlines + result.errlines)
    [run_dir] = project.run_dirs("alpha")
    shown = project.pytester.run("pytest-modal-eval", "show", str(run_dir))
    out += "\n".join(shown.outlines + shown.errlines)
    assert "my key is [redacted]" in out, out
    assert _leaks(project, out) == []


@WORKERS
def test_an_internal_error_holding_the_key_is_redacted(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    conftest = """
        import os

        def pytest_collection_modifyitems(items):
            raise RuntimeError(f"gateway said {os.environ['OPENAI_API_KEY']}")
        """
    out = _session(project, monkeypatch, workers, conftest=conftest)
    assert "INTERNALERROR" in out and "gateway said [redacted]" in out, out
    assert _leaks(project, out) == []


@WORKERS
def test_a_benchmarks_secret_setting_stays_out_of_the_servers_log(
    local: LocalRuns,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
    workers: list[str],
) -> None:
    """A secret only a benchmark's ``env_args`` holds, and a question quoting it: the local
    vLLM logs each request's body, and the log is written by the process that owns the
    servers -- under ``-n 2`` the controller, which collects no benchmark. The value is
    ``[redacted]`` in ``vllm.log`` all the same."""
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    rows = [{"question": f"What is {i} + 3? (key {KEY})", "answer": str(i + 3)} for i in range(2)]
    local.project.add("alpha", rows=rows)
    secret_qa_benchmark(
        local.project, f"api_key: {KEY}\n", "vllm: {extra_args: [--enable-log-requests]}\n"
    )
    result = local.run(*workers)
    out = "\n".join(result.outlines + result.errlines)
    result.assert_outcomes(passed=1)
    [server_logs] = local.server_log_dirs()
    log = (server_logs / "vllm.log").read_text()
    assert log.count(f"(key {REDACTED})") == 2, log  # both prompts, as the server logged them
    assert _leaks(local.project, out) == []


def test_the_interrupt_notice_is_redacted_and_escaped() -> None:
    """The lines Ctrl-C leaves behind pass the redactor and the terminal escape, as every
    other line the plugin prints."""
    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.report.interrupted import InterruptNotice

    written: list[str] = []

    class Reporter:
        def write_line(self, line: str) -> None:
            written.append(line)

    secret = "sk-interrupt-SECRET-0123456789"
    notice = InterruptNotice(None, [], Redactor([secret]))  # type: ignore[arg-type]
    notice._write(Reporter(), f"alpha (\x1b]52;c;aGk=\x07m): {secret}")  # type: ignore[arg-type]
    (line,) = written
    assert secret not in line and "[redacted]" in line
    assert "\x1b" not in line and "\x07" not in line


def test_answers_journaled_before_a_kill_hold_no_key(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model says the key in every answer; each example's second rollout is held, so its
    first answer waits in ``answers.journal`` when pytest is killed. The journal holds it
    redacted, and the resumed run replays it instead of asking again."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    project.server.configure(
        replies={"What is": f"my key is {KEY}"}, require_key=KEY, hold_repeats=600
    )
    project.add("alpha", n=4, extra_yaml="eval: {max_concurrent: 2, rollouts: 2}\n")
    process = start_pytest(project)
    try:
        journal = wait_for_journal(project, "alpha")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    answered = project.server.stats()["completed_requests"]
    stored = journal.read_bytes()
    assert stored.count(b"my key is [redacted]") == answered >= 2, stored
    assert b"MARKhostile" not in stored

    project.server.configure(hold_repeats=0.0, reset_stats=True)
    result = project.run()
    out = "\n".join(result.outlines + result.errlines)
    assert f"{answered} answers received before the interruption reused" in out, out
    assert project.server.stats()["chat_requests"] == 2 * 4 - answered
    [run_dir] = project.run_dirs("alpha")
    completions = json.dumps([r["completion"] for r in read_jsonl(run_dir / "results.jsonl")])
    assert completions.count("my key is [redacted]") == 2 * 4, completions
    assert _leaks(project, out) == []


def wait_for_journal(project: BenchmarkProject, name: str) -> Path:
    """``name``'s answer journal once every request slot is held and every answer the server
    sent is in it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stats = project.server.stats()
        for run in project.run_dirs(name):
            journal = run / "answers.journal"
            held, sent = stats.get("in_flight", 0), stats.get("completed_requests", 0)
            # Each record starts with its JSON header line, {"example": ...}.
            if held == 2 and journal.exists() and journal.read_bytes().count(b'{"ex') == sent:
                return journal
        time.sleep(0.05)
    raise AssertionError(f"no answer was journaled: {project.server.stats()}")


def test_every_commands_error_line_is_redacted_and_escaped(tmp_path: Path) -> None:
    """A run file that quotes the key and a terminal escape in a bad field: each command's one
    error line names the field with ``[redacted]`` and the escape shown, never obeyed."""
    run = write_run(tmp_path / "evals", "r1", outputs())
    results = run / "results.jsonl"
    hostile = json.dumps(f"\x1b]0;pwned\x07 {KEY}")
    results.write_text(results.read_text().replace('"reward": 1.0', f'"reward": {hostile}', 1))
    commands = {
        "show": ["show", str(run)],
        "report": ["report", str(run), "-o", str(tmp_path / "r.html")],
        "compare": ["compare", str(run), str(run)],
        "push": ["push", str(run), "--to", "org/evals"],
    }
    for name, args in commands.items():
        result = CliRunner().invoke(main, args, env={"OPENAI_API_KEY": KEY, "HF_TOKEN": "hf_x"})
        assert result.exit_code != 0, (name, result.output)
        (line,) = result.output.strip().split("\n")
        assert "field reward:" in line and "\\x1b]0;pwned\\x07 [redacted]" in line, (name, line)
        assert "MARKhostile" not in line and "\x1b" not in line, (name, line)


def test_doctor_shows_a_hostile_model_list_redacted(
    fake_server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint whose model list names the caller's key (a careless gateway): ``doctor``
    quotes the list with the key replaced, as text and as JSON."""
    monkeypatch.chdir(tmp_path)  # a project of no benchmarks
    fake_server.configure(require_key=KEY, echo_auth=True)
    args = ["doctor", "--no-modal", "--base-url", fake_server.base_url, "--model", "other"]
    for extra in ([], ["--json"]):
        result = CliRunner().invoke(main, [*args, *extra], env={"OPENAI_API_KEY": KEY})
        assert result.exit_code == 1, result.output
        assert "echo Bearer [redacted]" in result.output, result.output
        assert "MARKhostile" not in result.output


def test_a_secret_learned_after_the_local_server_started_stays_out_of_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session learns some secrets once the local vLLM is up (a judge's key variable, as
    its benchmark starts); its log supervisor hears of each and keeps it out of ``vllm.log``
    from then on, as vLLM logs a request quoting it."""
    import httpx

    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.serving.endpoint import ServerProfile
    from pytest_modal_eval.serving.vllm.local import LocalVllmServer
    from tests.support.vllm_check import FAKE_VLLM_ROOT

    monkeypatch.setenv("PYTHONPATH", str(FAKE_VLLM_ROOT))
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "0")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    profile = ServerProfile.from_json(
        {
            "backend": "local",
            "model": str(model),
            "infra": {},
            "vllm": {"extra_args": ["--enable-log-requests"]},
        }
    )
    redactor = Redactor()
    server = LocalVllmServer(
        profile, logs_dir=tmp_path / "logs", python=sys.executable, redactor=redactor
    )
    endpoint = server.start()
    try:
        redactor.learn([KEY])
        body = {
            "model": endpoint.model,
            "messages": [{"role": "user", "content": f"the judge's key is {KEY}"}],
        }
        httpx.post(f"{endpoint.base_url}/chat/completions", json=body, timeout=30)
        log = server.log_path
        deadline = time.monotonic() + 30
        while "judge's key is" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.stop()
    text = log.read_text()
    assert f"the judge's key is {REDACTED}" in text, text
    assert "MARKhostile" not in text
    assert redactor._listeners == []  # a stopped server hears of nothing more


@pytest.mark.parametrize("word", ["example_id", "avg_reward", "assistant", "test-model"])
def test_a_secret_that_is_a_word_the_plugin_writes_breaks_nothing(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch, word: str
) -> None:
    """``MY_PASSWORD=example_id``: the records, the checkpoint a resume reads, metadata.json and
    what ``runs`` and ``show --json`` print keep the plugin's own names (and the chat's roles);
    the session says once that such a secret cannot be kept out of text. One that is a part of
    the run directory's path (the model's name, ``test-model`` here) still lets the session
    write its report, which reads the run from the path the benchmark reported, redacted."""
    monkeypatch.setenv("MY_PASSWORD", word)
    project.add("alpha", n=3)
    first = project.run()
    assert first.ret == 0, first.stdout.str()
    first.stdout.fnmatch_lines(["*SecretWarning: MY_PASSWORD: its value is a plain word*"])
    # Resumed: the checkpoint is read back, every example found finished.
    again = project.run()
    assert again.ret == 0, again.stdout.str()
    [run_dir] = project.run_dirs("alpha")
    for name in ("checkpoint.jsonl", "results.jsonl"):
        for record in read_jsonl(run_dir / name):
            assert REDACTED not in record and {"example_id", "reward"} <= set(record)
            assert [m["role"] for m in record["completion"]] == ["assistant"]
    assert (project.pytester.path / "outputs" / "evals" / "report.html").is_file()
    again.stdout.fnmatch_lines(["evaluation report: *report.html*"])
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["avg_reward"] == 1.0 and REDACTED not in metadata
    output = str(project.pytester.path / "outputs" / "evals")
    runs = CliRunner().invoke(main, ["runs", "--json", "--eval-output-dir", output])
    assert runs.exit_code == 0, runs.output
    [listed] = json.loads(runs.stdout)
    assert listed["avg_reward"] == 1.0 and REDACTED not in listed


def test_a_run_directory_reported_redacted_is_found_again(tmp_path: Path) -> None:
    """What the session's report and its push read a run from: the ``run_dir`` a benchmark
    reported, with ``[redacted]`` for a secret that is a part of the path, is the one run
    directory that fits; with none or several, the path as it was shown (whose error says
    so)."""
    import types

    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.runs.paths import reported_run_dir
    from pytest_modal_eval.share.controller import SessionShare

    run = write_run(tmp_path / "evals", "r1", outputs(), slug="org--secret-model")
    shown = Redactor(["secret-model"]).text(str(run))
    assert REDACTED in shown
    assert reported_run_dir(shown) == run
    assert reported_run_dir(str(run)) == run
    share = SessionShare(None, False, None, False, tmp_path, Redactor())
    report = types.SimpleNamespace(when="call", user_properties=[("run_dir", shown)])
    share.add(report)  # type: ignore[arg-type]
    assert list(share.run_dirs) == [str(run)]
    write_run(tmp_path / "evals", "r1", outputs(), slug="org--other-model")
    assert reported_run_dir(shown) == Path(shown)  # two runs fit

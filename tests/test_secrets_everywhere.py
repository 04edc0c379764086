"""No secret value in anything a session writes, prints or uploads, whatever a server echoes.

The end-to-end test runs pytest against a hostile endpoint: it answers some questions with HTTP
500 and the request's ``Authorization`` header in the error message and in its response
headers, as careless gateways do. The key (``--api-key-env AZURE_OPENAI_KEY``) holds quotes
and backslashes, so it also travels JSON- and repr-escaped. Other secrets reach the prompts
through the dataset: the value of a variable listed in ini ``modal_eval_secret_env``, a
secret-named ``env_args`` value, and the value of a judge's ``api_key_var``. Every secret holds
a marker word that survives every encoding, and every byte under the project (run files, logs,
report, JUnit XML, ``.pytest_cache``, ``--log-file``), the captured terminal output, what the
local Hub stores and the MLflow store are searched for it.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import re
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.exceptions import ServerStartError, ShareError
from pytest_modal_eval.redact import REDACTED, Redactor, is_secret_name, redact, secret_forms
from pytest_modal_eval.report.redaction import RedactedOutput
from pytest_modal_eval.serving.broker import Broker, BrokerClient
from pytest_modal_eval.serving.deployments import Deployments
from tests.conftest import HUB_TOKEN, BenchmarkProject
from tests.support.hub_server import HubServer
from tests.test_secrets_in_records import secret_qa_benchmark

#: Each secret's marker: a word found in any encoding of the secret (JSON, repr, URL, HTML).
API_KEY = 'az-key "quoted" \\back\\slash a/b<c>&d MARKapikey'
INI_SECRET = "ini-listed-MARKinivar-2b7e"
ENV_ARGS_SECRET = "env-args-MARKenvargs-91f0"
JUDGE_SECRET = "judge-MARKjudgekey-5c3d"
MARKERS = [b"MARKapikey", b"MARKinivar", b"MARKenvargs", b"MARKjudgekey", HUB_TOKEN.encode()]


@pytest.mark.parametrize(
    "name", ["AZURE_OPENAI_KEY", "OPENAI_KEY", "MISTRAL_KEY", "ANTHROPIC_API_KEY", "KEY"]
)
def test_environment_style_key_names_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["answer_key", "sort_key", "api_key_var", "KEYBOARD", "MONKEY"])
def test_settings_named_key_are_not(name: str) -> None:
    assert not is_secret_name(name)


def test_the_redactor_knows_the_sessions_credentials() -> None:
    environ = {
        "MODAL_TOKEN_ID": "ak-modal-token-id",
        "MODAL_PROXY_TOKEN_ID": "wk-proxy-token-id",
        "VLLM_API_KEY": "vllm-api-key-123",
        "HUGGING_FACE_HUB_TOKEN": "hf_old_style_token",
        "MY_GATEWAY": "gateway-credential-1",  # named by --api-key-env or the ini key
        "HOME": "/home/someone-long",
        "SHORT_TOKEN": "abc",  # too short to search for
    }
    redactor = Redactor.from_environ(environ, names=["MY_GATEWAY"])
    assert set(redactor.values) == {
        "ak-modal-token-id",
        "wk-proxy-token-id",
        "vllm-api-key-123",
        "hf_old_style_token",
        "gateway-credential-1",
    }


def test_env_args_teach_their_secrets_and_key_variables() -> None:
    redactor = Redactor()
    redactor.learn_env_args(
        {
            "path": "data/qa.jsonl",
            "api_key": "inline-secret-1",
            "task": {
                "judges": [
                    {"base_url": "http://127.0.0.1:1/v1", "api_key_var": "JUDGE_ONE"},
                    {"headers_from_env": {"X-Team": "JUDGE_HEADER"}},
                ]
            },
            "mirror": "https://bob:url-password-1@host/v1",
        },
        {"JUDGE_ONE": "judge-one-secret", "JUDGE_HEADER": "judge-header-secret", "X": "y"},
    )
    assert set(redactor.values) == {
        "inline-secret-1",
        "judge-one-secret",
        "judge-header-secret",
        "url-password-1",
    }
    assert redactor.text("data/qa.jsonl") == "data/qa.jsonl"


def test_env_args_teach_every_shape_a_secret_takes() -> None:
    """Numbers, dates, ``{name, value}`` mappings and ``[name, value]`` pairs at any depth, an
    ``Authorization`` value and its credential (a ``Basic`` one decoded too), each line of a
    value of several lines, every leaf of a JSON value, a secret flag's value in a list."""
    redactor = Redactor()
    basic = base64.b64encode(b"alice:basic-password-1").decode()
    redactor.learn_env_args(
        {
            "judge": {"api_key": 31415926535, "password": True},
            "task": {"env": [{"name": "SEARCH_API_KEY", "value": "pair-secret-1"}]},
            "headers": [["Authorization", "Bearer bearer-secret-1"], ["Accept", "text/plain"]],
            "more": [
                {"key": "X-Api-Key", "value": 27182818284},
                ["Proxy-Authorization", f"Basic {basic}"],
            ],
            "private_key": "-----BEGIN KEY-----\nline-secret-0001\nab\n-----END KEY-----\n",
            "credentials": '{"type": "service_account", "private_key_id": "json-leaf-0001"}',
            "command": ["serve", "--api-key", "flag-secret-0001", "--token=flag-secret-0002"],
            # YAML reads an unquoted date or time as one, not as text.
            "dated": yaml.safe_load("{password: 2024-01-31, token: 2024-01-31 10:20:30}"),
        }
    )
    assert {
        "31415926535",
        "27182818284",
        "pair-secret-1",
        "Bearer bearer-secret-1",
        "bearer-secret-1",
        "basic-password-1",
        "alice:basic-password-1",
        "line-secret-0001",
        "-----BEGIN KEY-----\nline-secret-0001\nab\n-----END KEY-----",
        "-----BEGIN KEY-----\r\nline-secret-0001\r\nab\r\n-----END KEY-----",
        "json-leaf-0001",
        "flag-secret-0001",
        "flag-secret-0002",
        "2024-01-31",
        "datetime.date(2024, 1, 31)",
        "2024-01-31 10:20:30",
        "2024-01-31T10:20:30",
    } <= set(redactor.values)
    assert not {"text/plain", "Accept", "SEARCH_API_KEY", "ab"} & set(redactor.values)
    assert redactor.text('{"secret": "-----BEGIN KEY-----\\nline-secret-0001\\nab"}') == (
        '{"secret": "[redacted]\\n[redacted]\\nab"}'  # line by line: a part of the whole
    )


def test_structured_outputs_keep_their_names_and_lose_their_secrets() -> None:
    """Keys, roles and finish reasons stay whatever the secrets are; values (strings and
    numbers whose text is a secret) lose them."""
    redactor = Redactor(["example_id", "assistant", "31415926535", "sk-value-secret-1"])
    record = {
        "example_id": 3,
        "completion": [{"role": "assistant", "content": "sk-value-secret-1 and example_id"}],
        "finish_reason": "stop",
        "info": {"number": 31415926535, "flag": True, "sk-value-secret-1": 1.5},
    }
    assert redactor.json(record, by_name=False) == {
        "example_id": 3,
        "completion": [{"role": "assistant", "content": "[redacted] and [redacted]"}],
        "finish_reason": "stop",
        "info": {"number": "[redacted]", "flag": True, "sk-value-secret-1": 1.5},
    }
    # A plain word is not looked for before a push (the plugin's own names hold words).
    redactor.check("records", json.dumps({"example_id": 3, "role": "assistant"}).encode())
    with pytest.raises(ShareError, match="still contains"):
        redactor.check("records", b'{"a": "sk-value-secret-1"}')


def test_the_reports_own_script_and_style_are_kept_whatever_the_secrets(tmp_path: Path) -> None:
    """A secret that is a word the page's script and style are written in (``function``,
    ``document``, ``overflow``) is replaced in what the page shows, never in the plugin's own
    code: the inlined JS and CSS are the assets as shipped, so the page still works."""
    from importlib import resources

    from pytest_modal_eval.report.html import write_report
    from tests.test_run_files import outputs, write_run

    run = write_run(tmp_path / "evals", "r1", outputs(text="function sk-MARKpage-0001"))
    redactor = Redactor(["function", "document", "overflow", "sk-MARKpage-0001"])
    page_path = tmp_path / "report.html"
    write_report(page_path, [(run, None)], redactor=redactor)
    page = page_path.read_text()
    assets = resources.files("pytest_modal_eval.report") / "templates"
    js, css = ((assets / name).read_text() for name in ("report.js", "report.css"))
    assert "function" in js and "overflow" in css  # the words are the code's own
    assert f"<script>{js}</script>" in page and f"<style>{css}</style>" in page
    shown = page.replace(js, "").replace(css, "")
    assert f"{REDACTED} {REDACTED}" in shown  # the answer, in the page's data
    assert not {"function", "document", "overflow", "MARKpage"} & set(re.split(r"\W+", shown))


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({"SHORT_TOKEN": "abc"}, "SHORT_TOKEN: its value is 3 characters long"),
        ({"MY_PASSWORD": "example_id"}, "MY_PASSWORD: its value is a plain word"),
        ({"MY_PASSWORD": "a-long-random-Secret-9"}, None),
    ],
)
def test_a_secret_that_cannot_be_kept_out_of_text_is_said_once(
    environ: dict[str, str], said: str | None
) -> None:
    redactor = Redactor.from_environ(environ)
    notices = redactor.take_notices()
    assert [n.split(";")[0][: len(said or "")] for n in notices] == ([said] if said else [])
    assert not any(value in notice for value in environ.values() for notice in notices)
    redactor.learn_variables(list(environ), environ)
    assert redactor.take_notices() == []  # once


def test_a_told_redactor_hears_every_secret_before_learn_returns() -> None:
    """What a worker's redactor knows, the controller's learns: those known already at once,
    each new one as it is learned (before ``learn`` returns), none twice."""
    heard: list[list[str]] = []
    worker = Redactor(["known-before-1"])
    worker.tell(heard.append)
    assert heard == [["known-before-1"]]
    worker.learn_env_args({"api_key": "env-args-secret-1", "answer_key": "not-a-secret"}, {})
    assert heard[-1] == ["env-args-secret-1"]
    worker.learn(["known-before-1", "short"])  # nothing new: nothing sent
    assert len(heard) == 2


def test_a_broker_learns_only_from_its_own_workers(tmp_path: Path) -> None:
    """``/secrets`` without the session's token, or with something other than a list of
    strings, teaches the controller's redactor nothing."""
    redactor = Redactor()
    settings = Settings(
        models=("m",), backend="local", base_url=None, api_key_env="K", output_dir=tmp_path,
        overrides=(), fresh=False, keep_deployment=False, vllm_python=sys.executable, files=(),
    )  # fmt: skip
    broker = Broker(Deployments(settings, tmp_path), redactor)
    broker.start()
    try:
        with pytest.raises(ServerStartError, match="forbidden"):
            BrokerClient(broker.url, "not-the-token").learn_secrets(["intruder-secret-1"])
        with pytest.raises(ServerStartError, match="a list of strings"):
            BrokerClient(broker.url, broker.token)._post("/secrets", {"values": "abcdefghij"})
        assert redactor.values == []
        BrokerClient(broker.url, broker.token).learn_secrets(["worker-secret-1"])
        assert redactor.values == ["worker-secret-1"]
    finally:
        broker.stop()


@pytest.mark.parametrize(
    "encode",
    [
        lambda s: s,
        lambda s: json.dumps(s),
        lambda s: json.dumps(s, ensure_ascii=False),
        repr,
        lambda s: repr(json.dumps({"error": {"message": f"Bearer {s}"}})),  # a body, quoted
        lambda s: json.dumps(repr(s)),  # a repr, written to a JSON file
        lambda s: "https://h/x?key=" + __import__("urllib.parse").parse.quote(s, safe=""),
        lambda s: __import__("html").escape(s),
    ],
    ids=["raw", "json", "json-unicode", "repr", "repr-of-json", "json-of-repr", "url", "html"],
)
def test_a_secret_is_found_in_escaped_text(encode: object) -> None:
    secret = "sk-\"é\\n'quoted\\-MARK"
    redactor = Redactor([secret])
    text = encode(secret)  # type: ignore[operator]
    assert "MARK" in text
    assert "MARK" not in redactor.text(f"before {text} after")
    assert REDACTED in redactor.text(text)
    assert len(secret_forms("plainsecret1")) == 1  # no escaping, one form to search


def _json_escaping_everything(text: str) -> str:
    """JSON from an encoder that escapes every character but letters and digits (as some
    gateways do to stay ASCII- and HTML-safe)."""
    units = text.encode("utf-16-be", "surrogatepass")
    return "".join(
        chr(unit) if chr(unit).isascii() and chr(unit).isalnum() else f"\\u{unit:04X}"
        for unit in (int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2))
    )


ENCODINGS: dict[str, Callable[[str], str]] = {
    "json": json.dumps,
    # PHP's json_encode writes / as \/; Go's encoding/json writes <, > and & as \u003c ...
    "json-php": lambda s: json.dumps(s).replace("/", "\\/"),
    "json-go": lambda s: (
        json.dumps(s, ensure_ascii=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    ),
    "json-escape-all": _json_escaping_everything,
    "json-unicode": lambda s: json.dumps(s, ensure_ascii=False),
    "repr": repr,
    "url": lambda s: urllib.parse.quote(s, safe=""),
    "form": lambda s: urllib.parse.quote_plus(s, safe=""),
    "html": html.escape,
}


#: Text around a secret: anything but the letters of its marker word (and lone surrogates,
#: which no URL encoding writes).
AROUND = st.text(st.characters(blacklist_characters="MARK", codec="utf-8"), max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    head=AROUND,
    secret=st.text(st.characters(codec="utf-8"), min_size=4, max_size=20),
    tail=AROUND,
    chain=st.lists(st.sampled_from(sorted(ENCODINGS)), max_size=2),
)
def test_any_secret_in_any_two_encodings_is_found(
    head: str, secret: str, tail: str, chain: list[str]
) -> None:
    """Whatever the secret's characters and the text around it, the secret is gone after up
    to two encodings of the whole text (its marker word tells: no encoding of the text around
    it writes those letters)."""
    value = f"{secret}MARK{secret}"
    text = head + value + tail
    for name in chain:
        text = ENCODINGS[name](text)
    assert "MARK" in text
    assert "MARK" not in Redactor([value]).text(text)


def test_log_records_are_redacted_with_their_traceback() -> None:
    redactor = Redactor(["tb-secret-123456"])
    try:
        raise RuntimeError("refused tb-secret-123456")
    except RuntimeError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "key %s", ("tb-secret-123456",), sys.exc_info()
        )
    redact(record, redactor)
    assert record.getMessage() == f"key {REDACTED}"
    assert record.exc_text is not None and "tb-secret" not in record.exc_text
    assert "RuntimeError" in record.exc_text
    # A record without a secret is left as it was, for each handler to format its own way.
    error = RuntimeError("nothing secret")
    plain = logging.LogRecord(
        "x", logging.ERROR, __file__, 1, "n=%d", (3,), (RuntimeError, error, None)
    )
    redact(plain, redactor)
    assert (plain.msg, plain.args, plain.exc_text) == ("n=%d", (3,), None)


def test_reports_are_redacted_before_anyone_reads_them() -> None:
    plugin = RedactedOutput(Redactor(["rep-secret-123456"]))
    report = pytest.TestReport(
        "t.py::t",
        ("t.py", 1, "t"),
        {},
        "failed",
        "server said rep-secret-123456",
        "call",
        sections=[("Captured log call", "ERROR rep-secret-123456")],
        user_properties=[("error", "rep-secret-123456"), ("n", 3)],
    )
    plugin.redact_report(report)
    assert report.longrepr == f"server said {REDACTED}"
    assert report.sections == [("Captured log call", f"ERROR {REDACTED}")]
    assert report.user_properties == [("error", REDACTED), ("n", 3)]


def _hostile_project(project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_KEY", API_KEY)
    monkeypatch.setenv("ACME_SIGNING", INI_SECRET)  # secret only because the ini lists it
    monkeypatch.setenv("ACME_JUDGE", JUDGE_SECRET)  # secret because a judge reads its key there
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    project.pytester.makeini(
        "[pytest]\naddopts = -p no:randomly\nmodal_eval_secret_env =\n    ACME_SIGNING\n"
    )
    # Half the questions fail with the key echoed; the other secrets sit in prompts, so they
    # reach results, the report and the Hub as text the model saw.
    project.server.configure(require_key=API_KEY, echo_auth=True, fail_rate=0.5)
    questions = [f"What is {i} + 3?" for i in range(8)]
    questions[1] += f" (signed {INI_SECRET})"
    questions[2] += f" (key {ENV_ARGS_SECRET})"
    questions[3] += f" (judge {JUDGE_SECRET})"
    rows = [{"question": q, "answer": str(i + 3)} for i, q in enumerate(questions)]
    project.add("alpha", rows=rows)
    secret_qa_benchmark(
        project,
        f"""\
        api_key: {ENV_ARGS_SECRET}
        judge: {{base_url: "http://127.0.0.1:9/v1", api_key_var: ACME_JUDGE}}
        """,
    )


def test_no_secret_leaves_the_session(
    project: BenchmarkProject, hub_server: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hostile_project(project, monkeypatch)
    result = project.run_subprocess(
        "--api-key-env",
        "AZURE_OPENAI_KEY",
        "--junitxml=junit.xml",
        "-o",
        "junit_logging=all",
        "--log-file=pytest.log",
        "--log-file-level=DEBUG",
        "-ra",
        "--push-to-hub",
        "org/evals",
        "--mlflow",
    )
    out = _checked_run(project, result)
    assert "Hub: pushed alpha--test-model" in out, out
    assert "MLflow (sqlite:///" in out, out
    names = _relative_names(project)
    assert {"pytest.log", "outputs/evals/mlflow.db"} <= names
    assert any(name.startswith("outputs/evals/mlartifacts/") for name in names)
    uploaded = hub_server.stored_bytes()
    assert any(b"alpha--test-model" in data for data in uploaded)
    _assert_no_secret(project, out, uploaded)


def test_xdist_workers_redact(project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run is written by a worker, with its own redactor; the reports cross to the
    controller already redacted."""
    _hostile_project(project, monkeypatch)
    result = project.run_subprocess(
        "--api-key-env", "AZURE_OPENAI_KEY", "--junitxml=junit.xml", "-n", "2"
    )
    out = _checked_run(project, result)
    assert "2 workers" in out, out
    _assert_no_secret(project, out, [])


def test_a_refused_endpoint_check_shows_no_secret(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint's model list names the caller's key, and the check's failure quotes the
    list: the failure is redacted on its way to the terminal, JUnit XML and the report."""
    _hostile_project(project, monkeypatch)
    result = project.pytester.runpytest(
        "--model",
        "not-served",
        "--base-url",
        project.server.base_url,
        "--api-key-env",
        "AZURE_OPENAI_KEY",
        "--junitxml=junit.xml",
    )
    out = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert f"echo Bearer {REDACTED}" in out, out
    junit = (project.pytester.path / "junit.xml").read_text()
    assert f"echo Bearer {REDACTED}" in junit
    _assert_no_secret(project, out, [])


def test_the_plan_shows_no_secret(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--co -v`` prints each benchmark's resolved configuration (a secret ``env_args`` value,
    a judge's key variable) and the session's settings (the key's variable): names, never
    values."""
    _hostile_project(project, monkeypatch)
    result = project.pytester.runpytest_subprocess(
        *project.args("--api-key-env", "AZURE_OPENAI_KEY", "--co", "-v")
    )
    out = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.OK, out
    assert "      api_key: '[redacted]'" in out and "api_key_var: ACME_JUDGE" in out, out
    assert "api_key_env: AZURE_OPENAI_KEY" in out, out
    assert project.server.stats().get("requests", 0) == 0
    _assert_no_secret(project, out, [])


def _checked_run(project: BenchmarkProject, result: pytest.RunResult) -> str:
    """The session's terminal output, after checking that the run happened: the key was
    sent (the server demands it), some examples errored with the echo and the others were
    answered, and the secrets in prompts and errors were recorded redacted."""
    out = "\n".join(result.outlines + result.errlines)
    stats = project.server.stats()
    assert stats["failed_requests"] >= 1 and stats["completed_requests"] >= 1, out
    assert stats.get("unauthorized", 0) == 0, out
    assert "could not be evaluated" in out and f"Authorization: Bearer {REDACTED}" in out, out
    [run_dir] = project.run_dirs("alpha")
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    errors = [r["error"] for r in results if r["error"]]
    assert errors and all(REDACTED in json.dumps(e) for e in errors)
    prompts = json.dumps([r["prompt"] for r in results])
    for label in ("signed", "key", "judge"):
        assert f"({label} {REDACTED})" in prompts, prompts
    names = _relative_names(project)
    run = run_dir.relative_to(project.pytester.path).as_posix()
    for name in ("checkpoint.jsonl", "results.jsonl", "metadata.json", "run_config.json"):
        assert f"{run}/{name}" in names, sorted(names)
    assert {f"{run}/logs/verifiers.log", "junit.xml", "outputs/evals/report.html"} <= names
    assert any(name.startswith(".pytest_cache/") for name in names)
    return out


def _relative_names(project: BenchmarkProject) -> set[str]:
    root = project.pytester.path
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _assert_no_secret(project: BenchmarkProject, out: str, uploaded: list[bytes]) -> None:
    """No secret's marker in any file under the project but the benchmark's own (its YAML and
    data hold secrets on purpose), in ``out`` or in what was ``uploaded``."""
    root = project.pytester.path
    places = [
        (path.relative_to(root).as_posix(), path.read_bytes())
        for path in root.rglob("*")
        if path.is_file() and not path.is_relative_to(project.evals)
    ]
    places += [(f"upload {n}", data) for n, data in enumerate(uploaded)]
    places.append(("terminal", out.encode()))
    leaks = [(name, m.decode()) for name, data in places for m in MARKERS if m in data]
    assert leaks == []

"""One server per server profile per session, through the real local backend, in seconds.

``--backend local`` runs ``python -m vllm.entrypoints.openai.api_server``; with
``tests/support/fake_vllm`` first on ``PYTHONPATH`` that module is a stand-in which serves the
fake OpenAI API and records each start in ``FAKE_VLLM_STARTS``. Everything else is the real
plugin: profile grouping, the xdist broker, the supervisor, the readiness probe, the log.
(tests/test_vllm_e2e.py does the same against real vLLM.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, BenchmarkProject, write_model_dir
from tests.support.vllm_check import FAKE_VLLM_ROOT

MODEL = "fake-model"  # a directory in the project, so no model hub is consulted
XDIST = pytest.mark.parametrize("dist", [[], ["-n", "2"]], ids=["in-process", "xdist"])


class LocalRuns:
    """Runs the project with ``--backend local`` on the fake vLLM and reads what it started."""

    def __init__(self, project: BenchmarkProject, starts: Path) -> None:
        self.project = project
        self.starts = starts
        self.stops = starts.with_name("stops.jsonl")
        write_model_dir(project.pytester.path / MODEL)

    def run(self, *extra: str) -> pytest.RunResult:
        # `--opt=VALUE`: pytest picks its rootdir before the plugin's options are known, and
        # would take a bare path after --model / --vllm-python for a test path.
        return self.project.pytester.runpytest_subprocess(
            f"--model={MODEL}", "--backend", "local", f"--vllm-python={sys.executable}", *extra
        )

    def started(self) -> list[dict[str, Any]]:
        if not self.starts.exists():
            return []
        return [json.loads(line) for line in self.starts.read_text().splitlines()]

    def up_intervals(self) -> list[tuple[float, float, int]]:
        """(start, stop, port) of every fake vLLM that started and stopped cleanly."""
        stops = {}
        if self.stops.exists():
            stops = {
                json.loads(line)["pid"]: json.loads(line)["t"]
                for line in self.stops.read_text().splitlines()
            }
        return sorted((s["t"], stops[s["pid"]], s["port"]) for s in self.started())

    def endpoint_of(self, benchmark: str) -> str:
        outputs = self.project.pytester.path / "outputs" / "evals"
        [config] = outputs.glob(f"{benchmark}--local--{MODEL}/*/run_config.json")
        endpoint: str = json.loads(config.read_text())["endpoint"]
        return endpoint

    def server_log_dirs(self) -> list[Path]:
        logs = self.project.pytester.path / "outputs" / "evals" / "logs"
        return sorted(logs.glob("*/local-*"))  # logs/<session>/local-<profile>


@pytest.fixture
def local(project: BenchmarkProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalRuns:
    starts = tmp_path / "starts.jsonl"
    monkeypatch.setenv("FAKE_VLLM_STARTS", str(starts))
    monkeypatch.setenv("FAKE_VLLM_STOPS", str(tmp_path / "stops.jsonl"))
    # Long enough that both xdist workers ask for the server while it is still starting.
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "1.5")
    paths = [str(FAKE_VLLM_ROOT), str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return LocalRuns(project, starts)


def max_model_len(start: dict[str, Any]) -> str | None:
    argv: list[str] = start["argv"]
    return argv[argv.index("--max-model-len") + 1] if "--max-model-len" in argv else None


@XDIST
def test_one_server_per_profile(local: LocalRuns, dist: list[str]) -> None:
    """alpha and beta share a profile (under xdist they ask for it at the same moment); gamma's
    ``vllm.max_model_len`` makes it another profile. One run covers both claims: per-worker or
    per-benchmark servers would make three starts, a single server for everything one."""
    local.project.add("alpha", n=4)
    local.project.add("beta", n=4)
    local.project.add("gamma", n=4, extra_yaml="vllm: {max_model_len: 1024}\n")
    result = local.run(*dist)
    result.assert_outcomes(passed=3)
    starts = local.started()
    assert sorted(str(max_model_len(s)) for s in starts) == ["1024", "None"], starts
    assert {s["served_model_name"] for s in starts} == {MODEL}
    assert {s["model"] for s in starts} == {str(local.project.pytester.path / MODEL)}  # absolute
    port_of = {max_model_len(s): s["port"] for s in starts}
    # Each benchmark ran against the server of its own profile.
    assert local.endpoint_of("alpha") == local.endpoint_of("beta")
    assert local.endpoint_of("alpha") == f"http://127.0.0.1:{port_of[None]}/v1"
    assert local.endpoint_of("gamma") == f"http://127.0.0.1:{port_of['1024']}/v1"
    # One log directory per server, and each server was stopped (SIGTERM, via the supervisor).
    logs = local.server_log_dirs()
    assert len(logs) == 2
    for server_logs in logs:
        assert "fake vLLM: shutting down" in (server_logs / "vllm.log").read_text()


@XDIST
def test_profiles_run_one_after_the_other_each_server_stopped_when_done(
    local: LocalRuns, dist: list[str]
) -> None:
    """a1 and c3 share a profile, b2 has another. The items of a profile run together (a1, c3,
    then b2), and a server stops as soon as no remaining item needs it, so the two local vLLMs
    are never up at once: in-process because a1 and c3 ran first, under xdist because b2's
    request waits until no running item holds the first server."""
    local.project.add("a1", n=3)
    local.project.add("b2", n=3, extra_yaml="vllm: {max_model_len: 1024}\n")
    local.project.add("c3", n=3)
    result = local.run(*dist, "-v")
    result.assert_outcomes(passed=3)
    if not dist:
        result.stdout.fnmatch_lines(
            ["*a1.yaml::a1 PASSED*", "*c3.yaml::c3 PASSED*", "*b2.yaml::b2 PASSED*"]
        )
    assert len(local.started()) == 2
    (_, first_down, _), (second_up, _, _) = local.up_intervals()
    assert first_down <= second_up, "two local vLLM servers were up at once"
    assert local.endpoint_of("a1") == local.endpoint_of("c3") != local.endpoint_of("b2")


def test_a_test_needing_two_local_servers_at_once_is_refused(local: LocalRuns) -> None:
    local.project.add("a1", n=2)
    local.project.add("b2", n=2, extra_yaml="vllm: {max_model_len: 1024}\n")
    local.project.pytester.makepyfile(
        test_two="""
        def test_both(eval_endpoint):
            eval_endpoint("evals/a1.yaml")
            eval_endpoint("evals/b2.yaml")
        """
    )
    result = local.run("test_two.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*needs two vLLM servers on this machine at once*"])
    assert len(local.started()) == 1


@XDIST
def test_a_finished_run_starts_no_server(local: LocalRuns, dist: list[str]) -> None:
    """Re-running finished benchmarks reports them from their checkpoints without starting the
    server (on Modal: a GPU deployment); a larger selection starts it and continues the run."""
    local.project.add("alpha", n=4)
    local.project.add("beta", n=4)
    first_two = ("--override", "eval.num_examples=2")
    local.run(*dist, *first_two).assert_outcomes(passed=2)
    assert len(local.started()) == 1
    # Other hardware is the same run and the same chat template: still nothing to do.
    again = local.run(*dist, *first_two, "--override", "infra.gpu=A100")
    again.assert_outcomes(passed=2)
    assert len(local.started()) == 1
    # A note for each benchmark, naming its run.
    again.stdout.fnmatch_lines(
        [
            "alpha (fake-model): note: *run 2*: nothing to evaluate, no server was started*",
            "beta (fake-model): note: *run 2*: nothing to evaluate, no server was started*",
        ]
    )
    more = local.run(*dist)
    more.assert_outcomes(passed=2)
    assert len(local.started()) == 2
    more.stdout.fnmatch_lines(["alpha (fake-model): resumed: 2/4 examples from run *"])
    runs = (local.project.pytester.path / "outputs" / "evals").glob(f"*--local--{MODEL}/*/")
    assert len(list(runs)) == 2  # one run per benchmark, continued


#: An environment of verifiers' own (not one the plugin plays itself): loading it imports verifiers.
PLAIN_QA = "from pytest_modal_eval.envs.file_qa import load_environment  # noqa: F401\n"

#: A conftest that writes every set-up phase's beginning and end, with the time, to PHASES_LOG.
PHASE_RECORDER = """
import json
import os
import time

from pytest_modal_eval import phases


class Recorder:
    def _write(self, event, phase):
        with open(os.environ["PHASES_LOG"], "a") as fh:
            fh.write(json.dumps({"event": event, "text": phase.text, "t": time.monotonic()}))
            fh.write("\\n")

    def began(self, phase):
        self._write("began", phase)

    def changed(self, phase, previous, seconds):
        pass

    def ended(self, phase, seconds):
        self._write("ended", phase)


def pytest_configure(config):
    config.add_cleanup(phases.listen(Recorder()))
"""


@XDIST
def test_a_first_run_imports_the_framework_while_its_server_starts(
    local: LocalRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist: list[str]
) -> None:
    """With no run to continue, the server is needed whatever the environment holds: it is
    asked for first and verifiers is imported on a thread meanwhile, so the two phases are open
    at once (under xdist: the import on a worker, the start on the controller). A re-run with
    every example finished imports and loads first, and starts no server."""
    local.project.add("alpha", n=3)
    local.project.play_with("alpha", "plain-qa", "plain_qa", PLAIN_QA)
    local.project.pytester.makeconftest(PHASE_RECORDER)
    log = tmp_path / "phases.jsonl"
    monkeypatch.setenv("PHASES_LOG", str(log))

    def spans() -> dict[str, tuple[float, float]]:
        """Each phase's first beginning and last end, in any process (the clock is the
        machine's; under xdist the controller is told a worker's phases again)."""
        found: dict[str, list[float]] = {}
        for line in log.read_text().splitlines():
            event = json.loads(line)
            found.setdefault(event["text"], []).append(event["t"])
        log.unlink()
        return {text: (min(times), max(times)) for text, times in found.items()}

    local.run(*dist).assert_outcomes(passed=1)
    first = spans()
    importing = first["alpha: importing verifiers"]
    [starting] = [t for text, t in first.items() if text.startswith("starting vLLM")]
    assert importing[0] < starting[1] and starting[0] < importing[1], first
    assert len(local.started()) == 1
    local.run(*dist).assert_outcomes(passed=1)
    again = spans()
    assert "alpha: importing verifiers" in again
    assert not any(text.startswith("starting vLLM") for text in again), again
    assert len(local.started()) == 1


def test_a_finished_run_whose_chat_template_changed_starts_the_server(local: LocalRuns) -> None:
    """The template vLLM would apply is part of the answer key: another fallback, an edited
    template file, or a template added to the model directory each make a new run, for which
    the server is started; what is unchanged is reported without one."""
    project = local.project
    runs_made: list[str] = []

    def run_and_note_new_run(*args: str) -> pytest.RunResult:
        before = {p.name for p in project.pytester.path.glob("outputs/evals/alpha--*/*/")}
        result = local.run(*args)
        result.assert_outcomes(passed=1)
        after = {p.name for p in project.pytester.path.glob("outputs/evals/alpha--*/*/")}
        runs_made.extend(sorted(after - before))
        return result

    template = project.pytester.path / "evals" / "mine.jinja"
    template.write_text("{{ messages }}")
    project.add("alpha", n=2, extra_yaml="chat_template: mine.jinja\n")
    run_and_note_new_run()
    project.add("alpha", n=2, extra_yaml="chat_template: math\n")
    run_and_note_new_run()
    assert (len(local.started()), len(runs_made)) == (2, 2)
    template.write_text("{{ messages }} fixed")
    project.add("alpha", n=2, extra_yaml="chat_template: mine.jinja\n")
    run_and_note_new_run()
    assert (len(local.started()), len(runs_made)) == (3, 3)
    (project.pytester.path / MODEL / "chat_template.jinja").write_text("{{ own }}")
    run_and_note_new_run()
    assert (len(local.started()), len(runs_made)) == (4, 4)
    # Unchanged now: reported from its run without a server, also when the run directories
    # are the index (no cache provider).
    for extra in ([], ["-p", "no:cacheprovider"]):
        result = run_and_note_new_run(*extra)
        result.stdout.fnmatch_lines(
            [f"*finished in run {runs_made[3]}: nothing to evaluate, no server was started*"]
        )
    assert (len(local.started()), len(runs_made)) == (4, 4)


@XDIST
def test_a_server_that_fails_to_start_is_not_retried(local: LocalRuns, dist: list[str]) -> None:
    broken = "vllm: {extra_args: ['--fake-exit-code', '1']}\n"  # only this profile's server
    local.project.add("alpha", n=4, extra_yaml=broken)
    local.project.add("beta", n=4, extra_yaml=broken)
    result = local.run(*dist)
    result.assert_outcomes(errors=2)
    # Started once; the other benchmark on that profile got the remembered failure.
    [start] = local.started()
    assert "--fake-exit-code" in start["argv"]
    for name in ("alpha", "beta"):
        result.stdout.fnmatch_lines([f"*{name}: vLLM exited with code 1 during startup*"])
    # Each error carries the log's path and its tail, which holds vLLM's own last words.
    out = result.stdout.str()
    assert out.count("--- last 40 lines ---") == 2
    assert out.count("fake vLLM: ValueError: cannot load model") == 2
    result.stdout.fnmatch_lines(["*Log: */outputs/evals/logs/*/local-*/vllm.log*"])


def test_modal_without_a_token_is_a_usage_error(
    project: BenchmarkProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("alpha", n=2)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(home / ".modal.toml"))
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    started = time.monotonic()
    result = project.pytester.runpytest_subprocess("--model", "org/x", "--backend", "modal")
    took = time.monotonic() - started
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*No Modal token is configured*", "*modal token new*"])
    assert took < 15, f"the usage error took {took:.1f}s"
    assert not (project.pytester.path / "outputs").exists()


#: A service account's key as a secret-named variable holds it: pretty-printed JSON over
#: several lines, some too short to be a secret alone, the private key escaped inside.
SERVICE_ACCOUNT = """{
  "type": "service_account",
  "project_id": "demo-MARKproject",
  "private_key_id": "0f3cMARKkeyid",
  "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADMARKpem\\n-----END PRIVATE KEY-----\\n",
  "a": 1,
  "b": "MARK"
}"""


def test_the_server_log_and_the_process_list_hold_no_secret_the_session_knows(
    local: LocalRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server prints the session's secrets (a key, a variable the ini lists, the Hub token
    it reads from its environment, a service account's key of several lines, as written and a
    line at a time) on stdout and stderr: ``vllm.log`` has none of them; nor do the command
    lines of the supervisor and the server, as ``/proc`` shows them to every local user."""
    monkeypatch.setenv("OPENAI_API_KEY", 'sk-"local"-MARKapikey-0001')
    monkeypatch.setenv("ACME_SIGNING", "ini-listed-MARKinivar-0002")
    monkeypatch.setenv("HF_TOKEN", "hf-env-MARKhftoken-0003")
    monkeypatch.setenv("GCP_SA_KEY", SERVICE_ACCOUNT)
    monkeypatch.setenv("FAKE_VLLM_PRINT_ENV", "OPENAI_API_KEY ACME_SIGNING HF_TOKEN GCP_SA_KEY")
    local.project.pytester.makeini(
        "[pytest]\naddopts = -p no:randomly\nmodal_eval_secret_env =\n    ACME_SIGNING\n"
    )
    local.project.add("alpha", n=2)
    local.run().assert_outcomes(passed=1)
    [server_logs] = local.server_log_dirs()
    log = (server_logs / "vllm.log").read_text()
    assert "fake vLLM: shutting down" in log  # the whole output was copied
    shown = "OPENAI_API_KEY=[redacted] ACME_SIGNING=[redacted] HF_TOKEN=[redacted]"
    assert f"env {shown} GCP_SA_KEY=[redacted]" in log, log
    assert log.count("fake vLLM: INFO GCP_SA_KEY |   [redacted]") == 5, log
    assert "MARK" not in log, log
    [start] = local.started()
    assert start["cmdline"][:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert start["parent_cmdline"][1] == "-c"  # the supervisor
    assert "MARK" not in json.dumps([start["cmdline"], start["parent_cmdline"]])


STATUS = "starting vLLM (local) for fake-model"


@XDIST
def test_a_slow_server_start_is_told_phase_by_phase_in_a_log(
    local: LocalRuns, dist: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a terminal (a CI log): one line per phase of the start-up, vLLM's own included,
    each with its duration; under xdist the controller, which starts the server, writes them."""
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "3")
    local.project.add("alpha", n=2)
    result = local.run(*dist)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"status: {STATUS}: loading weights *.*s",
            f"status: {STATUS}: capturing graphs *.*s",
            f"status: {STATUS}: *.*s",
        ]
    )
    pattern = rf"status: {re.escape(STATUS)}: (\d+\.\d)s$"
    seconds = re.search(pattern, result.stdout.str(), re.MULTILINE)
    assert seconds is not None and float(seconds[1]) >= 3.0


def test_a_slow_server_start_shows_a_changing_line_on_a_terminal(
    local: LocalRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal the start-up's line changes within 2 s of starting (its seconds count, its
    vLLM phase moves on): never a frozen line."""
    import pty
    import select

    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "4")
    monkeypatch.setenv("TERM", "xterm")
    local.project.add("alpha", n=2)
    controller, child = pty.openpty()
    command = [sys.executable, "-m", "pytest", f"--model={MODEL}", "--backend", "local"]
    command += [f"--vllm-python={sys.executable}", "-p", "no:cacheprovider"]
    process = subprocess.Popen(
        command, cwd=local.project.pytester.path, stdout=child, stderr=child, close_fds=True
    )
    os.close(child)
    chunks: list[tuple[float, str]] = []
    try:
        while True:
            ready, _, _ = select.select([controller], [], [], 60)
            if not ready:
                break
            try:
                data = os.read(controller, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append((time.monotonic(), data.decode(errors="replace")))
    finally:
        process.wait(60)
        os.close(controller)
    text = "".join(chunk for _, chunk in chunks)
    assert process.returncode == 0, text[-2000:]
    # Each drawing of the phase's line, with when it arrived.
    drawn = [
        (when, match[0])
        for when, chunk in chunks
        for match in re.finditer(rf"{re.escape(STATUS)}[^\n\x1b]*?\d+s", chunk)
    ]
    assert drawn, text[-2000:]
    first = drawn[0][0]
    within_2s = {line for when, line in drawn if when - first <= 2.0}
    assert len(within_2s) >= 2, drawn[:10]  # it changed within 2 s of first being shown
    assert any("loading weights" in line for _, line in drawn)
    assert any("capturing graphs" in line for _, line in drawn)


@pytest.mark.parametrize(
    "flag",
    [
        "[--hf-token, hf-flag-MARKflag-0003]",
        "['--hf-token=hf-flag-MARKflag-0003']",
        "[--api-key, sk-flag-MARKflag-0004, --max-model-len, '512']",
        "[--ssl-keyfile-password, pw-MARKflag-0005]",
    ],
)
def test_a_secret_flag_in_extra_args_is_refused_naming_the_field_and_the_fix(
    local: LocalRuns, flag: str
) -> None:
    """vLLM's command line (and its supervisor's) is readable by every local user: a secret
    flag in ``vllm.extra_args`` stops the benchmark in one error naming the file, the field
    and where vLLM reads the value from instead, and no server starts."""
    local.project.add("alpha", n=2, extra_yaml=f"vllm: {{extra_args: {flag}}}\n")
    result = local.run()
    output = "\n".join(result.outlines + result.errlines)
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        [
            "*alpha.yaml: invalid benchmark configuration*",
            "*vllm.extra_args: --*would put a secret on vLLM's command line*",
        ]
    )
    assert ("HF_TOKEN" in output) == ("hf-token" in flag)
    assert "MARK" not in output
    assert local.started() == []


#: A secret of several lines, none long enough to be looked for alone.
SHORT_LINES = "k1\nMARKa\nk3\nMARKb"


@pytest.mark.parametrize("split", [None, 5, 9, 16], ids=["one-write", "at-5", "at-9", "at-16"])
def test_the_supervisor_finds_a_secret_over_lines_and_writes(split: int | None) -> None:
    """The log supervisor (``serving/vllm/local.py``) run on its own, copying a program that
    writes a secret of several short lines in one write or cut in two writes a moment apart:
    the log has ``[redacted]`` in its place, and the lines around it whole."""
    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.serving.vllm.local import supervisor

    text = f"before {SHORT_LINES} after\nnext line\n"
    parts = [text] if split is None else [text[: 7 + split], text[7 + split :]]
    program = (
        "import sys, time\n"
        f"for part in {parts!r}:\n"
        "    sys.stdout.write(part); sys.stdout.flush(); time.sleep(0.1)\n"
    )
    rules = json.dumps(Redactor([SHORT_LINES]).to_json()) + "\n"
    copied = subprocess.run(
        [sys.executable, "-c", supervisor(), str(os.getpid()), "2", sys.executable, "-c", program],
        input=rules.encode(),
        capture_output=True,
        timeout=30,
        check=True,
        start_new_session=True,  # the supervisor ends its whole process group when done
    ).stdout.decode()
    assert copied == "before [redacted] after\nnext line\n"


def test_the_start_up_status_lines_pass_the_redactor(
    local: LocalRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The set-up lines quote text the plugin did not write (a model's name): a secret in it
    is shown ``[redacted]`` there as everywhere."""
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "2")
    monkeypatch.setenv("ACME_PASSWORD", "fake-model")
    local.project.add("alpha", n=2)
    result = local.run()
    out = result.stdout.str()
    assert "status: starting vLLM (local) for [redacted]" in out, out
    assert "fake-model" not in out

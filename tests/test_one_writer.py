"""One writer per run: pytest sessions evaluating one benchmark and model at once (real
processes, a real HTTP server) evaluate each example once, and a killed holder frees the run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from pytest_modal_eval.exceptions import RunLockError
from pytest_modal_eval.runs.paths import RunPaths, choosing_lock
from pytest_modal_eval.runs.writer_lock import RunWriter, WriterSpec, read_holder
from tests.conftest import BenchmarkProject, arithmetic_rows, read_jsonl
from tests.test_resume import intact_records, wait_for_checkpoint_lines

N = 30
CONCURRENCY = 2
YAML = f"eval: {{max_concurrent: {CONCURRENCY}, max_retries: 0}}\n"
#: Seconds the server takes per answer until the first session is held.
SLOW = 0.5
HOST = socket.gethostname()


class Session:
    """A pytest session in its own process, its output in a file."""

    def __init__(self, project: BenchmarkProject, name: str, *extra: str) -> None:
        self.log = project.pytester.path / f"{name}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pytest", *project.args(*extra)],
                cwd=project.pytester.path,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """The first line of the output holding ``text``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.text().splitlines():
                if text in line:
                    return line
            assert self.process.poll() is None, self.text()
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} in:\n{self.text()}")

    def finish(self, timeout: float = 90) -> int:
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture
def sessions() -> Iterator[list[Session]]:
    started: list[Session] = []
    yield started
    for session in started:
        session.kill()


def start(sessions: list[Session], project: BenchmarkProject, name: str, *extra: str) -> Session:
    session = Session(project, name, *extra)
    sessions.append(session)
    return session


def finished_ids(run_dir: Path) -> list[int]:
    return sorted(r["example_id"] for r in read_jsonl(run_dir / "checkpoint.jsonl"))


def holder_under_way(
    project: BenchmarkProject, sessions: list[Session], finished: int, *second_args: str
) -> tuple[Session, Path, Session]:
    """A first session evaluating ``alpha``, with at least ``finished`` examples in its
    checkpoint and then held by the server (its requests wait there: it must still be running
    when a second session has started, which takes seconds), and a second session started on
    the same benchmark and model."""
    project.add("alpha", n=N, extra_yaml=YAML)
    project.server.configure(delay=SLOW)
    first = start(sessions, project, "first")
    checkpoint = wait_for_checkpoint_lines(project, "alpha", finished)
    project.server.configure(hold=True)
    return first, checkpoint, start(sessions, project, "second", *second_args)


def test_a_second_session_waits_then_evaluates_nothing_twice(
    project: BenchmarkProject, sessions: list[Session]
) -> None:
    first, checkpoint, second = holder_under_way(project, sessions, 2)
    run_id = checkpoint.parent.name
    line = second.wait_for("is being evaluated by")
    assert f"alpha: run {run_id} is being evaluated by PID {first.pid} on host {HOST}" in line
    assert "waiting up to 600 s (--eval-lock-timeout)" in line
    project.server.configure(hold=False, delay=0.0)
    assert first.finish() == 0, first.text()
    assert second.finish() == 0, second.text()

    stats = project.server.stats()
    assert stats["chat_requests"] == N
    assert sorted(stats["by_question"].values()) == [1] * N
    [run_dir] = project.run_dirs("alpha")
    assert finished_ids(run_dir) == list(range(N))  # no doubled finished record
    assert len(read_jsonl(run_dir / "results.jsonl")) == N
    assert "waited" in second.wait_for(f"for run {run_id}, evaluated by PID {first.pid}")
    assert "Traceback" not in second.text()
    assert not RunPaths(run_dir).writer.exists()  # given up by both


def test_a_killed_holder_frees_the_run_and_only_the_missing_requests_are_sent(
    project: BenchmarkProject, sessions: list[Session]
) -> None:
    first, checkpoint, second = holder_under_way(project, sessions, 4)
    second.wait_for(f"is being evaluated by PID {first.pid} on host {HOST}")
    # The holder's requests wait at the server, so what it sent stops changing.
    deadline = time.monotonic() + 30
    while (stats := project.server.stats())["in_flight"] < CONCURRENCY:
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)
    sent_by_first = stats["chat_requests"]
    first.kill()  # SIGKILL: no chance to release anything
    finished = intact_records(checkpoint)
    assert 4 <= finished < N
    project.server.configure(hold=False, delay=0.0)

    assert second.finish() == 0, second.text()
    sent_by_second = project.server.stats()["chat_requests"] - sent_by_first
    run_dir = checkpoint.parent
    reused = json.loads((run_dir / "metadata.json").read_text())["reused_answers"]
    # Exactly the missing examples, less answers the holder had received but not recorded.
    assert sent_by_second + reused == N - finished
    assert finished_ids(run_dir) == list(range(N))
    second.wait_for(f"for run {run_dir.name}, evaluated by PID {first.pid} on host {HOST}")


def test_a_session_told_not_to_wait_stops_at_once_naming_the_holder(
    project: BenchmarkProject, sessions: list[Session]
) -> None:
    first, checkpoint, second = holder_under_way(project, sessions, 2, "--eval-lock-timeout", "0")
    assert second.finish() == 1, second.text()
    text = second.text()
    assert (
        f"alpha: run {checkpoint.parent.name} ({checkpoint.parent}) is being evaluated by PID "
        f"{first.pid} on host {HOST} (since "
    ) in text
    assert "and --eval-lock-timeout is 0; nothing was evaluated here" in text
    assert "Traceback" not in text
    project.server.configure(hold=False, delay=0.0)
    assert first.finish() == 0, first.text()
    assert project.server.stats()["chat_requests"] == N  # the second sent none


def test_sessions_starting_together_continue_one_run(
    project: BenchmarkProject, sessions: list[Session]
) -> None:
    """Both find no run, and both would start one: the choosing lock makes the second continue
    the first's. (The test holds that lock until both sessions reach it.)"""
    project.add("alpha", n=N, extra_yaml=YAML)
    bench = project.pytester.path / "outputs" / "evals" / "alpha--test-model"
    bench.mkdir(parents=True)
    held = FileLock(choosing_lock(bench))
    held.acquire()
    try:
        first = start(sessions, project, "first")
        second = start(sessions, project, "second")
        # Each asks the endpoint which model it serves, then loads its environment and
        # reaches the lock within moments.
        deadline = time.monotonic() + 90
        while project.server.stats().get("models_requests", 0) < 2:
            assert time.monotonic() < deadline, project.server.stats()
            time.sleep(0.05)
        time.sleep(3.0)
        assert project.server.stats().get("chat_requests", 0) == 0
    finally:
        held.release()
    assert first.finish() == 0, first.text()
    assert second.finish() == 0, second.text()
    [run_dir] = project.run_dirs("alpha")
    assert project.server.stats()["chat_requests"] == N
    assert finished_ids(run_dir) == list(range(N))


def test_xdist_workers_on_different_benchmarks_do_not_wait_for_each_other(
    project: BenchmarkProject,
) -> None:
    for name in ("alpha", "beta"):
        project.add(name, n=10, extra_yaml="eval: {max_concurrent: 1, max_retries: 0}\n")
    project.server.configure(delay=0.3)
    result = project.run_subprocess("-n", "2")
    result.assert_outcomes(passed=2)
    assert project.server.stats()["max_in_flight"] == 2  # one request of each at once
    result.stdout.no_fnmatch_line("*waited*")


def test_two_items_of_one_session_on_one_run_take_turns(project: BenchmarkProject) -> None:
    """Two files naming the same benchmark, with the same configuration, under -n 2: one
    evaluates the run, the other waits for it and says for which item of this session."""
    project.pytester.makeini(
        "[pytest]\naddopts = -p no:randomly\nmodal_eval_files = evals/*/*.yaml\n"
    )
    for part in ("one", "two"):
        folder = project.evals / part
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "alpha.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in arithmetic_rows(N))
        )
        (folder / "alpha.yaml").write_text(
            textwrap.dedent(
                f"""\
                env_id: file-qa
                env_args: {{path: data/alpha.jsonl}}
                {YAML.strip()}
                gate: {{min_avg_reward: 0.5}}
                """
            )
        )
    project.server.configure(delay=0.1)
    result = project.run_subprocess("-n", "2")
    result.assert_outcomes(passed=2)
    assert project.server.stats()["chat_requests"] == N
    result.stdout.fnmatch_lines(
        [
            "*alpha (test-model): note: waited * s for run *, evaluated by item "
            "evals/*/alpha.yaml::alpha of this session (PID *, worker gw*"
        ]
    )
    [run_dir] = project.run_dirs("alpha")
    assert finished_ids(run_dir) == list(range(N))


# -- the lock itself ----------------------------------------------------------------------------


def test_a_killed_holder_leaves_a_record_that_is_ignored(tmp_path: Path) -> None:
    """The OS drops a killed process's lock; its writer.json stays, naming it, until the next
    holder replaces it."""
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path;"
            "from pytest_modal_eval.runs.writer_lock import RunWriter, WriterSpec;"
            "writer = RunWriter(WriterSpec(session='s', item='x'));"
            "writer.claim(Path(sys.argv[1]));"
            "print('held', flush=True); time.sleep(120)",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        writer = RunWriter(WriterSpec(session="t", item="y", timeout_s=0))
        with pytest.raises(RunLockError, match=f"PID {holder.pid} on host {HOST}"):
            writer.claim(run_dir)
        recorded = read_holder(RunPaths(run_dir))
        assert recorded is not None and recorded.pid == holder.pid
    finally:
        holder.kill()
        holder.wait(30)
        assert holder.stdout is not None
        holder.stdout.close()
    writer.claim(run_dir)  # at once: nothing stale to clear
    recorded = read_holder(RunPaths(run_dir))
    assert recorded is not None and recorded.pid == os.getpid() and recorded.item == "y"
    writer.release()
    assert read_holder(RunPaths(run_dir)) is None


def test_waiting_lines_name_the_holder_and_the_wait_ends_when_it_is_released(
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    holder = RunWriter(WriterSpec(session="s", item="evals/a.yaml::a"))
    assert holder.try_claim(tmp_path)
    waiter = RunWriter(
        WriterSpec(session="s", item="evals/b.yaml::a", timeout_s=5, say=lines.append)
    )
    threading.Timer(0.5, holder.release).start()
    waiter.claim(tmp_path)
    assert waiter.held == tmp_path
    assert lines[0].startswith(
        f"run {tmp_path.name} is being evaluated by item evals/a.yaml::a of this session "
        f"(PID {os.getpid()} on host {HOST}, since "
    )
    assert waiter.waited is not None and lines[-1] == waiter.waited
    waiter.release()


def test_a_holder_record_with_terminal_escapes_is_shown_escaped(tmp_path: Path) -> None:
    """``writer.json`` is a run file like any other: a host or item holding an OSC sequence is
    named in the error with the sequence shown, never sent to the terminal."""
    holder = RunWriter(WriterSpec(session="s", item="evals/a.yaml::a"))
    assert holder.try_claim(tmp_path)
    try:
        record = json.loads(RunPaths(tmp_path).writer.read_text())
        record.update(host="h\x1b]0;pwned\x07", item="i\x1b]52;c;aGk=\x07")
        RunPaths(tmp_path).writer.write_text(json.dumps(record))
        waiter = RunWriter(WriterSpec(session="t", item="evals/b.yaml::a", timeout_s=0))
        with pytest.raises(RunLockError) as info:
            waiter.claim(tmp_path)
    finally:
        holder.release()
    message = str(info.value)
    assert "on host h\\x1b]0;pwned\\x07" in message and "item i\\x1b]52;" in message, message
    assert "\x1b" not in message


@pytest.mark.parametrize(
    ("given", "expected"),
    [("0", "0.0"), ("12.5", "12.5"), ("none", "None")],
)
def test_lock_timeout_option(pytester: pytest.Pytester, given: str, expected: str) -> None:
    pytester.makeconftest(
        textwrap.dedent(
            """\
            def pytest_sessionstart(session):
                from pytest_modal_eval.collect.context import CONTEXT_KEY
                print("lock timeout:", session.config.stash[CONTEXT_KEY].settings.lock_timeout_s)
            """
        )
    )
    result = pytester.runpytest("--eval-lock-timeout", given, "-s")
    result.stdout.fnmatch_lines([f"lock timeout: {expected}"])


def test_a_bad_lock_timeout_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmodal_eval_lock_timeout = soon\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini modal_eval_lock_timeout = 'soon': give seconds (0 or more; 0 errors at once*"]
    )


def test_a_run_directory_that_cannot_hold_the_lock_is_one_clear_error(tmp_path: Path) -> None:
    RunPaths(tmp_path).writer_lock.mkdir()  # in the way of the lock file
    writer = RunWriter(WriterSpec(session="s", item="x"))
    with pytest.raises(RunLockError, match=r"its lock .*writer\.lock cannot be taken \(Is a direc"):
        writer.claim(tmp_path)


def test_a_bad_lock_timeout_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--eval-lock-timeout", "soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--eval-lock-timeout 'soon': give seconds (0 or more; 0 errors at once*"]
    )
    assert "Traceback" not in result.stderr.str()

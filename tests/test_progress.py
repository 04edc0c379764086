"""Live progress: in place on a terminal (a real pseudo-terminal), plain lines on a pipe."""

from __future__ import annotations

import json
import math
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from pytest_modal_eval.report.progress import (
    BenchmarkProgress,
    ExampleFields,
    example_fields,
    read_fields,
)
from pytest_modal_eval.runs.outcome import ExampleResult
from tests.conftest import BenchmarkProject
from tests.test_resume import intact_records, start_pytest, wait_for_checkpoint_lines

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def test_fields_survive_reprs() -> None:
    """pytest stores keyword values as reprs, once more after each trip through xdist."""
    fields = example_fields(ExampleResult(7, [1.0, 0.0], None, 3, 10, 0.5, False, 2.25))
    once = {k: repr(v) for k, v in fields.items()}
    twice = {k: repr(v) for k, v in once.items()}
    for kwargs in (fields, once, twice):
        read = read_fields(kwargs)
        assert read is not None
        assert (read.reward, read.done, read.total, read.resumed) == (0.5, 3, 10, False)
        assert read.elapsed == 2.25
    errored = read_fields(example_fields(ExampleResult(8, [], "boom", 4, 10, 0.5, True)))
    assert errored is not None and errored.reward is None and errored.resumed
    assert read_fields({"i": "'1'"}) is None  # someone else's subtest


def _fields(
    reward: str, done: int, total: int, resumed: bool = False, elapsed: float | None = None
) -> ExampleFields:
    kwargs = {"reward": reward, "done": f"{done}/{total}", "mean": "x"}
    if elapsed is not None:
        kwargs["elapsed"] = f"{elapsed:.4f}"
    fields = read_fields({**kwargs, "resumed": "yes"} if resumed else kwargs)
    assert fields is not None
    return fields


def test_line_figures() -> None:
    progress = BenchmarkProgress("gsm8k")
    for n, reward in enumerate([1.0, 0.0, 1.0, 1.0], start=1):
        progress.add(_fields(f"{reward:.3f}", n, 8, elapsed=0.5 * n), now=0.5 * n)
    progress.add(_fields("error", 5, 8, elapsed=2.5), now=2.5)
    # 5 in 2.5 s: 2 ex/s, 3 left: 0:02; mean 0.75 of 4 examples: Wilson's 95% interval for
    # 3 of 4, (0.75 + a/2 ± sqrt(a 0.75 0.25 + a^2/4)) / (1 + a) with a = 1.96^2 / 4, its
    # ends (0.3006, 0.9544) rounded outward
    assert progress.line(2.5) == (
        "gsm8k  5/8 (62%)  2.0 ex/s  ETA 0:02  mean 0.750 [0.300, 0.955]  errors 1"
    )


def test_early_intervals_stay_within_the_rewards_range() -> None:
    """Two examples, 1 and 0: mean 0.5 and a normal half-width of 0.980, which would reach
    from -0.48 to 1.48; the line shows Wilson's interval for 1 of 2 instead, within [0, 1].
    Examples that all agree are not certainty: 1 of 1 solved shows Wilson's [0.2065, 1],
    rounded outward."""
    progress = BenchmarkProgress("early")
    progress.add(_fields("1.000", 1, 10), now=0.0)
    assert "mean 1.000 [0.206, 1.000]" in progress.line(0.0)
    progress.add(_fields("0.000", 2, 10), now=1.0)
    line = progress.line(1.0)
    assert "± 0.980" not in line
    assert "mean 0.500 ± 0.406" in line  # half-widths of 0.4055, rounded up
    for n in range(3, 41):
        progress.add(_fields(f"{n % 2:.3f}", n, 40), now=float(n))
    assert re.search(r"mean 0\.\d+ ± 0\.1\d\d", progress.line(40.0)), progress.line(40.0)
    wide = BenchmarkProgress("wide")  # rewards outside [0, 1] widen the range
    wide.add(_fields("3.000", 1, 10), now=0.0)
    wide.add(_fields("-1.000", 2, 10), now=1.0)
    # A normal interval (standard error sqrt(8 / 1 / 2) = 2, half-width 3.92) cut to the
    # rewards seen: its ends are shown.
    assert "mean 1.000 [-1.000, 3.000]" in wide.line(1.0)


def test_the_rate_is_timed_where_the_examples_were_evaluated() -> None:
    """200 examples in 1.6 s of evaluation: every line from the first example's has a rate,
    over the evaluation's time, however the reports are bunched on their way here; resumed
    examples (reported at once, before any new one) count as done, not in the rate."""
    progress = BenchmarkProgress("fast")
    for n in range(1, 51):
        progress.add(_fields("1.000", n, 250, resumed=True), now=0.0)
    assert progress.rate(0.0) is None and "  - ex/s  " in progress.line(0.5)
    for n in range(1, 201):
        # Four examples answered together every 0.032 s; their reports arrive in bunches of
        # twenty, all at once.
        elapsed = 0.032 * math.ceil(n / 4)
        progress.add(_fields("1.000", 50 + n, 250, elapsed=elapsed), now=10.0 + n // 20)
        assert progress.rate(10.0 + n // 20) == pytest.approx(n / elapsed), n
    assert progress.line(20.0).startswith("fast  250/250 (100%)  125.0 ex/s  mean 1.000")
    # No report for 8 s more: the run stalls, its rate falls.
    assert progress.rate(28.0) == pytest.approx(200 / 9.6)


def test_plain_lines_on_a_pipe(project: BenchmarkProject) -> None:
    project.add("arith", n=30)
    result = project.run_subprocess()
    assert result.ret == 0, result.stdout.str()
    lines = [line for line in result.stdout.lines if line.startswith("progress: ")]
    # One line per tenth of the examples, the last at 100%, none with terminal codes.
    assert len(lines) == 10, lines
    # The run takes well under a second; each line after the first example's has a rate.
    assert all(re.search(r"  [\d.]+ ex/s  ", line) for line in lines), lines
    # 30 of 30 solved: Wilson's interval, not a zero-width one.
    assert re.fullmatch(
        r"progress: arith  30/30 \(100%\)  [\d.]+ ex/s  mean 1\.000 \[0\.886, 1\.000\]  errors 0",
        lines[-1],
    ), lines[-1]
    assert "\x1b[" not in result.stdout.str()


@pytest.mark.parametrize("quiet", [["-q"], ["-p", "no:modal_eval_progress"]])
def test_quiet_and_opt_out(project: BenchmarkProject, quiet: list[str]) -> None:
    project.add("arith", n=10)
    result = project.run_subprocess(*quiet)
    assert result.ret == 0, result.stdout.str()
    assert "progress: " not in result.stdout.str()


SLOW_QA = """
import time

from pytest_modal_eval.envs.file_qa import load_environment as file_qa


def load_environment(path):
    time.sleep(1.0)
    return file_qa(path)
"""


#: A conftest whose every test's set-up is a phase quoting a terminal control sequence (OSC 52
#: writes the clipboard), as a model's name or directory could.
HOSTILE_PHASE = """
import time

from pytest_modal_eval import phases


def pytest_runtest_setup(item):
    with phases.phase("set-up \\x1b]52;c;aGk=\\x07 of " + item.name):
        time.sleep(0.6)
"""


def test_a_status_line_shows_control_characters_never_sends_them(
    project: BenchmarkProject,
) -> None:
    project.add("arith", n=2)
    project.pytester.makeconftest(HOSTILE_PHASE)
    result = project.run_subprocess()
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    assert "\x1b]52" not in out
    assert re.search(r"^status: set-up \\x1b\]52;c;aGk=\\x07 of arith: 0\.\ds$", out, re.M), out


def test_every_benchmark_under_xdist(project: BenchmarkProject) -> None:
    """Each benchmark's progress, and a worker's set-up phase (its environment loading, which
    takes a second here), reach the controller's output."""
    pytest.importorskip("xdist")
    project.add("first", n=20)
    project.add("second", n=20)
    project.play_with("second", "slow-qa", "slow_qa", SLOW_QA)
    result = project.run_subprocess("-n", "2")
    assert result.ret == 0, result.stdout.str()
    finals = {
        line.split()[1]
        for line in result.stdout.lines
        if line.startswith("progress: ") and "(100%)" in line
    }
    assert finals == {"first", "second"}
    # (The other benchmark's load gets a line too when a busy machine makes it last 0.5 s.)
    [loaded] = [line for line in result.stdout.lines if "loading environment slow-qa" in line]
    seconds = re.fullmatch(r"status: second: loading environment slow-qa: (\d+\.\d)s", loaded)
    assert seconds is not None and float(seconds[1]) >= 1.0, loaded


def test_a_resumed_run_under_xdist_rates_only_this_sessions_examples(
    project: BenchmarkProject,
) -> None:
    """Interrupted part-way, then resumed under ``-n 2`` beside a fresh benchmark. The server
    answers each request after ``delay`` seconds, and a benchmark has at most ``concurrency``
    requests in flight, so in any time ``t`` it can finish no more than ``concurrency * t /
    delay`` examples: no rate that counts only this session's examples, over the time this
    session spent on them, exceeds ``concurrency / delay``. A loaded machine only slows the
    run, so the bound holds however slow it is; a rate over it counted examples that needed
    no request (resumed ones) or measured too short a time (examples finishing together)."""
    pytest.importorskip("xdist")
    n, concurrency, delay = 12, 4, 0.5
    eval_yaml = f"eval: {{max_concurrent: {concurrency}, max_retries: 0}}\n"
    project.add("alpha", n=n, extra_yaml=eval_yaml)
    project.add("beta", n=n, extra_yaml=eval_yaml)
    project.server.configure(delay=delay)
    process = start_pytest(project, "-k", "alpha")
    checkpoint = wait_for_checkpoint_lines(project, "alpha", concurrency)
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == pytest.ExitCode.INTERRUPTED
    kept = intact_records(checkpoint)  # one rollout per example, none errored
    assert concurrency <= kept < n

    project.server.configure(reset_stats=True)
    result = project.run_subprocess("-n", "2")
    result.assert_outcomes(passed=2)
    reused = json.loads((checkpoint.parent / "metadata.json").read_text())["reused_answers"]
    assert project.server.stats()["chat_requests"] + reused == (n - kept) + n
    rates: dict[str, list[float]] = {"alpha": [], "beta": []}
    for line in result.stdout.lines:
        if found := re.match(r"progress: (\w+)  \d+/\d+ \(\d+%\)  ([\d.]+) ex/s", line):
            rates[found[1]].append(float(found[2]))
    assert rates["alpha"] and rates["beta"], result.stdout.lines
    bound = concurrency / delay + 0.05  # as printed, to one decimal
    assert max(rates["alpha"] + rates["beta"]) <= bound, rates


def _run_on_a_pty(args: list[str], cwd: str, timeout: float = 120.0) -> str:
    main, secondary = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120", "LINES": "40"}
    env.pop("PY_COLORS", None)  # pytester sets it to 0
    process = subprocess.Popen(
        args, cwd=cwd, stdin=secondary, stdout=secondary, stderr=secondary, env=env
    )
    os.close(secondary)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    data = os.read(main, 65536)
                except OSError:  # the other side closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif process.poll() is not None:
                break
    finally:
        process.kill() if process.poll() is None else None
        process.wait()
        os.close(main)
    return b"".join(chunks).decode("utf-8", "replace")


def test_in_place_lines_on_a_terminal(project: BenchmarkProject) -> None:
    project.add("arith", n=30)
    project.server.configure(delay=0.02)
    output = _run_on_a_pty(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *project.args()],
        str(project.pytester.path),
    )
    plain = ANSI.sub("", output)
    assert "1 passed" in plain, plain
    assert "progress: " not in plain  # no plain lines on a terminal
    # Each drawing: erase below, the line, then back up to pytest's line (ESC [ 1 A).
    drawings = re.findall(r"\x1b\[J\r?\n(arith  \d+/30[^\x1b]*)\x1b\[1A", output)
    assert drawings, repr(output)
    assert all("errors 0" in line for line in drawings)
    # The block is gone before pytest writes its result: the line ends erased, then ".".
    assert re.search(r"\x1b\[J(\x1b\[[0-9;]*m)*\.", output), output

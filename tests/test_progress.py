"""Live progress: in place on a terminal (a real pseudo-terminal), plain lines on a pipe."""

from __future__ import annotations

import os
import pty
import re
import select
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
from pytest_modal_eval.runs.evaluation import ExampleResult
from tests.conftest import BenchmarkProject

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def test_fields_survive_reprs() -> None:
    """pytest stores keyword values as reprs, once more after each trip through xdist."""
    fields = example_fields(ExampleResult(7, [1.0, 0.0], None, 3, 10, 0.5, False))
    once = {k: repr(v) for k, v in fields.items()}
    twice = {k: repr(v) for k, v in once.items()}
    for kwargs in (fields, once, twice):
        read = read_fields(kwargs)
        assert read is not None
        assert (read.reward, read.done, read.total, read.resumed) == (0.5, 3, 10, False)
    errored = read_fields(example_fields(ExampleResult(8, [], "boom", 4, 10, 0.5, True)))
    assert errored is not None and errored.reward is None and errored.resumed
    assert read_fields({"i": "'1'"}) is None  # someone else's subtest


def _fields(reward: str, done: int, total: int, resumed: bool = False) -> ExampleFields:
    kwargs = {"reward": reward, "done": f"{done}/{total}", "mean": "x"}
    fields = read_fields({**kwargs, "resumed": "yes"} if resumed else kwargs)
    assert fields is not None
    return fields


def test_line_figures() -> None:
    progress = BenchmarkProgress("gsm8k")
    for n, reward in enumerate([1.0, 0.0, 1.0, 1.0], start=1):
        progress.add(_fields(f"{reward:.3f}", n, 8), now=0.5 * n)
    progress.add(_fields("error", 5, 8), now=2.5)
    # 4 more after the first, in 2 s: 2 ex/s, 3 left: 0:02; mean 0.75, 95% half-width
    # 1.96 * 0.5 / 2
    assert progress.line(2.5) == (
        "gsm8k  5/8 (62%)  2.0 ex/s  ETA 0:02  mean 0.750 ± 0.490  errors 1"
    )


def test_a_fast_run_has_a_rate_from_its_second_example() -> None:
    """200 examples in 1.7 s: every line after the first example's has a rate; resumed
    examples (reported at once, before any new one) count as done, not in the rate."""
    progress = BenchmarkProgress("fast")
    for n in range(1, 51):
        progress.add(_fields("1.000", n, 250, resumed=True), now=0.0)
    assert progress.rate(0.0) is None and "  - ex/s  " in progress.line(0.5)
    for n in range(200):
        now = 0.1 + n * 1.6 / 199
        progress.add(_fields("1.000", 51 + n, 250), now=now)
        rate = progress.rate(now)
        if n == 0:
            assert rate is None  # one example: no interval to measure
        else:
            assert rate == pytest.approx(199 / 1.6), (n, rate)
    assert progress.line(1.7).startswith("fast  250/250 (100%)  124.4 ex/s  mean 1.000")


def test_plain_lines_on_a_pipe(project: BenchmarkProject) -> None:
    project.add("arith", n=30)
    result = project.run_subprocess()
    assert result.ret == 0, result.stdout.str()
    lines = [line for line in result.stdout.lines if line.startswith("progress: ")]
    # One line per tenth of the examples, the last at 100%, none with terminal codes.
    assert len(lines) == 10, lines
    # The run takes well under a second; each line after the first example's has a rate.
    assert all(re.search(r"  [\d.]+ ex/s  ", line) for line in lines), lines
    assert re.fullmatch(
        r"progress: arith  30/30 \(100%\)  [\d.]+ ex/s  mean 1\.000 ± 0\.000  errors 0",
        lines[-1],
    ), lines[-1]
    assert "\x1b[" not in result.stdout.str()


@pytest.mark.parametrize("quiet", [["-q"], ["-p", "no:modal_eval_progress"]])
def test_quiet_and_opt_out(project: BenchmarkProject, quiet: list[str]) -> None:
    project.add("arith", n=10)
    result = project.run_subprocess(*quiet)
    assert result.ret == 0, result.stdout.str()
    assert "progress: " not in result.stdout.str()


def test_every_benchmark_under_xdist(project: BenchmarkProject) -> None:
    pytest.importorskip("xdist")
    project.add("first", n=20)
    project.add("second", n=20)
    result = project.run_subprocess("-n", "2")
    assert result.ret == 0, result.stdout.str()
    finals = {
        line.split()[1]
        for line in result.stdout.lines
        if line.startswith("progress: ") and "(100%)" in line
    }
    assert finals == {"first", "second"}


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

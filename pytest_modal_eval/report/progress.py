"""Live progress of the running benchmarks, drawn on the controller from example reports.

Every example of a benchmark is reported as a subtest (see ``collect/example_reports.py``), and
those reports reach the controller under xdist as they do in-process; their keyword values
(:func:`example_fields`) carry what the progress line needs, so nothing else crosses between
processes.

On a terminal, one line per running benchmark sits below pytest's current line and is
redrawn in place (at most :data:`REDRAW_S` apart): the cursor always goes back to where pytest
left it, so pytest's own output lands where it expects, and the block is erased before
anything pytest writes. Elsewhere (a pipe, a CI log) a plain line is written every
:data:`PLAIN_STEP` of a benchmark's examples or :data:`PLAIN_EVERY_S` seconds. ``-v`` shows
every example instead, ``-q`` keeps only the terminal's in-place lines, ``-qq`` and
``-p no:modal_eval_progress`` turn it off.

The phases that take time before a benchmark's first example (a server starting, with vLLM's
own phase; an environment loading; a run's checkpoint read: :mod:`pytest_modal_eval.phases`)
are shown the same way, ``-v`` included: on a terminal a line per phase in the block, its
seconds counting (redrawn every :data:`TICK_S` by a thread while a phase lasts); elsewhere one
line per phase, and per vLLM phase, with its duration, once it is over (those shorter than
:data:`PHASE_MIN_S` are left out).
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_modal_eval import phases
from pytest_modal_eval.stats.format import fmt, fmt_interval, outward
from pytest_modal_eval.terminal_text import escape

if TYPE_CHECKING:
    import pytest

    from pytest_modal_eval.runs.outcome import ExampleResult

#: Seconds between redraws of the terminal's in-place lines.
REDRAW_S = 0.2
#: A plain progress line (not a terminal) every this share of a benchmark's examples...
PLAIN_STEP = 0.1
#: ...or after this many seconds without one.
PLAIN_EVERY_S = 60.0
#: z of the running mean's 95% interval (a normal approximation; the end uses the full method).
Z95 = 1.959963984540054
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
#: The keyword that carries an example's time into this session's evaluation (not shown by -v).
ELAPSED_KEY = "elapsed"
_DONE = re.compile(r"(\d+)/(\d+)")
#: Seconds between redraws of a phase's line on a terminal.
TICK_S = 0.5
#: Phases (and vLLM's own) shorter than this get no line in a CI log.
PHASE_MIN_S = 0.5


def example_fields(result: ExampleResult) -> dict[str, str]:
    """The keyword values of an example's subtest report: shown by ``-v`` and read back by
    :func:`read_fields` for the progress lines."""
    rewards = result.rewards
    reward = f"{sum(rewards) / len(rewards):.3f}" if rewards else "error"
    mean = result.running_mean
    fields = {
        "reward": reward,
        "done": f"{result.done}/{result.total}",
        "mean": fmt(mean),
    }
    if result.resumed:
        fields["resumed"] = "yes"
    elif result.elapsed_s is not None:
        fields[ELAPSED_KEY] = f"{result.elapsed_s:.4f}"
    return fields


@dataclass(frozen=True)
class ExampleFields:
    reward: float | None  # None: the example errored
    done: int
    total: int
    resumed: bool
    elapsed: float | None = None  # seconds into this session's evaluation, on the worker


def read_fields(kwargs: Any) -> ExampleFields | None:
    """:func:`example_fields` read back from a subtest report's keyword values, which pytest
    stores as reprs (once more after each trip through xdist); None for any other subtest."""
    if not isinstance(kwargs, dict) or "done" not in kwargs or "reward" not in kwargs:
        return None
    done = _DONE.search(str(kwargs["done"]))
    if done is None:
        return None
    reward = _NUMBER.search(str(kwargs["reward"]))
    elapsed = _NUMBER.search(str(kwargs.get(ELAPSED_KEY, "")))
    return ExampleFields(
        reward=float(reward[0]) if reward else None,
        done=int(done[1]),
        total=int(done[2]),
        resumed="resumed" in kwargs,
        elapsed=float(elapsed[0]) if elapsed else None,
    )


@dataclass
class BenchmarkProgress:
    """One running benchmark, as its example reports tell it."""

    name: str
    total: int = 0
    done: int = 0
    resumed: int = 0
    new: int = 0  # examples this session evaluated
    errors: int = 0
    n: int = 0
    mean: float = 0.0
    _m2: float = 0.0  # Welford's sum of squared deviations
    low: float = 0.0  # the rewards' range: [0, 1], widened by any reward outside it
    high: float = 1.0
    next_plain: int = 0
    last_plain: float = field(default=0.0)
    # The latest example's time into this session's evaluation (its worker's clock), and when
    # its report arrived here.
    elapsed: float | None = None
    elapsed_seen: float = 0.0

    def add(self, fields: ExampleFields, now: float) -> None:
        self.total = fields.total
        self.done = max(self.done, fields.done)
        if fields.resumed:
            self.resumed += 1
        else:
            self.new += 1
            if fields.elapsed is not None and (self.elapsed or 0.0) <= fields.elapsed:
                self.elapsed, self.elapsed_seen = fields.elapsed, now
        if fields.reward is None:
            self.errors += 1
            return
        self.n += 1
        self.low, self.high = min(self.low, fields.reward), max(self.high, fields.reward)
        delta = fields.reward - self.mean
        self.mean += delta / self.n
        self._m2 += delta * (fields.reward - self.mean)

    def rate(self, now: float) -> float | None:
        """Examples per second evaluated by this session (resumed ones, and those answered
        from an interrupted run's journal, are not counted), over the time since it began
        evaluating the benchmark: its first request, after any server start-up. The time
        comes from the process that evaluated the examples, not from when their reports
        arrive here: under xdist reports arrive in batches, and examples answered together
        (a server's batch) would otherwise seem to take no time at all. Time without a
        report since the latest one counts too, so a stalled run's rate falls. None before
        this session's first example."""
        if self.elapsed is None:
            return None
        seconds = self.elapsed + max(0.0, now - self.elapsed_seen)
        return self.new / seconds if seconds > 0 else None

    def line(self, now: float) -> str:
        parts = [self.name, f"{self.done}/{self.total}"]
        if self.total:
            parts[-1] += f" ({100 * self.done / self.total:.0f}%)"
        rate = self.rate(now)
        parts.append(f"{rate:.1f} ex/s" if rate is not None else "- ex/s")
        if rate and self.total > self.done:
            parts.append(f"ETA {_clock((self.total - self.done) / rate)}")
        if self.n:
            parts.append(f"mean {self.mean:.3f}{self._interval()}")
        parts.append(f"errors {self.errors}")
        return "  ".join(parts)

    def _interval(self) -> str:
        """The running mean's 95% interval: `` ± h`` where it is symmetric to the digits
        shown, else `` [low, high]``. Rewards in [0, 1] get a Wilson interval
        (:func:`~pytest_modal_eval.stats.intervals.running_wilson`: all examples solved so far
        is not certainty); others a normal one, cut at the range of the rewards seen."""
        if self.low >= 0.0 and self.high <= 1.0:
            from pytest_modal_eval.stats.intervals import running_wilson

            low, high = running_wilson(self.n, self.mean, self._m2)
        elif self.n > 1:
            half = Z95 * math.sqrt(self._m2 / (self.n - 1) / self.n)
            if self.mean - half < self.low or self.high < self.mean + half:
                # Cut to the rewards seen: its ends, so that it never reads as a half-width.
                low, high = max(self.mean - half, self.low), min(self.mean + half, self.high)
                return f" {fmt_interval(low, high)}"
            low, high = self.mean - half, self.mean + half
        else:
            return ""
        # Half-widths rounded up, as an interval's ends are rounded outward.
        _, above = outward(None, high - self.mean)
        _, below = outward(None, self.mean - low)
        return f" ± {above}" if above == below else f" {fmt_interval(low, high)}"


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LiveProgress:
    """Driven on the controller (or the only process) by its session; off when the session
    runs with ``-p no:modal_eval_progress``."""

    def __init__(self, config: pytest.Config, redact: Callable[[str], str] = str) -> None:
        """``redact``: the session redactor's ``text``, for the set-up lines (a model's name,
        an environment's id: text the plugin did not write itself)."""
        self.config = config
        self._redact = redact
        self.running: dict[str, BenchmarkProgress] = {}
        self._drawn = False
        self._last_draw = 0.0
        self._tty: bool | None = None  # decided when the session starts (terminal reporter)
        self._reporter: Any = None
        # Set-up phases: shown with -v too, so decided apart from the example lines.
        self._status_terminal: Any = None
        self._status_tty = False
        self._phases: dict[int, phases.Phase] = {}
        self._unlisten: Any = None
        self._out_fd: int | None = None
        self._status_column = -1  # pytest's column when the last status line was written
        self._ticker: threading.Thread | None = None
        # The terminal is written by pytest (this thread) and the phases' ticker.
        self._lock = threading.RLock()

    def start(self, subtest_verbosity: int) -> None:
        """When the session starts: decides terminal or plain lines, or none at all.
        ``subtest_verbosity`` is pytest's verbosity for subtests (``-v`` and its ini key)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or self.config.get_verbosity() <= -2:
            return
        live_logs = bool(self.config.getoption("log_cli_level", None)) or _ini_true(
            self.config, "log_cli"
        )
        # Cursor movement needs a terminal that is not "dumb"; colours (NO_COLOR, PY_COLORS)
        # are another matter.
        tty = bool(reporter.isatty()) and os.environ.get("TERM") != "dumb" and not live_logs
        self._status_terminal, self._status_tty = reporter, tty
        # The terminal itself, as it is now: phases are told while pytest captures the item's
        # output (a server starting in its set-up) and from other threads (the ticker, the
        # xdist broker's), so their lines are written around the capture, not through it.
        try:
            self._out_fd = os.dup(sys.stdout.fileno())
        except (OSError, ValueError):  # no file descriptor (pytest run in-process by a test)
            self._out_fd = None
        self._unlisten = phases.listen(self)
        if subtest_verbosity > 0:
            return  # -v reports every example itself
        if not tty and self.config.get_verbosity() < 0:
            return  # -q: no plain lines
        self._reporter, self._tty = reporter, tty

    # -- set-up phases (pytest_modal_eval.phases; any thread) ---------------------------------

    def began(self, phase: phases.Phase) -> None:
        with self._lock:
            self._phases[id(phase)] = phase
            if self._status_tty and (self._ticker is None or not self._ticker.is_alive()):
                self._ticker = threading.Thread(
                    target=self._tick, name="pytest-modal-eval-status", daemon=True
                )
                self._ticker.start()

    def changed(self, phase: phases.Phase, previous: str | None, seconds: float) -> None:
        if previous is not None and not self._status_tty and seconds >= PHASE_MIN_S:
            self._status_line(f"{phase.text}: {previous} {seconds:.1f}s")

    def ended(self, phase: phases.Phase, seconds: float) -> None:
        with self._lock:
            self._phases.pop(id(phase), None)
            if self._status_tty:
                self._draw(time.monotonic(), force=True)
                return
        if seconds < PHASE_MIN_S:
            return
        if phase.current is not None:
            lasted = time.monotonic() - phase.detail_started
            if lasted >= PHASE_MIN_S:
                self._status_line(f"{phase.text}: {phase.current} {lasted:.1f}s")
        self._status_line(f"{phase.text}: {seconds:.1f}s")

    def _status_line(self, text: str) -> None:
        if self._status_terminal is None:
            return
        with self._lock:
            self.erase()
            # pytest's column is what it last wrote; unchanged since this wrote a whole line,
            # the cursor is at the start of one.
            column = self.config.get_terminal_writer().width_of_current_line
            newline = "\n" if column and column != self._status_column else ""
            self._write_raw(f"{newline}status: {self._shown(text)}\n")
            self._status_column = column

    def _tick(self) -> None:
        """Redraws the block while a phase lasts, so its seconds count on the terminal."""
        while True:
            time.sleep(TICK_S / 2 if not self._drawn else TICK_S)
            with self._lock:
                if not self._phases:
                    return
                self._draw(time.monotonic(), force=True)

    def _phase_lines(self, now: float) -> list[str]:
        lines = []
        for phase in list(self._phases.values()):
            detail = f": {phase.current}" if phase.current else ""
            lines.append(self._shown(f"{phase.text}{detail}  {now - phase.started:.0f}s"))
        return lines

    def _shown(self, text: str) -> str:
        """A set-up line as printed: it quotes text the plugin did not write (a model's name or
        directory, an endpoint, an xdist worker's phase), so secrets are redacted and control
        characters shown, never obeyed."""
        return escape(self._redact(text))

    # -- what the reports say ---------------------------------------------------------------

    @contextmanager
    def reporting(self, report: pytest.TestReport) -> Iterator[None]:
        """Around the terminal reporter's handling of every report: the block is erased before
        it writes, and the example's figures counted and the block drawn after."""
        if self._reporter is None:
            with self._lock:
                self.erase()
                yield
            return
        # An example's subtest report carries its figures as keyword values (its context).
        fields = read_fields(getattr(getattr(report, "context", None), "kwargs", None))
        silent = fields is not None and report.passed
        with self._lock:
            yield from self._reporting(report, fields, silent)

    def _reporting(
        self, report: pytest.TestReport, fields: ExampleFields | None, silent: bool
    ) -> Iterator[None]:
        if not silent:
            self.erase()
        try:
            yield
        finally:
            now = time.monotonic()
            if fields is not None:
                self._example(report.nodeid, fields, now)
            elif report.when in ("call", "teardown"):  # the benchmark's own report: it ended
                self.running.pop(report.nodeid, None)
            if not silent or now - self._last_draw >= REDRAW_S:
                self._draw(now)

    def _example(self, nodeid: str, fields: ExampleFields, now: float) -> None:
        progress = self.running.get(nodeid)
        if progress is None:
            progress = BenchmarkProgress(nodeid.rsplit("::", 1)[-1])
            progress.last_plain = now
            self.running[nodeid] = progress
        progress.add(fields, now)
        if self._tty:
            return
        step = max(1, math.ceil(progress.total * PLAIN_STEP))
        if progress.done >= progress.next_plain or now - progress.last_plain >= PLAIN_EVERY_S:
            if progress.next_plain or progress.done == progress.total:  # not at the first example
                terminal = self.config.get_terminal_writer()
                if terminal.width_of_current_line:
                    terminal.line()
                terminal.line(f"progress: {progress.line(now)}")
                terminal.flush()
            progress.next_plain = (progress.done // step + 1) * step
            progress.last_plain = now

    # -- the terminal's in-place block -------------------------------------------------------

    def erase(self) -> None:
        """Before pytest writes anything of its own (a test's path, the interruption)."""
        with self._lock:
            if self._drawn:
                self._write_raw("\x1b[J")
                self._drawn = False

    def _write_raw(self, text: str) -> None:
        """Straight to the terminal, after what pytest has written (see :meth:`start`)."""
        terminal = self.config.get_terminal_writer()
        terminal.flush()
        if self._out_fd is None:
            terminal.write_raw(text, flush=True)
            return
        data = text.encode(getattr(sys.stdout, "encoding", None) or "utf-8", "replace")
        while data:
            data = data[os.write(self._out_fd, data) :]

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around pytest's own writing that no report wraps (a test's path): the block is
        erased first, and the phases' ticker waits until it is written."""
        with self._lock:
            self.erase()
            yield

    def _draw(self, now: float, force: bool = False) -> None:
        if not (self._tty or (force and self._status_tty)):
            return
        terminal = self.config.get_terminal_writer()
        lines = self._phase_lines(now) if self._status_tty else []
        if self._tty:
            lines += [p.line(now) for p in self.running.values()]
        if not lines:
            self.erase()
            return
        self._last_draw = now  # only a drawing counts: a benchmark's first example draws at once
        width = max(20, terminal.fullwidth - 1)
        column = terminal.width_of_current_line
        # Erase, draw below the current line, and go back to where pytest's cursor was.
        text = "\x1b[J" + "".join("\n" + line[:width] for line in lines)
        text += f"\x1b[{len(lines)}A\r" + (f"\x1b[{column}C" if column else "")
        self._write_raw(text)
        self._drawn = True

    @contextmanager
    def test_finishing(self) -> Iterator[None]:
        """Around the end of a test's reporting: erased while pytest ends its line, drawn after."""
        with self._lock:
            self.erase()
            try:
                yield
            finally:
                self._draw(time.monotonic(), force=True)

    def finish(self) -> None:
        """When the session ends, before pytest's summary."""
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        with self._lock:
            self.running.clear()
            self._phases.clear()
            self.erase()
            if self._out_fd is not None:
                os.close(self._out_fd)
                self._out_fd = None


def _ini_true(config: pytest.Config, name: str) -> bool:
    try:
        return bool(config.getini(name))
    except ValueError:
        return False

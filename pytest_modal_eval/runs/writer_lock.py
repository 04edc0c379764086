"""One writer per run: an OS file lock in the run directory, held by the process evaluating it.

The lock is ``flock(2)`` through filelock's :class:`~filelock.FileLock`. The kernel drops it
when its holder exits, however it exits, so a run whose evaluator was killed (``kill -9``, a
lost CI runner) is free again at once: there is no stale lock to clear by hand. Who holds it
(PID, host, since when, which pytest session and item) is written beside it, in
``writer.json``, for the message of whoever finds it taken; that file is only read while the
lock is held by someone, so one a killed holder left behind misleads no one.

A second process that reaches a run someone else is evaluating waits for it, up to
``--eval-lock-timeout``, saying whom it waits for; once it has the run it reads the checkpoint
afresh and evaluates only what the holder did not finish. Choosing the run is serialised too,
by a short-lived lock per benchmark and model (:func:`choosing`): two sessions starting at the
same moment would otherwise each start a new run of the same key.

Under xdist each worker takes the locks of the runs it evaluates itself: the lock is per
process, and items of one session evaluate different runs unless two benchmark files share
a name and a configuration, in which case the later one waits for the earlier, as a second
session would, and the message names the item of this session it waits for.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from pytest_modal_eval.exceptions import RunLockError
from pytest_modal_eval.runs.paths import RunPaths, choosing_lock
from pytest_modal_eval.runs.store import write_json_atomic
from pytest_modal_eval.terminal_text import escape

#: How often a waiting process tries the lock again (and reads who holds it).
POLL_S = 0.2
#: How often the waiting line is repeated while the holder stays the same.
REPORT_EVERY_S = 60.0
#: Default of --eval-lock-timeout, in seconds.
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Holder:
    """Who evaluates a run: what ``writer.json`` records."""

    pid: int
    host: str
    since: str  # ISO time (UTC) the run was taken
    session: str  # the pytest session's id (xdist's testrunuid under -n)
    item: str  # the benchmark item's node id
    worker: str | None = None  # the xdist worker, under -n

    def describe(self, my_session: str | None = None) -> str:
        since = self.since.replace("T", " ")[:19] + " UTC" if self.since else "an unknown time"
        who = f"PID {self.pid} on host {self.host}"
        if my_session is not None and self.session == my_session:
            worker = f", worker {self.worker}" if self.worker else ""
            return f"item {self.item} of this session ({who}{worker}, since {since})"
        item = f", item {self.item}" if self.item else ""
        return f"{who} (since {since}{item})"


def read_holder(paths: RunPaths) -> Holder | None:
    """The holder ``writer.json`` names, or None when it names none (not written yet). Its
    text is shown in the terminal: a run directory copied or edited by hand could hold control
    sequences there, so they come back escaped."""
    try:
        data = json.loads(paths.writer.read_text(encoding="utf-8"))
        fields: dict[str, Any] = {k: data.get(k) for k in Holder.__dataclass_fields__}
        shown: dict[str, Any] = {
            k: escape(v) if isinstance(v, str) else v for k, v in fields.items()
        }
        return Holder(**shown)
    except (OSError, ValueError, TypeError, AttributeError):
        return None


@dataclass(frozen=True)
class WriterSpec:
    """Who this process is, and how long it waits for a run someone else evaluates."""

    session: str
    item: str
    worker: str | None = None
    timeout_s: float | None = DEFAULT_TIMEOUT_S  # None: as long as it takes; 0: not at all
    say: Callable[[str], None] | None = None  # where the waiting lines go (the terminal)


class RunWriter:
    """This process's claim on at most one run directory (one benchmark item's)."""

    def __init__(self, spec: WriterSpec) -> None:
        self.spec = spec
        self._lock: FileLock | None = None
        self._run_dir: Path | None = None
        self.waited: str | None = None  # one line on whom it waited for, when it did

    @property
    def held(self) -> Path | None:
        return self._run_dir

    def try_claim(self, run_dir: Path) -> bool:
        """Take ``run_dir`` if no one else holds it (the one held so far is released)."""
        if self._run_dir == run_dir:
            return True
        self.release()
        paths = RunPaths(run_dir)
        lock = FileLock(paths.writer_lock, thread_local=False)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            lock.acquire(timeout=0)
        except Timeout:
            return False
        except OSError as exc:
            raise RunLockError(
                f"run {run_dir.name}: its lock {paths.writer_lock} cannot be taken "
                f"({exc.strerror or exc}); whoever evaluates or reports a run needs to be able "
                "to write in its directory (copy a read-only run elsewhere to report it)"
            ) from None
        self._lock, self._run_dir = lock, run_dir
        holder = Holder(
            pid=os.getpid(),
            host=socket.gethostname(),
            since=datetime.now(UTC).isoformat(timespec="seconds"),
            session=self.spec.session,
            item=self.spec.item,
            worker=self.spec.worker,
        )
        # Only messages read it; the lock itself is what keeps the run to one writer.
        with contextlib.suppress(OSError):
            write_json_atomic(paths.writer, asdict(holder))
        return True

    def claim(self, run_dir: Path) -> None:
        """Take ``run_dir``, waiting while another process evaluates it, up to the timeout.

        Raises :class:`RunLockError`, naming the holder, when the timeout passes first.
        """
        if self.try_claim(run_dir):
            return
        paths = RunPaths(run_dir)
        timeout = self.spec.timeout_s
        started = time.monotonic()
        shown: Holder | None = None
        last_line = -REPORT_EVERY_S
        while True:
            holder = read_holder(paths)
            waited = time.monotonic() - started
            if timeout is not None and waited >= timeout:
                raise RunLockError(self._busy(run_dir, holder, waited))
            if holder != shown or waited - last_line >= REPORT_EVERY_S:
                self._say(self._waiting(run_dir, holder, waited))
                shown, last_line = holder, waited
            left = POLL_S if timeout is None else min(POLL_S, timeout - waited)
            time.sleep(max(left, 0.0))
            if self.try_claim(run_dir):
                waited = time.monotonic() - started
                about = holder.describe(self.spec.session) if holder else "another process"
                self.waited = (
                    f"waited {waited:.0f} s for run {run_dir.name}, evaluated by {about}; "
                    "went on from what it finished"
                )
                self._say(self.waited)
                return

    def release(self) -> None:
        """Give the run up (its ``writer.json`` first, so no one reads it as current)."""
        lock, run_dir = self._lock, self._run_dir
        self._lock = self._run_dir = None
        if lock is None or run_dir is None:
            return
        with contextlib.suppress(OSError):
            RunPaths(run_dir).writer.unlink(missing_ok=True)
        lock.release()

    def _say(self, line: str) -> None:
        if self.spec.say is not None:
            self.spec.say(line)

    def _waiting(self, run_dir: Path, holder: Holder | None, waited: float) -> str:
        about = holder.describe(self.spec.session) if holder else "another process"
        limit = (
            "as long as it takes"
            if self.spec.timeout_s is None
            else f"up to {self.spec.timeout_s:g} s"
        )
        so_far = f" ({waited:.0f} s so far)" if waited >= 1 else ""
        return (
            f"run {run_dir.name} is being evaluated by {about}; waiting "
            f"{limit} (--eval-lock-timeout){so_far}, then going on from what it finished"
        )

    def _busy(self, run_dir: Path, holder: Holder | None, waited: float) -> str:
        about = holder.describe(self.spec.session) if holder else "another process"
        waited_text = (
            f"still, after waiting {waited:.0f} s (--eval-lock-timeout)"
            if self.spec.timeout_s
            else "and --eval-lock-timeout is 0"
        )
        return (
            f"run {run_dir.name} ({run_dir}) is being evaluated by {about}, {waited_text}; "
            "nothing was evaluated here. Run again once it has finished (this run then goes "
            "on from what it finished), give --eval-lock-timeout more seconds (or 'none' to "
            "wait as long as it takes), or stop that process: a stopped or killed process "
            "frees the run at once"
        )


@contextlib.contextmanager
def choosing(benchmark_dir: Path) -> Iterator[None]:
    """Held while a process picks the run of one benchmark and model, and records it, so two
    sessions starting together continue one run rather than each starting its own."""
    benchmark_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(choosing_lock(benchmark_dir), thread_local=False):
        yield

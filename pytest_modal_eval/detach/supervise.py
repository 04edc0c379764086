"""Inside a runner container: pytest as a child process, its output redacted into log chunks on
the Volume, the Volume committed as examples finish, and what may end it early (a stop request,
a lost lease, Modal's pre-emption or cancellation).

Commits: the child writes a byte to a pipe as each example is reported (:mod:`.commit_signal`)
and the committer commits at once (one commit at a time: examples that finish while one runs
go in the next); the log is committed every :data:`FLUSH_S` seconds while it grows. A
container killed outright loses only what finished during the last commit; one pre-empted
(Modal sends SIGINT, waits, then kills) or cancelled interrupts pytest, which saves what it
has, and commits before it exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from pytest_modal_eval.detach.commit_signal import COMMIT_FD_ENV
from pytest_modal_eval.detach.layout import LOG_CHUNK_BYTES, log_chunk_name
from pytest_modal_eval.redact import Redactor

#: Seconds between commits of a growing log.
FLUSH_S = 5.0
#: Seconds between looks at what may end the session (a stop request, the leases' beat).
TICK_S = 2.0
#: Seconds pytest gets to end after SIGINT (Modal's pre-emption grace is 30).
GRACE_S = 20.0
PREFIX = "[pytest-modal-eval] "


class LogChunks:
    """Numbered log files: a restarted container starts a new chunk, so no chunk is ever cut
    in two, and a follower reads each chunk once it is complete. Files are opened per write:
    a Volume cannot be reloaded with files open."""

    def __init__(self, folder: Path, redactor: Redactor) -> None:
        self.folder = folder
        self.redactor = redactor
        folder.mkdir(parents=True, exist_ok=True)
        numbers = [int(p.stem) for p in folder.glob("*.txt") if p.stem.isdigit()]
        self.number = max(numbers, default=0) + 1
        self.size = 0
        self.dirty = False
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        data = self.redactor.text(text).encode("utf-8", "replace")
        with self._lock:
            if self.size and self.size + len(data) > LOG_CHUNK_BYTES:
                self.number, self.size = self.number + 1, 0
            with (self.folder / log_chunk_name(self.number)).open("ab") as out:
                out.write(data)
            self.size += len(data)
            self.dirty = True

    def say(self, line: str) -> None:
        """A line of the runner's own."""
        self.write(f"{PREFIX}{line}\n")


class Committer:
    """Commits the Volume when woken, and every :data:`FLUSH_S` seconds while the log grows."""

    def __init__(self, commit: Callable[[], None], log: LogChunks) -> None:
        self._commit = commit
        self.log = log
        self.wake = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self.commits = 0
        self._last_failure = ""
        self._thread = threading.Thread(target=self._loop, name="volume-commit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def commit(self) -> None:
        with self._lock:
            self.log.dirty = False
            self._commit()
            self.commits += 1

    def _loop(self) -> None:
        while not self._done.is_set():
            woken = self.wake.wait(FLUSH_S)
            self.wake.clear()
            if self._done.is_set():
                return
            if woken or self.log.dirty:
                try:
                    self.commit()
                except Exception as exc:  # the next commit carries it; the session goes on
                    if str(exc) != self._last_failure:  # said once, not at every example
                        self._last_failure = str(exc)
                        self.log.say(f"commit failed (retried with the next): {exc}")

    def stop(self) -> None:
        """Stop the loop and commit what is left."""
        self._done.set()
        self.wake.set()
        self._thread.join(30)
        self.commit()


def _read_signals(fd: int, wake: threading.Event) -> None:
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while pipe.read(4096):
            wake.set()


def _copy_output(stream: IO[bytes], log: LogChunks) -> None:
    with stream:
        for line in iter(stream.readline, b""):
            log.write(line.decode("utf-8", "replace"))


class Supervisor:
    """Runs one pytest command in this container with the Volume kept up to date."""

    def __init__(
        self,
        log: LogChunks,
        commit: Callable[[], None],
        check: Callable[[], str | None],
    ) -> None:
        """``check`` runs every :data:`TICK_S` seconds: a reason to end pytest early (a stop
        request, a lost lease), or None."""
        self.log = log
        self.committer = Committer(commit, log)
        self.check = check
        self.ended_by: str | None = None

    def run(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> int:
        """pytest's exit status; the Volume is committed before this returns or raises."""
        read_end, write_end = os.pipe()
        self.log.say(f"$ pytest {' '.join(argv)}")
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", *argv],
            cwd=cwd,
            env={**env, COMMIT_FD_ENV: str(write_end), "PYTHONUNBUFFERED": "1"},
            pass_fds=(write_end,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        os.close(write_end)
        assert process.stdout is not None
        copier = threading.Thread(target=_copy_output, args=(process.stdout, self.log), daemon=True)
        copier.start()
        threading.Thread(
            target=_read_signals, args=(read_end, self.committer.wake), daemon=True
        ).start()
        self.committer.start()
        try:
            next_check = time.monotonic() + TICK_S
            while (code := self._wait(process, 0.2)) is None:
                if time.monotonic() >= next_check and self.ended_by is None:
                    next_check = time.monotonic() + TICK_S
                    if (reason := self.check()) is not None:
                        self.ended_by = reason
                        self.log.say(f"ending pytest: {reason}")
                        process.send_signal(signal.SIGINT)
        except BaseException:  # pre-emption (SIGINT), cancellation: pytest saves, then commit
            self._end(process)
            copier.join(5)
            self.committer.stop()
            raise
        copier.join(30)
        self.committer.stop()
        return code

    @staticmethod
    def _wait(process: subprocess.Popen[bytes], seconds: float) -> int | None:
        try:
            return process.wait(seconds)
        except subprocess.TimeoutExpired:
            return None

    def _end(self, process: subprocess.Popen[bytes]) -> None:
        """pytest interrupted as by Ctrl-C (once: a signal sent to the whole container has
        reached it already, and a second Ctrl-C would cut its saving short), then killed."""
        if self._wait(process, 2.0) is not None:
            return
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGINT)
        if self._wait(process, GRACE_S) is None:
            process.kill()
            process.wait()

"""The pytest side of a detached container: a byte down a pipe each time something worth
committing was written (an example finished), so the runner commits the Volume at once.

The runner (:mod:`.supervise`) hands pytest the pipe's write end in :data:`COMMIT_FD_ENV`; only
the runner talks to Modal.
"""

from __future__ import annotations

import contextlib
import os

COMMIT_FD_ENV = "MODAL_EVAL_COMMIT_FD"


class CommitSignal:
    """Wakes the runner's committer; never blocks, never fails the session."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        with contextlib.suppress(OSError):
            os.set_blocking(fd, False)

    @classmethod
    def from_env(cls) -> CommitSignal | None:
        raw = os.environ.get(COMMIT_FD_ENV, "")
        return cls(int(raw)) if raw.isdigit() else None

    def notify(self) -> None:
        # A full pipe already holds a wake-up; a closed one means the runner is gone.
        with contextlib.suppress(OSError):
            os.write(self.fd, b".")

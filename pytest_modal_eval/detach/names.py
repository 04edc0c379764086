"""Names the launching machine and the runner's containers share: the Modal Dict's keys of a
detached session, and the exit statuses a session that did not run to its end reports."""

from __future__ import annotations

from datetime import UTC, datetime

#: pytest's exit status for an interrupted session (a stop request).
INTERRUPTED = 2
#: pytest's exit status for an internal error: what a session that could not run reports.
INTERNAL_ERROR = 3


def stop_key(session_id: str) -> str:
    """The Dict key ``pytest-modal-eval stop`` sets to end a session."""
    return f"stop:{session_id}"


def workers_key(session_id: str) -> str:
    return f"workers:{session_id}"


def command_lease_key(command_key: str) -> str:
    """The Dict key naming the session that runs a command (see :mod:`.launch`)."""
    return f"command:{command_key}"


def runs_lease_key(volume: str, runs_dir: str) -> str:
    return f"runs:{volume}:{runs_dir}"


def now_text() -> str:
    return datetime.now(UTC).isoformat()

"""Following a detached session from anywhere: its log as it is committed, until it ends.

The log is numbered chunks (:class:`~.supervise.LogChunks`); each look reads only the chunks not
read to their end yet. A session has ended when its controller's call is over; its exit status
is the call's result, else (an expired result) what ``status.json`` recorded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_modal_eval.detach.layout import SessionFiles
from pytest_modal_eval.detach.modal_calls import ModalCalls
from pytest_modal_eval.detach.names import INTERNAL_ERROR
from pytest_modal_eval.exceptions import DetachError

#: Seconds between looks at a running session.
POLL_S = 2.0


@dataclass(frozen=True)
class Ended:
    """How a session ended: pytest's exit status, and its state (finished, stopped, failed)."""

    exit_code: int
    state: str
    note: str | None = None  # what went wrong, when the runner itself failed


def read_status(calls: ModalCalls, session_id: str) -> dict[str, Any]:
    """The session's ``status.json`` ({} before its controller wrote one)."""
    try:
        data = json.loads(calls.read_bytes(str(SessionFiles(session_id).status)))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_request(calls: ModalCalls, session_id: str) -> dict[str, Any]:
    """The session's ``request.json``; DetachError when there is no such session."""
    try:
        data = json.loads(calls.read_bytes(str(SessionFiles(session_id).request)))
    except FileNotFoundError:
        raise DetachError(
            f"no detached session {session_id} on Volume {calls.volume_name}; "
            "`pytest-modal-eval logs` lists them"
        ) from None
    except ValueError:
        raise DetachError(f"session {session_id}: request.json is damaged") from None
    return data if isinstance(data, dict) else {}


class LogReader:
    """Reads what a session's log gained since the last look."""

    def __init__(self, calls: ModalCalls, session_id: str, worker: str | None = None) -> None:
        self.calls = calls
        self.folder = str(SessionFiles(session_id).log_dir(worker))
        self._read: dict[str, int] = {}  # chunk -> bytes already given

    def new_text(self) -> str:
        parts = []
        for chunk in sorted(self.calls.list_files(self.folder), key=lambda f: f.path):
            done = self._read.get(chunk.path, 0)
            if chunk.size <= done:
                continue
            try:
                data = self.calls.read_bytes(chunk.path)
            except FileNotFoundError:
                continue
            parts.append(data[done:].decode("utf-8", "replace"))
            self._read[chunk.path] = len(data)
        return "".join(parts)


def controller_call(calls: ModalCalls, session_id: str) -> str | None:
    """The call running the session's controller, once it has started."""
    call = read_status(calls, session_id).get("controller")
    return str(call) if call else None


def follow(
    calls: ModalCalls,
    session_id: str,
    call_id: str | None,
    write: Callable[[str], None],
    *,
    worker: str | None = None,
    until_end: bool = True,
) -> Ended | None:
    """Write the session's log as it grows; with ``until_end``, until the session ends (how
    it ended), else only what there is now (None)."""
    reader = LogReader(calls, session_id, worker)
    while True:
        if text := reader.new_text():
            write(text)
        if not until_end:
            return None
        call_id = call_id or controller_call(calls, session_id)
        if call_id is None:
            time.sleep(POLL_S)
            continue
        outcome = calls.poll(call_id, timeout=POLL_S)
        if outcome.over:
            if text := reader.new_text():  # its last lines, committed before it returned
                write(text)
            return ended(calls, session_id, outcome.state, outcome.value, outcome.error)


def ended(calls: ModalCalls, session_id: str, state: str, value: Any, error: str | None) -> Ended:
    if state == "done" and isinstance(value, dict) and isinstance(value.get("exit_code"), int):
        return Ended(int(value["exit_code"]), str(value.get("state") or "finished"))
    status = read_status(calls, session_id)
    code = status.get("exit_code")
    if isinstance(code, int) and status.get("state") in ("finished", "stopped"):
        return Ended(code, str(status["state"]))
    return Ended(
        code if isinstance(code, int) else INTERNAL_ERROR,
        str(status.get("state") or "failed"),
        error or f"the session's runner {state}",
    )


def pull_file(calls: ModalCalls, remote: str, local: Any) -> bool:
    """Copy one file of the Volume here; False when it is not there."""
    try:
        data = calls.read_bytes(remote)
    except FileNotFoundError:
        return False
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(data)
    return True

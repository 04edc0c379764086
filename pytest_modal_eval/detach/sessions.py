"""Detached sessions from outside: listing them, finding one by its id, and stopping one.

Stopping asks first (the Dict's ``stop:<session>``): the controller and its workers interrupt
their pytest, which saves what it finished and stops the servers it started (a deployment
another session uses is left alone), commit the Volume and end. A session that has not ended
after the wait is cancelled with its containers terminated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_modal_eval.detach.follow import Ended, ended, read_status
from pytest_modal_eval.detach.layout import SESSIONS, SessionFiles
from pytest_modal_eval.detach.modal_calls import ModalCalls
from pytest_modal_eval.detach.names import stop_key, workers_key
from pytest_modal_eval.exceptions import DetachError


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    state: str
    command: str
    launched_at: str
    exit_code: int | None
    controller: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session_id,
            "state": self.state,
            "command": self.command,
            "launched_at": self.launched_at,
            "exit_code": self.exit_code,
            "controller": self.controller,
        }


def session_ids(calls: ModalCalls) -> list[str]:
    return sorted(calls.list_dirs(str(SESSIONS)), reverse=True)


def find_session(calls: ModalCalls, given: str) -> str:
    """A session named by its id or a unique start of it; DetachError otherwise."""
    found = session_ids(calls)
    matches = [s for s in found if s == given] or [s for s in found if s.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    what = f"{len(matches)} sessions start with" if matches else "no detached session is"
    raise DetachError(
        f"{what} {given!r} on Volume {calls.volume_name}; `pytest-modal-eval logs` lists them"
    )


def describe(calls: ModalCalls, session_id: str) -> SessionInfo:
    files = SessionFiles(session_id)
    try:
        request = json.loads(calls.read_bytes(str(files.request)))
    except (FileNotFoundError, ValueError):
        request = {}
    status = read_status(calls, session_id)
    code = status.get("exit_code")
    return SessionInfo(
        session_id=session_id,
        state=str(status.get("state") or "starting"),
        command=str(request.get("command") or ""),
        launched_at=str(request.get("launched_at") or ""),
        exit_code=code if isinstance(code, int) and status.get("state") != "running" else None,
        controller=str(status["controller"]) if status.get("controller") else None,
    )


def stop(
    calls: ModalCalls, session_id: str, *, wait_s: float, say: Callable[[str], None]
) -> Ended | None:
    """End the session (None: it had ended already)."""
    info = describe(calls, session_id)
    if info.controller is None or calls.poll(info.controller).over:
        return None
    calls.put(stop_key(session_id), True)
    say(f"asked session {session_id} to stop; waiting up to {wait_s:.0f} s for it to save and end")
    outcome = calls.poll(info.controller, timeout=wait_s)
    workers = dict(calls.get(workers_key(session_id)) or {})
    if not outcome.over:
        say(f"session {session_id} did not end in time: terminating its containers")
        for call in [info.controller, *workers.values()]:
            calls.cancel(call, terminate=True)
        outcome = calls.poll(info.controller, timeout=30)
    for name, call in workers.items():  # a worker still running after its controller ended
        if not calls.poll(call).over:
            calls.cancel(call, terminate=True)
            say(f"terminated worker {name}")
    return ended(calls, session_id, outcome.state, outcome.value, outcome.error)

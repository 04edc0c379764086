"""Inside the runner's containers: the controller that runs a detached session, and the
workers of a fanned-out one.

The controller (:func:`run_controller`, one call per session) runs the session's pytest command
on the session's project files, with the runs in the Volume's ``outputs/``. Fanned out, it
starts one worker call per benchmark item (or per shard of its examples), waits for them,
merges each sharded benchmark's shards into one run (:mod:`.shards`), then runs the session's
command once more: every run is finished by then, so that pass sends nothing and makes the
session's summary, gates, baselines, JUnit XML and report exactly as a local session does.

One writer per benchmark across machines: a container takes the Dict lease of each benchmark
and model it writes (:mod:`.lease`) before it reloads the Volume and starts, and gives it up
after its last commit. Its owner is the container's function call, so the same call restarted
after a pre-emption takes its leases straight back, and a second call (another session, or a
worker started twice) waits for them and then finds the finished runs.

The fan-out itself is :mod:`.fanout`'s; what the controller and workers share is
:mod:`.runner`'s.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pytest_modal_eval.detach.fanout import fan_out
from pytest_modal_eval.detach.layout import OUTPUTS
from pytest_modal_eval.detach.modal_calls import ModalCalls
from pytest_modal_eval.detach.names import (
    INTERNAL_ERROR,
    INTERRUPTED,
    command_lease_key,
    now_text,
)
from pytest_modal_eval.detach.request import FRESH_OPTIONS, SessionRequest
from pytest_modal_eval.detach.runner import Container, SessionStatus
from pytest_modal_eval.exceptions import DetachError
from pytest_modal_eval.runs.local_key import share_key

# -- the controller ------------------------------------------------------------------------


def run_controller(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one detached session (the controller function's body); ``{"exit_code": N}``."""
    request = SessionRequest.from_json(payload)
    box = Container(request, None)
    status = SessionStatus(box.root / box.files.status)
    attempt = int(status.data.get("attempt") or 0) + 1
    status.update(
        session_id=request.session_id,
        state="running",
        controller=box.me,
        attempt=attempt,
        started_at=status.data.get("started_at") or now_text(),
    )
    if attempt > 1:
        box.log.say(f"attempt {attempt}: the session goes on from what the Volume holds")
    code = INTERNAL_ERROR
    state = "failed"
    try:
        if request.parallel:
            final = [a for a in request.args if a.partition("=")[0] not in FRESH_OPTIONS]
            ended = fan_out(box, status, lambda: box.run(_session_args(box, final)))
            code = INTERRUPTED if ended is None else ended
        else:
            box.leases.take([i.runs_dir for i in request.items], request.lock_timeout_s)
            box.calls.reload()  # what the previous writers of these runs committed
            code = box.run(_session_args(box, request.args))
        state = "stopped" if box.stopped else "finished" if code in (0, 1, 5) else "failed"
    except DetachError as exc:
        box.log.say(f"error: {exc}")
        status.update(error=box.redactor.text(str(exc)))
    except BaseException:
        _interrupted(box, status)
        raise
    status.update(state=state, exit_code=code, finished_at=now_text())
    box.calls.commit()
    box.leases.release()
    _forget(box.calls, request)
    return {"exit_code": code, "session": request.session_id, "state": state}


def _interrupted(box: Container, status: SessionStatus) -> None:
    """Pre-empted or cancelled: what was saved is committed; the leases and the command stay
    this call's, for the same input started again (a cancelled call's go stale)."""
    box.log.say("the container is ending (pre-emption or cancellation)")
    with contextlib.suppress(Exception):
        status.update(state="interrupted")
        box.calls.commit()


def _session_args(box: Container, args: list[str]) -> list[str]:
    request, files = box.request, box.files
    junit = [f"--junitxml={box.root / files.junit}"] if request.junit else []
    return box.command_args([*junit, *args], str(OUTPUTS), str(box.root / files.report))


def _forget(calls: ModalCalls, request: SessionRequest) -> None:
    """The command is no longer running: the same command starts a new session from now."""
    key = command_lease_key(request.command_key)
    try:
        record = calls.get(key)
        if isinstance(record, dict) and record.get("data", {}).get("session") == request.session_id:
            calls.pop(key)
    except DetachError:
        pass  # a stale record is told apart by its call's state


# -- a worker ------------------------------------------------------------------------------


def run_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """One benchmark item (or one shard of it) of a fanned-out session."""
    request = SessionRequest.from_json(payload["session"])
    name = str(payload["name"])
    box = Container(request, name)
    code = INTERNAL_ERROR
    try:
        box.leases.take([str(payload["lease"])], request.lock_timeout_s)
        box.calls.reload()
        share_key(box.root / OUTPUTS, box.root / str(payload["output"]))
        code = box.run(box.command_args(list(payload["args"]), str(payload["output"]), None))
    except DetachError as exc:
        box.log.say(f"error: {exc}")
    except BaseException:
        box.log.say("the container is ending (pre-emption or cancellation)")
        with contextlib.suppress(Exception):
            box.calls.commit()
        raise
    box.calls.commit()
    box.leases.release()
    return {"exit_code": code, "worker": name}

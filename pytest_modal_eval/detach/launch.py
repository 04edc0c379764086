"""Starting a detached session, or attaching to the one already running the same command.

A command is the same when its arguments, the directory it was typed in, the project's files,
its fan-out and the Volume are (``request.command_key``). The Dict key ``command:<key>`` is a
lease (:mod:`.lease`) naming the session that runs it: while that session's controller call
runs (or, before its call exists, while its launcher beats), running the command again, here or
on another machine, attaches to it instead of starting a second one. Its controller removes the
key when the session ends; a key left by a session whose call is over is taken over.

Starting: the project's files go to ``sessions/<id>/project/`` on the Volume, with the request;
the runner app is deployed (Modal builds its image the first time; a redeploy leaves running
containers alone); the controller is spawned; the key records its call.
"""

from __future__ import annotations

import json
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval.detach.app import build
from pytest_modal_eval.detach.image import local_environment
from pytest_modal_eval.detach.layout import SessionFiles, new_session_id
from pytest_modal_eval.detach.lease import BEAT_S, Lease, fresh
from pytest_modal_eval.detach.modal_calls import ModalCalls
from pytest_modal_eval.detach.names import command_lease_key, now_text
from pytest_modal_eval.detach.project import digest, project_files
from pytest_modal_eval.detach.request import PlannedItem, SessionRequest, command_key
from pytest_modal_eval.detach.spec import CONTROLLER, RunnerSpec


@dataclass(frozen=True)
class Handle:
    """A detached session, as the command that started (or found) it tells it."""

    session_id: str
    call_id: str | None
    app_name: str
    attached: bool  # it was running already: this command attached to it


@dataclass(frozen=True)
class Launch:
    """What ``pytest --detach`` hands over from the session it was typed in."""

    root: Path  # the project's root (pytest's rootdir)
    invocation: Path  # where pytest was started
    options: tuple[str, ...]
    paths: tuple[str, ...]
    items: tuple[PlannedItem, ...]
    benchmark_dirs: tuple[Path, ...]  # the collected benchmarks' directories: their data travel
    output_dir: Path  # never sent
    volume: str
    cpu: float
    memory_mib: int
    secrets: tuple[str, ...]  # named Modal secrets
    env_names: tuple[str, ...]  # variables whose values travel as a Modal secret
    parallel: bool
    junit: bool
    lock_timeout_s: float | None
    command: str
    serving_on_modal: bool = False
    keep_deployment: bool = False
    setting_names: tuple[str, ...] = ()  # settings that travel beside env_names, not secrets


def command_live(calls: ModalCalls, record: dict[str, Any]) -> bool:
    """Whether the session a ``command:`` record names still runs: its controller's call is
    not over, or (before there is one) its launcher beats."""
    call = (record.get("data") or {}).get("call")
    if call:
        return not calls.poll(str(call)).over
    return fresh(record)


def start_or_attach(launch: Launch, calls: ModalCalls, say: Callable[[str], None]) -> Handle:
    """Attach to the session running this command, or start one."""
    files = project_files(launch.root, launch.benchmark_dirs, [launch.output_dir])
    relative = launch.invocation.resolve().relative_to(launch.root.resolve()).as_posix()
    invocation = "" if relative == "." else relative
    key = command_key(
        launch.options,
        launch.paths,
        invocation,
        digest(launch.root, files),
        launch.items,
        launch.volume,
    )
    runner = RunnerSpec(
        image=local_environment(),
        volume=launch.volume,
        cpu=launch.cpu,
        memory_mib=launch.memory_mib,
        secrets=launch.secrets,
        env_names=launch.env_names,
        setting_names=launch.setting_names,
        project=launch.root.name,
    )
    session_id = new_session_id()
    data: dict[str, Any] = {"session": session_id, "call": None, "app": runner.app_name()}
    lease = Lease(calls, command_lease_key(key), f"launcher-{uuid.uuid4().hex}", data)
    holder = lease.try_take(lambda record: command_live(calls, record))
    if holder is not None:
        found = holder.get("data") or {}
        return Handle(str(found.get("session")), found.get("call"), str(found.get("app")), True)
    beating = _Beating(lease)
    try:
        request = SessionRequest(
            session_id=session_id,
            command_key=key,
            options=launch.options,
            paths=launch.paths,
            invocation=invocation,
            items=launch.items,
            volume=launch.volume,
            app_name=runner.app_name(),
            parallel=launch.parallel,
            junit=launch.junit,
            lock_timeout_s=launch.lock_timeout_s,
            launched_at=now_text(),
            command=launch.command,
            serving_on_modal=launch.serving_on_modal,
            keep_deployment=launch.keep_deployment,
        )
        say(f"uploading {len(files)} project files to Volume {launch.volume}")
        _upload(calls, launch.root, files, request)
        say(f"deploying the runner app {runner.app_name()}")
        calls.deploy(build(runner).app, runner.app_name())
        call = calls.spawn(runner.app_name(), CONTROLLER, request.to_json())
        lease.data = {**data, "call": call}
        lease.beat()
    except BaseException:
        beating.stop()
        lease.release()  # nothing runs this command: the next one starts afresh
        raise
    beating.stop()
    return Handle(session_id, call, runner.app_name(), False)


def _upload(calls: ModalCalls, root: Path, files: list[Path], request: SessionRequest) -> None:
    session = SessionFiles(request.session_id)
    with tempfile.TemporaryDirectory() as scratch:
        request_file = Path(scratch) / "request.json"
        request_file.write_text(json.dumps(request.to_json(), indent=2), encoding="utf-8")
        uploads = [(root / path, f"{session.project}/{path.as_posix()}") for path in files]
        calls.upload([*uploads, (request_file, str(session.request))])


class _Beating:
    """The launcher's lease beats while it uploads and deploys (an image build takes
    minutes): a second launcher meanwhile attaches instead of starting a session."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="launch-lease")
        self._thread.start()

    def _loop(self) -> None:
        while not self._done.wait(BEAT_S):
            try:
                self._lease.beat()
            except Exception:  # the launcher reports its own failure
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)

"""What the runner's controller and workers share in a container: the Dict keys, the session's
``status.json``, the leases a container holds, and :class:`Container` (the Volume, the Dict, the
log, and pytest run with the Volume kept committed)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_modal_eval.detach.layout import SessionFiles, volume_root
from pytest_modal_eval.detach.lease import BEAT_S, Lease, LeaseLost, fresh
from pytest_modal_eval.detach.modal_calls import ModalCalls
from pytest_modal_eval.detach.names import now_text, runs_lease_key, stop_key
from pytest_modal_eval.detach.request import SessionRequest
from pytest_modal_eval.detach.spec import RunnerSpec
from pytest_modal_eval.detach.supervise import LogChunks, Supervisor
from pytest_modal_eval.exceptions import DetachError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.runs.store import write_json_atomic


class SessionStatus:
    """``status.json``: where the session stands, for ``logs``, ``stop`` and a follower."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.data = {}

    def update(self, **fields: Any) -> None:
        self.data.update(fields, updated_at=now_text())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, self.data)


class Leases:
    """The Dict leases this container holds, beaten together."""

    def __init__(self, calls: ModalCalls, owner: str, session_id: str, log: LogChunks) -> None:
        self.calls = calls
        self.owner = owner
        self.session_id = session_id
        self.log = log
        self.held: list[Lease] = []
        self._last_beat = time.monotonic()

    def live(self, record: dict[str, Any]) -> bool:
        """A holder is live while it beats, or while its call runs (a pre-empted one is
        restarted and takes its leases back)."""
        if fresh(record):
            return True
        owner = str(record.get("owner") or "")
        return owner.startswith("fc-") and not self.calls.poll(owner).over

    def take(self, runs_dirs: list[str], timeout: float | None) -> None:
        """The leases of ``runs_dirs``, in sorted order (two sessions never wait on each
        other); DetachError when one stays held past ``timeout`` seconds."""
        for runs_dir in sorted(set(runs_dirs)):
            key = runs_lease_key(self.calls.volume_name, runs_dir)
            if any(lease.key == key for lease in self.held):
                continue
            lease = Lease(self.calls, key, self.owner, {"session": self.session_id})

            def waiting(record: dict[str, Any], name: str = runs_dir) -> None:
                holder = (record.get("data") or {}).get("session", "?")
                self.log.say(f"waiting for {name}: session {holder} is writing it")

            try:
                lease.take(self.live, timeout=timeout, waiting=waiting)
            except TimeoutError:
                raise DetachError(
                    f"{runs_dir} is still being written by another session after "
                    f"{timeout:.0f} s (--eval-lock-timeout); run the command again later"
                ) from None
            self.held.append(lease)

    def beat(self) -> str | None:
        """Beat every :data:`BEAT_S` seconds; why to stop when a lease was lost."""
        if time.monotonic() - self._last_beat < BEAT_S:
            return None
        self._last_beat = time.monotonic()
        for lease in self.held:
            try:
                lease.beat()
            except LeaseLost as exc:
                return str(exc)
        return None

    def release(self) -> None:
        for lease in self.held:
            try:
                lease.release()
            except DetachError as exc:  # it goes stale on its own
                self.log.say(f"could not release {lease.key}: {exc}")
        self.held.clear()


class Container:
    """What the controller and a worker share: the Volume, the Dict, the log, the leases."""

    def __init__(self, request: SessionRequest, log_name: str | None) -> None:
        self.request = request
        self.calls = ModalCalls(request.volume)
        self.root = volume_root()
        self.me = self.calls.current_call_id() or f"pid-{os.getpid()}-{time.time_ns()}"
        self.files = SessionFiles(request.session_id)
        spec = RunnerSpec.from_env()
        self.redactor = Redactor.from_environ(names=spec.env_names if spec else ())
        self.calls.reload()  # what was committed since this container started
        self.log = LogChunks(self.root / self.files.log_dir(log_name), self.redactor)
        self.leases = Leases(self.calls, self.me, request.session_id, self.log)
        self.stopped = False

    @property
    def project(self) -> Path:
        return self.root / self.files.project

    @property
    def cwd(self) -> Path:
        return self.project / self.request.invocation

    def check(self) -> str | None:
        """Why pytest must end now (a stop request, a lost lease), or None. Modal failing to
        answer is not a reason: the next look asks again."""
        try:
            if self.calls.get(stop_key(self.request.session_id)):
                self.stopped = True
                return "a stop was requested (pytest-modal-eval stop)"
            return self.leases.beat()
        except DetachError as exc:
            self.log.say(f"could not look for a stop request or beat the leases: {exc}")
            return None

    def env(self) -> dict[str, str]:
        """pytest's environment: this container's, with the project's own code importable."""
        paths = [
            str(self.project),
            *([str(self.project / "src")] * (self.project / "src").is_dir()),
        ]
        python_path = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        return {**os.environ, "PYTHONPATH": python_path, "COLUMNS": "120"}

    def command_args(self, args: list[str], output: str, report: str | None) -> list[str]:
        """``args`` with this container's outputs: runs under ``output`` (a Volume path), the
        HTML report at ``report`` ("none": none), the cache on this container's disk."""
        extra = [
            f"--eval-output-dir={self.root / output}",
            f"--eval-report={report or 'none'}",
            # pytest's cache (and the run index in it) stays on this container's disk: run
            # directories are found on the Volume by their answer key.
            "-o",
            f"cache_dir={Path(tempfile.gettempdir()) / 'pytest-modal-eval-cache'}",
        ]
        if not _plugin_installed():
            extra[:0] = ["-p", "pytest_modal_eval.plugin"]
        return [*extra, *args]

    def run(self, args: list[str]) -> int:
        supervisor = Supervisor(self.log, self.calls.commit, self.check)
        return supervisor.run(args, self.cwd, self.env())


def _plugin_installed() -> bool:
    """Whether pytest finds this plugin by its entry point (else it is named with ``-p``)."""
    return any(
        ep.value == "pytest_modal_eval.plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )

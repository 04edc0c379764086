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

A restarted controller does not start its workers again: their calls are recorded in the Dict
(``workers:<session>``) as they are started.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.detach.layout import OUTPUTS, SessionFiles, shard_output, volume_root
from pytest_modal_eval.detach.lease import BEAT_S, Lease, LeaseLost, fresh
from pytest_modal_eval.detach.modal_calls import ModalCalls
from pytest_modal_eval.detach.request import FRESH_OPTIONS, PlannedItem, SessionRequest
from pytest_modal_eval.detach.spec import WORKER, RunnerSpec
from pytest_modal_eval.detach.supervise import LogChunks, Supervisor
from pytest_modal_eval.exceptions import DetachError, ServingError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.runs.store import write_json_atomic

if TYPE_CHECKING:
    from pytest_modal_eval.serving.modal.apps import ModalApps

#: pytest's exit status for an interrupted session (a stop request).
INTERRUPTED = 2
#: pytest's exit status for an internal error: what a session that could not run reports.
INTERNAL_ERROR = 3
#: Seconds between looks at a fanned-out session's workers.
WORKER_POLL_S = 2.0


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


class SessionStatus:
    """``status.json``: where the session stands, for ``logs``, ``stop`` and a follower."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            import json

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
            code = _fan_out(box, status)
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


def worker_plan(request: SessionRequest) -> list[dict[str, Any]]:
    """The workers of a fanned-out session: one per item, or per shard of a sharded item."""
    plan = []
    for item in request.items:
        if item.shards <= 1:
            plan.append(_worker(request, item, None))
        else:
            plan += [_worker(request, item, (k, item.shards)) for k in range(1, item.shards + 1)]
    return plan


def _worker(
    request: SessionRequest, item: PlannedItem, shard: tuple[int, int] | None
) -> dict[str, Any]:
    options = list(request.options)
    if request.serving_on_modal:  # the controller stops the deployment (see ServingApps)
        options.append("--keep-deployment")
    name = item.runs_dir
    output = str(OUTPUTS)
    lease = item.runs_dir
    if shard is not None:
        name = f"{item.runs_dir}--{shard[0]}-of-{shard[1]}"
        output = str(shard_output(item.runs_dir, shard))
        lease = name
        options += [f"--eval-shard={shard[0]}/{shard[1]}", "--no-early-stop"]
    return {
        "session": request.to_json(),
        "name": name,
        "args": [*options, item.nodeid],
        "output": output,
        "lease": lease,
    }


class ServingApps:
    """A fanned-out session's Modal deployments. Its workers share one deployment per server
    and leave it up (``--keep-deployment``: the first to end would stop it under the others);
    at the session's end the controller stops those that appeared while it ran, never one
    deployed before it (another session's, or one kept on purpose)."""

    def __init__(self, apps: ModalApps) -> None:
        self.apps = apps
        self.before = {record.name for record in apps.deployed() if record.ours}

    def stop_new(self, say: Callable[[str], None]) -> None:
        for record in self.apps.deployed():
            if record.ours and record.name not in self.before:
                try:
                    self.apps.stop(record.name)
                    say(f"stopped the deployment {record.name} this session started")
                except ServingError as exc:
                    say(f"could not stop {record.name}: {exc}")


def _fan_out(box: Container, status: SessionStatus) -> int:
    request = box.request
    serving = None
    if request.serving_on_modal and not request.keep_deployment:
        from pytest_modal_eval.serving.modal.apps import ModalCliApps

        serving = ServingApps(ModalCliApps())
    try:
        return _fan_out_and_report(box, status)
    finally:
        if serving is not None:
            serving.stop_new(box.log.say)


def _fan_out_and_report(box: Container, status: SessionStatus) -> int:
    request, calls = box.request, box.calls
    plan = worker_plan(request)
    started: dict[str, str] = dict(calls.get(workers_key(request.session_id)) or {})
    for worker in plan:
        if worker["name"] in started:
            continue
        started[worker["name"]] = calls.spawn(request.app_name, WORKER, worker)
        calls.put(workers_key(request.session_id), started)
        box.log.say(f"worker {worker['name']} started ({started[worker['name']]})")
    status.update(workers={name: {"call": call} for name, call in started.items()})
    outcomes = _wait_for_workers(box, started, status)
    if box.stopped:
        return INTERRUPTED
    for name, outcome in sorted(outcomes.items()):
        box.log.say(f"worker {name}: {outcome}")
    _merge_sharded(box)
    final = [a for a in request.args if a.partition("=")[0] not in FRESH_OPTIONS]
    box.leases.take([i.runs_dir for i in request.items], request.lock_timeout_s)
    box.calls.reload()
    box.log.say("every worker is done: the session's summary, gates and report")
    return box.run(_session_args(box, final))


def _wait_for_workers(
    box: Container, started: dict[str, str], status: SessionStatus
) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    told_stop = False
    while len(outcomes) < len(started):
        for name, call in started.items():
            if name in outcomes:
                continue
            outcome = box.calls.poll(call)
            if outcome.over:
                value = outcome.value if isinstance(outcome.value, dict) else {}
                outcomes[name] = box.redactor.text(
                    f"exit status {value.get('exit_code')}"
                    if outcome.state == "done"
                    else f"{outcome.state}: {outcome.error or 'no result'}"
                )
                status.update(
                    workers={
                        **status.data.get("workers", {}),
                        name: {"call": call, "outcome": outcomes[name]},
                    }
                )
        reason = box.check()
        if reason is not None and not told_stop:
            told_stop = True  # the workers read the same stop request
            box.log.say(f"ending the workers: {reason}")
        if len(outcomes) < len(started):
            box.calls.commit()  # the log, for followers
            time.sleep(WORKER_POLL_S)
    return outcomes


def _merge_sharded(box: Container) -> None:
    from pytest_modal_eval.detach.shards import merge_shards

    for item in box.request.items:
        if item.shards <= 1:
            continue
        box.leases.take([item.runs_dir], box.request.lock_timeout_s)
        box.calls.reload()
        outputs = [
            box.root / shard_output(item.runs_dir, (k, item.shards))
            for k in range(1, item.shards + 1)
        ]
        merged = merge_shards(
            outputs, item.runs_dir, box.root / OUTPUTS, box.root / "shards" / item.runs_dir
        )
        for line in merged:
            box.log.say(line)
        box.calls.commit()


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

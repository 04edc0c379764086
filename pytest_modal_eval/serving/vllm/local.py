"""Run vLLM on this machine (``--backend local``), e.g. vLLM's CPU build in CI.

Process layout, and why: vLLM's API server starts engine-core and worker processes, and when the
API server is SIGKILLed those children live on (measured). So vLLM runs under a tiny supervisor
(``_SUPERVISOR``, run by the vLLM interpreter) that leads its own process group:

    pytest ── supervisor (group leader, new session) ── vLLM API server ── EngineCore ── Worker

vLLM's output (stdout and stderr) reaches ``vllm.log`` through the supervisor, which replaces
the secrets the session knows with ``[redacted]`` as it copies them (vLLM prints its
arguments, and its errors may quote its environment). It matches across lines and writes: it
writes whole lines, and holds back text that could be the start of a secret until the rest
arrives or the output stays quiet for a moment, so a secret of several lines is found whole.
The supervisor is told what to look for through its stdin, so no secret appears on a command
line or in an environment it did not already have; it outlives pytest for as long as vLLM does,
so the log stays redacted however pytest ends.

The supervisor watches ``os.getppid()``: when pytest dies, however it dies, the supervisor is
re-parented and then takes the whole group down (SIGTERM, grace, SIGKILL). Polling the parent
pid is used instead of ``PR_SET_PDEATHSIG`` because that signal fires when the *thread* that
spawned the child exits, and servers are started from worker threads (the xdist broker).
``stop()`` asks the supervisor the same way, then SIGKILLs whatever is left of the group.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx

from pytest_modal_eval import phases
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.redact import Redactor, redact_args, secret_arg_values
from pytest_modal_eval.serving import log_redaction
from pytest_modal_eval.serving.chat_template import load_fallback, resolve_for_model
from pytest_modal_eval.serving.endpoint import LOG_TAIL_LINES, Endpoint, ServerProfile
from pytest_modal_eval.serving.preflight import error_cause, find_vllm, model_dir_problem
from pytest_modal_eval.serving.vllm.command import vllm_args, vllm_command
from pytest_modal_eval.serving.vllm.startup_log import latest_phase

LOG_NAME = "vllm.log"
TEMPLATE_NAME = "chat_template.jinja"
BIND_ATTEMPTS = 3  # a free port can be taken between choosing it and vLLM binding it
STOP_GRACE_S = 10.0  # vLLM's own graceful shutdown takes a few seconds
_POLL_S = 0.5
# vLLM binds its port before loading the model (launcher.setup_server), so a taken port fails
# within seconds with this OSError.
_BIND_ERRORS = ("Address already in use", "[Errno 98]")

# Runs in the vLLM interpreter after serving/log_redaction.py's source (see _supervisor):
# stdlib only, argv = parent pid, grace seconds, command...; stdin = what to redact
# (Redactor.to_json()), one JSON line, then a new line each time the session learns a secret.
_SUPERVISOR = r"""
import json, os, signal, subprocess, sys, threading, time

parent, grace, cmd = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
asked = []
signal.signal(signal.SIGTERM, lambda *_: asked.append(True))


# Unbuffered: a thread blocked reading a buffered stdin aborts the interpreter at exit.
stdin = open(0, "rb", buffering=0, closefd=False)
current = [LogRules(json.loads(stdin.readline() or b"{}"))]


def listen():
    # Each later line replaces the rules whole; at EOF (pytest gone) the last ones stay.
    for raw in iter(stdin.readline, b""):
        try:
            current[0] = LogRules(json.loads(raw))
        except (ValueError, re.error):
            pass


threading.Thread(target=listen, daemon=True).start()
child = subprocess.Popen(
    cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
)


def copy():
    # vLLM's output to the log, without the secrets (across lines and writes).
    out = sys.stdout.buffer

    def write(text):
        out.write(text.encode("utf-8", "surrogateescape"))
        out.flush()

    copy_redacted(child.stdout.fileno(), write, lambda: current[0])


copier = threading.Thread(target=copy, daemon=True)
copier.start()


def others():
    # Live members of this process group other than us; zombies hold nothing.
    if not os.path.isdir("/proc"):
        return [child.pid] if child.poll() is None else []
    me, group, found = os.getpid(), os.getpgid(0), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open("/proc/%s/stat" % entry) as fh:
                    state, _ppid, pgrp = fh.read().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError, IndexError):
                continue
            if state != "Z" and int(pgrp) == group:
                found.append(int(entry))
    return found


def send(sig):
    for pid in others():
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def settle(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        child.poll()  # reap vLLM as soon as it exits
        if not others():
            return True
        time.sleep(0.1)
    return False


while child.poll() is None and not asked and os.getppid() == parent:
    time.sleep(0.2)
# vLLM exited, was asked to stop, or pytest is gone: take the rest of the group down.
send(signal.SIGTERM)
if not settle(grace):
    send(signal.SIGKILL)
    settle(5.0)
code = child.wait()
copier.join(5.0)  # the rest of the output; the group is gone, so the pipe is at its end
sys.exit(code if code >= 0 else 128 - code)
"""


def supervisor() -> str:
    """The supervisor's program: :mod:`..log_redaction`'s source, then :data:`_SUPERVISOR`."""
    return Path(log_redaction.__file__).read_text(encoding="utf-8") + _SUPERVISOR


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


class LocalVllmServer:
    """vLLM on 127.0.0.1, started with ``python`` (an interpreter that has vLLM)."""

    def __init__(
        self,
        profile: ServerProfile,
        *,
        logs_dir: Path,
        python: str,
        served_model_name: str | None = None,
        port: int | None = None,  # first port to try; None = any free one
        stop_grace_s: float = STOP_GRACE_S,
        redactor: Redactor | None = None,
    ) -> None:
        """``redactor``: the secrets kept out of ``vllm.log`` (default: the environment's)."""
        self.profile = profile
        self.redactor = redactor or Redactor.from_environ()
        self.logs_dir = Path(logs_dir)
        self.python = python
        self.served_model_name = served_model_name or profile.model
        self.stop_grace_s = stop_grace_s
        self._first_port = port
        self._proc: subprocess.Popen[bytes] | None = None
        self._secrets = Redactor()
        self._stdin_lock = threading.Lock()
        self.port: int | None = None
        self.attempts = 0  # launches made by the last start(), >1 after a port clash
        self.endpoint: Endpoint | None = None

    @property
    def log_path(self) -> Path:
        return self.logs_dir / LOG_NAME

    @property
    def pid(self) -> int | None:
        """The supervisor's pid, which is also the process group id of every vLLM process."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> Endpoint:
        if self.endpoint is not None:
            return self.endpoint
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.preflight()
        choice = resolve_for_model(
            self.profile.model,
            load_fallback(self.profile.chat_template),
            extra_args=self.profile.vllm.extra_args,
            revision=self.profile.vllm.revision,
        )
        template_path = None
        if choice.text is not None:
            # A copy next to the log documents exactly what the server was given.
            path = self.logs_dir / TEMPLATE_NAME
            path.write_text(choice.text, encoding="utf-8")
            template_path = str(path)

        deadline = time.monotonic() + self.profile.infra.startup_timeout
        port = self._first_port or free_port()
        self.attempts = 0
        while True:
            self.attempts += 1
            if self._launch_and_wait(port, template_path, deadline):
                break
            if self.attempts >= BIND_ATTEMPTS:
                raise self._failure(f"vLLM could not bind a port in {BIND_ATTEMPTS} attempts")
            self._note(f"port {port} was taken; retrying on another port")
            port = free_port()
        self.port = port
        self.endpoint = Endpoint(
            base_url=f"http://127.0.0.1:{port}/v1",
            model=self.served_model_name,
            chat_template=choice.provenance,
        )
        return self.endpoint

    def preflight(self) -> None:
        """The checks that need no vLLM start: the model directory, and that the interpreter
        imports vLLM. Each fails in one line, not after a start-up's worth of log."""
        problem = model_dir_problem(self.profile.model)
        if problem is not None:
            raise ServingError(problem)
        found = find_vllm(self.python)
        if not found.ok:
            raise ServingError(f"--backend local: {found.message()}")
        self._note(f"{found.version} in {self.python}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        self.endpoint = None
        if proc is None:
            return
        self._close_supervisor_stdin(proc)
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)  # the supervisor relays it to vLLM
                proc.wait(timeout=self.stop_grace_s + 7)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        # Whatever is left (the supervisor itself included, if it hung): no survivors.
        deadline = time.monotonic() + 10
        while (members := group_members(proc.pid)) and time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        if members:
            self._note(f"processes {members} survived SIGKILL")
        proc.wait()

    # -- startup ------------------------------------------------------------------------

    def _launch_and_wait(self, port: int, template_path: str | None, deadline: float) -> bool:
        """Start vLLM on ``port``; True once it serves our model, False if the port was taken."""
        args = vllm_args(
            self.profile,
            served_model_name=self.served_model_name,
            host="127.0.0.1",
            port=port,
            chat_template_path=template_path,
        )
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._spawn(vllm_command(self.python, args))
        assert self._proc is not None
        base = f"http://127.0.0.1:{port}"
        phases.detail("launching")
        read = offset  # how far this launch's log has been read for vLLM's own phase
        with httpx.Client(trust_env=False, timeout=5.0) as client:
            while True:
                if (size := self._log_size()) > read:
                    found = latest_phase(self._log_since(read, size))
                    read = size
                    if found is not None:
                        phases.detail(found)
                code = self._proc.poll()
                if code is not None:
                    self.stop()  # sweep engine processes a crashed API server left behind
                    if any(err in self._log_since(offset) for err in _BIND_ERRORS):
                        return False
                    raise self._failure(f"vLLM exited with code {code} during startup", offset)
                if self._ready(client, base):
                    return True
                if time.monotonic() > deadline:
                    self.stop()
                    raise self._failure(
                        f"vLLM did not answer within startup_timeout="
                        f"{self.profile.infra.startup_timeout}s",
                        offset,
                    )
                time.sleep(_POLL_S)

    def _spawn(self, cmd: list[str]) -> None:
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default is far larger
        # A local server on 127.0.0.1 needs no key, and an inherited one would make our own
        # readiness probe (and every client) fail with 401.
        env.pop("VLLM_API_KEY", None)
        self._note(f"$ {shlex.join(redact_args(cmd))}")
        # The session's secrets, and those given to vLLM as flags (vLLM hides some of them);
        # the supervisor hears of each secret the session learns later (a judge's key).
        self._secrets = Redactor([*self.redactor.values, *secret_arg_values(cmd)])
        supervised = [self.python, "-c", supervisor(), str(os.getpid()), str(self.stop_grace_s)]
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(
                    [*supervised, *cmd],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # own group: stop() can kill it whole
                )
            except OSError as exc:
                raise ServingError(f"cannot run the vLLM interpreter {self.python}: {exc}") from exc
        self._tell_supervisor()
        self.redactor.tell(self._learned)

    def _learned(self, values: list[str]) -> None:
        known = len(self._secrets.values)
        self._secrets.learn(values)
        if len(self._secrets.values) > known:
            self._tell_supervisor()

    def _tell_supervisor(self) -> None:
        """The secrets to the supervisor's stdin, one JSON line. A supervisor that died before
        reading it is seen by the wait for vLLM, with its log."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        line = json.dumps(self._secrets.to_json()).encode() + b"\n"
        with self._stdin_lock, contextlib.suppress(OSError, ValueError):
            proc.stdin.write(line)
            proc.stdin.flush()

    def _close_supervisor_stdin(self, proc: subprocess.Popen[bytes]) -> None:
        self.redactor.stop_telling(self._learned)
        if proc.stdin is not None:
            with self._stdin_lock, contextlib.suppress(OSError, ValueError):
                proc.stdin.close()

    def _ready(self, client: httpx.Client, base: str) -> bool:
        try:
            if client.get(f"{base}/health").status_code != 200:
                return False
            response = client.get(f"{base}/v1/models")
            if response.status_code != 200:
                return False
            return self.served_model_name in [m.get("id") for m in response.json()["data"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return False

    # -- helpers ------------------------------------------------------------------------

    def _log_since(self, offset: int, end: int | None = None) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                data = fh.read() if end is None else fh.read(max(0, end - offset))
                return data.decode(errors="replace")
        except OSError:
            return ""

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _note(self, line: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(f"[pytest-modal-eval] {self.redactor.text(line)}\n")

    def _failure(self, what: str, offset: int = 0) -> ServingError:
        """The error for a failed start: its cause first (the last exception the launch
        logged), then the tail of this launch's log only, then what to check."""
        logged = self._log_since(offset)
        cause = error_cause(logged)
        tail = "\n".join(logged.splitlines()[-LOG_TAIL_LINES:]) or "(no log)"
        return ServingError(
            f"{what}{f': {cause}' if cause else ''}.\nLog: {self.log_path}\n"
            f"--- last {LOG_TAIL_LINES} lines ---\n{tail}\n---\n"
            f"Check: that {self.python} has vLLM, that --model {self.profile.model} exists "
            f"(a directory, or a Hub id that is cached or reachable), and the vllm.* settings."
        )

"""One stand-in Modal sandbox: its main command and what ends it, as Modal's sandboxes end.

Run as ``python sandbox_supervisor.py SANDBOX_DIR`` in a session of its own (it outlives the
process that created it, as a Modal sandbox outlives its client). ``SANDBOX_DIR/spec.json``
holds the main command (``argv``), ``env``, ``workdir``, ``timeout`` and ``idle_timeout``.
The sandbox ends when its main command exits, after ``timeout`` seconds, after
``idle_timeout`` seconds with no command running in it (``execs/PID``) and no stdin written
or file touched (``activity``'s time), or when ``terminate`` appears; every process in it is
then killed and ``ended`` says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def main() -> None:
    # Detach: the creator waits for this first process only, the sandbox lives on in a child.
    if os.fork():
        os._exit(0)
    box = Path(sys.argv[1])
    spec = json.loads((box / "spec.json").read_text())
    Path(spec["workdir"]).mkdir(parents=True, exist_ok=True)
    main_command = subprocess.Popen(
        spec["argv"],
        cwd=spec["workdir"],
        env={**os.environ, **spec["env"]},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    started = last_active = time.monotonic()
    seen = (box / "activity").stat().st_mtime
    (box / "supervisor.pid").write_text(str(os.getpid()))
    reason = None
    while reason is None:
        time.sleep(0.1)
        now = time.monotonic()
        running = [int(p.name) for p in (box / "execs").iterdir() if alive(int(p.name))]
        touched = (box / "activity").stat().st_mtime
        if running or touched != seen:
            last_active, seen = now, touched
        if main_command.poll() is not None:
            reason = "main command exited"
        elif spec["timeout"] is not None and now - started > spec["timeout"]:
            reason = "timeout"
        elif spec["idle_timeout"] is not None and now - last_active > spec["idle_timeout"]:
            reason = "idle_timeout"
        elif (box / "terminate").exists():
            reason = "terminated"
    kill_all(box, main_command.pid)
    main_command.wait()
    (box / "ended").write_text(reason)
    # A command registered while the first sweep ran: the second sweep ends it, and one
    # registered after this sees ``ended`` and ends itself (Sandbox.exec in the stand-in).
    kill_all(box, main_command.pid)


def kill_all(box: Path, main_pid: int) -> None:
    for pid in [main_pid, *(int(p.name) for p in (box / "execs").iterdir())]:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()

"""One stand-in function call: its containers, started and restarted on Modal's terms.

Run as ``python function_supervisor.py CALL_DIR`` in a session of its own (a call outlives the
process that spawned it). ``CALL_DIR/spec.json`` holds the function (module, qualname), its
Volumes, environment and retries; ``input.json`` its arguments. Each attempt is a container
(``attempt-N/``): a process group running ``function_runner.py``, whose leader's pid is in
``attempt-N/pid`` (what a test kills to pre-empt it) and, once it ended, its status in
``attempt-N/exit``. The call's outcome goes to ``outcome.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: What a container keeps of this machine's environment (the rest comes from secrets and env).
BASICS = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "PYTHONHASHSEED", "SYSTEMROOT")
#: Restarts of a pre-empted container before the call is given up.
MAX_RESTARTS = 10


def main() -> None:
    if os.fork():  # the spawner waits for this first process only
        os._exit(0)
    call_dir = Path(sys.argv[1])
    sys.path.insert(0, str(HERE))
    from modal import _fake_store as _store  # the stand-in's own
    from modal import _fake_volumes as _volumes

    spec = json.loads((call_dir / "spec.json").read_text())
    (call_dir / "supervisor.pid").write_text(str(os.getpid()))
    failures = restarts = 0
    attempt = 0
    outcome: dict[str, object] = {"state": "failed", "error": "never ran"}
    while True:
        attempt += 1
        folder = call_dir / f"attempt-{attempt}"
        (folder / "tmp").mkdir(parents=True)
        mounts = {}
        for name in spec["volumes"].values():
            mount = call_dir / "mounts" / name  # the same directory for every attempt of a call
            _volumes.mount(name, mount, Path(f"{mount}.manifest.json"))
            mounts[name] = str(mount)
        env = {k: v for k, v in os.environ.items() if k in BASICS}
        env.update(spec["env"])
        env.update(
            FAKE_MODAL_ROOT=str(_store.root()),
            FAKE_MODAL_CALL_ID=call_dir.name,
            FAKE_MODAL_MOUNTS=json.dumps(mounts),
            TMPDIR=str(folder / "tmp"),
            MODAL_IS_REMOTE="1",
        )
        if mounts:  # where the plugin's runner finds its Volume (it mounts one, at /results)
            env["MODAL_EVAL_VOLUME_MOUNT"] = next(iter(mounts.values()))
        with (folder / "output.log").open("wb") as output:
            container = subprocess.Popen(
                [sys.executable, str(HERE / "function_runner.py"), str(call_dir), str(folder)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            (folder / "pid").write_text(str(container.pid))
            code = container.wait()
        (folder / "exit").write_text(str(code))
        result = _store.read_json(folder / "result.json")
        cancelled = (call_dir / "cancelled.json").exists()
        if result is not None and "value" in result:
            outcome = {"state": "done", "value": result["value"]}
            break
        if cancelled:
            outcome = {"state": "cancelled", "error": "the call was cancelled"}
            break
        if code < 0:  # killed by a signal: pre-empted, started again on the same input
            restarts += 1
            if restarts > MAX_RESTARTS:
                outcome = {"state": "failed", "error": f"killed {restarts} times"}
                break
            continue
        failures += 1
        error = (result or {}).get("error") or f"exit status {code}"
        if failures > spec["retries"]:
            outcome = {"state": "failed", "error": error}
            break
    _store.write_json(call_dir / "outcome.json", outcome)


if __name__ == "__main__":
    main()

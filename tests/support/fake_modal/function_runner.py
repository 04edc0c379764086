"""A stand-in container's main process: imports the function's module and calls it on the
call's input, as Modal's container entrypoint does; SIGUSR1 (a cancellation) raises
``modal.exception.InputCancellation`` in it."""

from __future__ import annotations

import importlib
import json
import signal
import sys
import traceback
from pathlib import Path
from typing import Any


def main() -> None:
    call_dir, folder = Path(sys.argv[1]), Path(sys.argv[2])
    import modal.exception
    from modal import _fake_store as _store

    def cancelled(signum: int, frame: Any) -> None:
        raise modal.exception.InputCancellation("Input was cancelled by the caller")

    signal.signal(signal.SIGUSR1, cancelled)
    spec = json.loads((call_dir / "spec.json").read_text())
    given = json.loads((call_dir / "input.json").read_text())
    function = getattr(importlib.import_module(spec["module"]), spec["qualname"])
    try:
        value = function(*given["args"], **given["kwargs"])
    except BaseException as exc:
        traceback.print_exc()
        _store.write_json(folder / "result.json", {"error": f"{type(exc).__name__}: {exc}"})
        sys.exit(1)
    _store.write_json(folder / "result.json", {"value": value})


if __name__ == "__main__":
    main()

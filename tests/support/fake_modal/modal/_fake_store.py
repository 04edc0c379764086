"""Where the stand-in keeps apps, calls, Volumes and Dicts: ``FAKE_MODAL_ROOT`` (a directory
a test gives). Inside a stand-in container, ``FAKE_MODAL_CALL_ID`` names its call and
``FAKE_MODAL_MOUNTS`` maps each mounted Volume's name to the local directory standing in for
its mount."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def root() -> Path:
    found = os.environ.get("FAKE_MODAL_ROOT")
    if not found:
        raise RuntimeError("the Modal stand-in needs FAKE_MODAL_ROOT (a directory)")
    return Path(found)


def mounts() -> dict[str, str]:
    """Volume name -> this container's mount (empty outside a stand-in container)."""
    return dict(json.loads(os.environ.get("FAKE_MODAL_MOUNTS") or "{}"))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value), encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def start_supervisor(script: Path, folder: Path, env: Mapping[str, str] | None = None) -> None:
    """Start ``script FOLDER`` in a session of its own: it forks and outlives its starter, as
    a Modal sandbox or function call outlives its client."""
    subprocess.run(
        [sys.executable, str(script), str(folder)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        env=None if env is None else dict(env),
    )

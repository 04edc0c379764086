"""Put the local stand-in for Modal's SDK (``tests/support/fake_modal``) in place of ``modal``
for one test, in this process; a subprocess gets it with :data:`FAKE_MODAL` first on
``PYTHONPATH`` and ``FAKE_MODAL_SANDBOXES`` (sandboxes) or ``FAKE_MODAL_ROOT`` (functions,
Volumes, Dicts) set. The stand-in's function calls left running are found and ended here."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.fake_modal.sandbox_supervisor import alive

FAKE_MODAL = Path(__file__).resolve().parent / "fake_modal"


def install_fake_modal(monkeypatch: pytest.MonkeyPatch, root: Path) -> ModuleType:
    """The stand-in as ``modal`` (and ``modal.config``, ``modal.exception``) until the test
    ends, its sandboxes under ``root``; the real SDK's modules come back after."""
    monkeypatch.setenv("FAKE_MODAL_SANDBOXES", str(root))
    # The real SDK is imported first, so that what it had in sys.modules comes back after.
    import modal.config  # noqa: F401

    spec = importlib.util.spec_from_file_location(
        "modal",
        FAKE_MODAL / "modal" / "__init__.py",
        submodule_search_locations=[str(FAKE_MODAL / "modal")],
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    for name in [n for n in sys.modules if n == "modal" or n.startswith("modal.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "modal", module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "modal.config", module.config)
    monkeypatch.setitem(sys.modules, "modal.exception", module.exception)
    return module


def running_sandboxes(root: Path) -> list[str]:
    """Stand-in sandboxes with their supervisor or any process run in them still alive."""
    left = []
    for box in sorted(root.glob("sb-*")):
        pids = [int(p.name) for p in (box / "execs").iterdir()]
        supervisor = box / "supervisor.pid"
        if supervisor.exists():
            pids.append(int(supervisor.read_text()))
        if any(alive(pid) for pid in pids):
            left.append(box.name)
    return left


def left_running(root: Path, grace: float = 10.0) -> list[str]:
    """Stand-in sandboxes still running ``grace`` seconds from now. A process killed as its
    sandbox ended, and the supervisor that has just written ``ended``, take a moment to exit;
    a sandbox left running does not."""
    deadline = time.monotonic() + grace
    while (left := running_sandboxes(root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def call_processes(root: Path) -> dict[str, list[int]]:
    """Stand-in function calls under ``FAKE_MODAL_ROOT`` ``root`` whose supervisor or a
    container is still alive: call id -> those processes."""
    alive_now: dict[str, list[int]] = {}
    for call in sorted((root / "calls").glob("fc-*")):
        pids = [int(p.read_text()) for p in call.glob("attempt-*/pid")]
        supervisor = call / "supervisor.pid"
        if supervisor.exists():
            pids.append(int(supervisor.read_text()))
        if living := [pid for pid in pids if alive(pid)]:
            alive_now[call.name] = living
    return alive_now


def end_calls(root: Path) -> None:
    """Kill every stand-in call's supervisor and containers (a test's clean-up)."""
    import os
    import signal

    for call in sorted((root / "calls").glob("fc-*")):
        supervisor = call / "supervisor.pid"
        if supervisor.exists():
            with contextlib.suppress(OSError):
                os.kill(int(supervisor.read_text()), signal.SIGKILL)
        for pid_file in call.glob("attempt-*/pid"):
            with contextlib.suppress(OSError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def calls_left_running(root: Path, grace: float = 15.0) -> dict[str, list[int]]:
    """Calls still running ``grace`` seconds from now (a container ending saves and commits)."""
    deadline = time.monotonic() + grace
    while (left := call_processes(root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left

"""A local stand-in for the Modal SDK (Modal's network is out of reach here).

Put ``tests/support/fake_modal`` first on ``PYTHONPATH`` (or this package in
``sys.modules["modal"]``) and set ``FAKE_MODAL_SANDBOXES`` (sandboxes) and ``FAKE_MODAL_ROOT``
(the rest) to directories. What :mod:`pytest_modal_eval.client.modal_sandbox` and verifiers'
``ModalRuntime`` use is here: ``App.lookup``, ``Image.from_registry(...).entrypoint``,
``Sandbox.create`` (main command, ``env``, ``workdir``, ``tags``, ``timeout``,
``idle_timeout``; the rest accepted and recorded), ``Sandbox.exec`` (a process with stdin,
stdout, stderr, ``wait``, ``poll``), ``Sandbox.filesystem`` (``make_directory``,
``read_bytes``, ``write_bytes``) and ``Sandbox.terminate``; what ``pytest-modal-eval stop
--sandboxes`` uses: ``Sandbox.list`` (running sandboxes carrying at least the given tags, of an
``app_id`` when given), ``Sandbox.get_tags`` and ``terminate``, with ``modal.config``'s token
and ``server_url`` and ``modal.exception``. What a detached session uses: apps and their
functions, deployed, spawned and cancelled (``_fake_functions.py``: a call is a local process
restarted as Modal restarts an input), Volumes with Modal's commit and reload semantics
(``_fake_volumes.py``) and Dicts with an atomic put-if-absent (``_fake_dicts.py``). Each
sandbox callable works both plainly and with ``.aio``, as Modal's do (a listing is a generator,
and an async one with ``.aio``). The stand-in accepts its own token only (``modal.config``):
any other gets ``modal.exception.AuthError``, as Modal answers a token it does not know.

A sandbox is a local process in a session of its own (``sandbox_supervisor.py``) with its own
directory under ``FAKE_MODAL_SANDBOXES``: it runs the main command and ends the sandbox (every
process in it killed) on Modal's terms, whether or not its creator is still alive. It shares
this machine's filesystem and network: paths are the host's (a test gives ``workdir``).
``tunnels`` is not offered: nothing here relies on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from . import _fake_store, config, exception
from ._fake_dicts import Dict
from ._fake_functions import (
    App,
    Function,
    FunctionCall,
    Image,
    Retries,
    Secret,
    current_function_call_id,
    is_local,
)
from ._fake_volumes import Volume

__all__ = [
    "App",
    "ContainerProcess",
    "Dict",
    "Function",
    "FunctionCall",
    "Image",
    "Retries",
    "Sandbox",
    "Secret",
    "Volume",
    "config",
    "current_function_call_id",
    "exception",
    "is_local",
]

#: The one token the stand-in accepts (what ``modal.config`` holds unless a test changes it).
TOKEN = {key: config.config[key] for key in ("token_id", "token_secret")}

SUPERVISOR = Path(__file__).resolve().parent.parent / "sandbox_supervisor.py"


def _root() -> Path:
    root = os.environ.get("FAKE_MODAL_SANDBOXES")
    if not root:
        raise RuntimeError("the Modal stand-in needs FAKE_MODAL_SANDBOXES (a directory)")
    return Path(root)


def _sync(awaitable: Awaitable[Any]) -> Any:
    """Run a coroutine to its end from plain code, in a thread when a loop is running here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)  # type: ignore[arg-type]
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(asyncio.run(awaitable)))  # type: ignore[arg-type]
    thread.start()
    thread.join()
    return box[0]


class _Dual:
    """``f(...)`` and ``await f.aio(...)``, as Modal's synchronicity wrappers give."""

    def __init__(self, fn: Callable[..., Awaitable[Any]]) -> None:
        self.aio = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _sync(self.aio(*args, **kwargs))


class _DualGenerator:
    """``for x in f(...)`` and ``async for x in f.aio(...)``, as Modal's listings give."""

    def __init__(self, fn: Callable[..., AsyncIterator[Any]]) -> None:
        self.aio = getattr(fn, "__func__", fn)  # a staticmethod's function

    def __call__(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [item async for item in self.aio(*args, **kwargs)]

        yield from _sync(collect())


App.lookup = _Dual(App._lookup)  # type: ignore[attr-defined]


def _check_token() -> None:
    given = {key: config.config.get(key) for key in TOKEN}
    if given != TOKEN:
        raise exception.AuthError("Token ID is malformed or not recognized")


class _Reader:
    def __init__(self, stream: asyncio.StreamReader, text: bool) -> None:
        self._stream = stream
        self._text = text
        self.read = _Dual(self._read)

    async def _read(self) -> str | bytes:
        data = await self._stream.read()
        return data.decode() if self._text else data

    async def __aiter__(self) -> AsyncIterator[str | bytes]:
        while True:
            chunk = await self._stream.read(65536)
            if not chunk:
                return
            yield chunk.decode() if self._text else chunk


class _Writer:
    def __init__(self, stream: asyncio.StreamWriter, box: Path) -> None:
        self._stream = stream
        self._box = box
        self.drain = _Dual(self._drain)

    def write(self, data: bytes | str) -> None:
        self._stream.write(data.encode() if isinstance(data, str) else data)
        (self._box / "activity").touch()

    async def _drain(self) -> None:
        await self._stream.drain()


class ContainerProcess:
    def __init__(self, process: asyncio.subprocess.Process, box: Path, text: bool) -> None:
        assert process.stdout and process.stderr and process.stdin
        self._process = process
        self.stdout = _Reader(process.stdout, text)
        self.stderr = _Reader(process.stderr, text)
        self.stdin = _Writer(process.stdin, box)
        self.wait = _Dual(self._wait)
        self.poll = _Dual(self._poll)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def _wait(self) -> int:
        return await self._process.wait()

    async def _poll(self) -> int | None:
        return self._process.returncode


class _Filesystem:
    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self.make_directory = _Dual(self._make_directory)
        self.read_bytes = _Dual(self._read_bytes)
        self.write_bytes = _Dual(self._write_bytes)

    async def _make_directory(self, path: str, **_: Any) -> None:
        self._sandbox._check_running()
        Path(path).mkdir(parents=True, exist_ok=True)

    async def _read_bytes(self, path: str) -> bytes:
        self._sandbox._check_running()
        return Path(path).read_bytes()

    async def _write_bytes(self, data: bytes, path: str) -> None:
        self._sandbox._check_running()
        Path(path).write_bytes(data)


class Sandbox:
    def __init__(self, box: Path, spec: dict[str, Any]) -> None:
        self.object_id = box.name
        self._box = box
        self._spec = spec
        self.filesystem = _Filesystem(self)
        self.exec = _Dual(self._exec)
        self.terminate = _Dual(self._terminate)
        self.poll = _Dual(self._poll)
        self.get_tags = _Dual(self._get_tags)
        self._processes: list[asyncio.subprocess.Process] = []

    @staticmethod
    async def _create(*argv: str, app: App | None = None, **options: Any) -> Sandbox:
        if app is None:
            raise ValueError("Sandbox.create needs an app outside a Modal container")
        box = _root() / f"sb-{uuid.uuid4().hex[:12]}"
        (box / "execs").mkdir(parents=True)
        (box / "activity").touch()
        spec = {
            "app": app.name,
            "argv": list(argv) or ["sleep", "infinity"],
            "env": {k: v for k, v in (options.get("env") or {}).items() if v is not None},
            "workdir": options.get("workdir") or str(box / "root"),
            "timeout": options.get("timeout", 300),
            "idle_timeout": options.get("idle_timeout"),
            "name": options.get("name"),
            "tags": options.get("tags") or {},
            "encrypted_ports": list(options.get("encrypted_ports") or []),
        }
        (box / "spec.json").write_text(json.dumps(spec))
        _fake_store.start_supervisor(SUPERVISOR, box)
        deadline = time.monotonic() + 10
        while not (box / "supervisor.pid").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"stand-in sandbox {box.name} did not start")
            await asyncio.sleep(0.02)
        return Sandbox(box, spec)

    create = _Dual(_create)

    @staticmethod
    async def _list(
        *, app_id: str | None = None, tags: dict[str, str] | None = None, client: Any = None
    ) -> AsyncIterator[Sandbox]:
        """Running sandboxes (created and not ended), newest first, with at least ``tags``."""
        _check_token()
        boxes = sorted(_root().glob("sb-*"), key=lambda b: b.stat().st_mtime_ns, reverse=True)
        for box in boxes:
            if (box / "ended").exists() or not (box / "supervisor.pid").exists():
                continue  # ended, or not created yet
            spec = json.loads((box / "spec.json").read_text())
            if app_id is not None and f"ap-{spec['app']}" != app_id:
                continue
            if all(spec["tags"].get(k) == v for k, v in (tags or {}).items()):
                yield Sandbox(box, spec)

    list = _DualGenerator(_list)

    async def _get_tags(self) -> dict[str, str]:
        return dict(self._spec["tags"])

    def _check_running(self) -> None:
        if (self._box / "ended").exists():
            raise RuntimeError(f"Sandbox {self.object_id} has finished")
        (self._box / "activity").touch()

    async def _exec(
        self,
        *argv: str,
        workdir: str | None = None,
        env: dict[str, str | None] | None = None,
        text: bool = True,
        **_: Any,
    ) -> ContainerProcess:
        self._check_running()
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workdir or self._spec["workdir"],
            env={
                **os.environ,
                **self._spec["env"],
                **{k: v for k, v in (env or {}).items() if v is not None},
            },
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        (self._box / "execs" / str(process.pid)).touch()
        self._processes.append(process)
        if (self._box / "ended").exists():
            # The sandbox ended between the check above and now: as on Modal, nothing runs.
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            raise RuntimeError(f"Sandbox {self.object_id} has finished")
        return ContainerProcess(process, self._box, text)

    async def _poll(self) -> int | None:
        return 0 if (self._box / "ended").exists() else None

    async def _terminate(self, *, wait: bool = False) -> int | None:
        (self._box / "terminate").touch()
        deadline = time.monotonic() + 10
        while not (self._box / "ended").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # The sandbox's processes are dead; reap those started from this loop.
        for process in self._processes:
            with contextlib.suppress(RuntimeError):
                await process.wait()
        return 0 if wait else None


def sandboxes() -> list[Path]:
    """Every stand-in sandbox made under ``FAKE_MODAL_SANDBOXES`` (a test's view)."""
    return sorted(_root().glob("sb-*"))

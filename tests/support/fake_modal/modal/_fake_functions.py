"""Apps, Functions and FunctionCalls in the stand-in: a deployed function runs as a local
process, its call a supervisor that restarts it as Modal restarts an input.

``App.function(...)`` records a function and its spec (volumes, secrets, ``env``, retries);
``App.deploy`` writes the app's functions to ``FAKE_MODAL_ROOT/apps/NAME.json`` (a named
secret must exist there, ``secrets/NAME.json``, as Modal checks at deploy time).
``Function.from_name(app, name).spawn(*args)`` starts ``function_supervisor.py`` for a new
call ``fc-...`` in ``FAKE_MODAL_ROOT/calls/``: each attempt is a container, a process group of
its own running the function (``function_runner.py``) with only the secrets, ``env`` and a few
basics of this environment (``PATH``, ``HOME``, ``PYTHONPATH``, ...), each mounted Volume
copied at its start (``_fake_volumes.mount``). A container killed by a signal (pre-emption) is
started again on the same input; one whose function raised is retried up to ``max_retries``.
``FunctionCall.get(timeout)`` waits for the outcome (the builtin ``TimeoutError`` while
pending); ``cancel()`` sends the container SIGUSR1, which raises ``InputCancellation`` in the
function as Modal does (``terminate_containers=True``: SIGKILL to the container), and it is
not started again.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _fake_store as _store
from .exception import ExecutionError, NotFoundError

SUPERVISOR = Path(__file__).resolve().parent.parent / "function_supervisor.py"


class Image:
    """Records how it was built; nothing is built."""

    def __init__(self, ref: str = "", steps: tuple[tuple[str, Any], ...] = ()) -> None:
        self.ref = ref
        self.steps = steps

    @staticmethod
    def from_registry(ref: str, **_: Any) -> Image:
        return Image(ref)

    @staticmethod
    def debian_slim(python_version: str | None = None, **_: Any) -> Image:
        return Image("debian-slim", (("python", python_version),))

    def _with(self, step: str, value: Any) -> Image:
        return Image(self.ref, (*self.steps, (step, value)))

    def entrypoint(self, argv: list[str]) -> Image:
        return self

    def uv_pip_install(self, *packages: str, **_: Any) -> Image:
        return self._with("uv_pip_install", packages)

    def add_local_python_source(self, *modules: str, **_: Any) -> Image:
        return self._with("add_local_python_source", modules)

    def env(self, values: dict[str, str]) -> Image:
        return self._with("env", values)


class Secret:
    def __init__(self, values: dict[str, str] | None = None, name: str | None = None) -> None:
        self.values = values or {}
        self.name = name

    @staticmethod
    def from_dict(values: dict[str, str | None]) -> Secret:
        return Secret({k: v for k, v in values.items() if v is not None})

    @staticmethod
    def from_name(name: str, *, required_keys: list[str] | None = None, **_: Any) -> Secret:
        return Secret(name=name)

    @staticmethod
    def from_local_environ(names: list[str]) -> Secret:
        return Secret({name: os.environ[name] for name in names})

    def resolve(self) -> dict[str, str]:
        if self.name is None:
            return dict(self.values)
        found = _store.read_json(_store.root() / "secrets" / f"{self.name}.json")
        if not isinstance(found, dict):
            raise NotFoundError(f"Secret {self.name!r} not found")
        return {str(k): str(v) for k, v in found.items()}


class Retries:
    def __init__(self, *, max_retries: int, **_: Any) -> None:
        self.max_retries = max_retries


class _Defined:
    """A function as ``App.function`` records it."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.raw = fn
        self.options = options

    def spec(self) -> dict[str, Any]:
        options = self.options
        env: dict[str, str] = {}
        for secret in options.get("secrets") or ():
            env.update(secret.resolve())
        env.update({k: v for k, v in (options.get("env") or {}).items() if v is not None})
        retries = options.get("retries")
        return {
            "module": self.raw.__module__,
            "qualname": self.raw.__qualname__,
            "volumes": {
                str(path): volume.name for path, volume in (options.get("volumes") or {}).items()
            },
            "env": env,
            "retries": retries.max_retries if isinstance(retries, Retries) else int(retries or 0),
            "timeout": options.get("timeout", 300),
        }


class App:
    def __init__(
        self, name: str | None = None, *, tags: dict[str, str] | None = None, **_: Any
    ) -> None:
        self.name = name or "app"
        self.app_id = f"ap-{self.name}"
        self.tags = dict(tags or {})
        self._functions: dict[str, _Defined] = {}

    @staticmethod
    async def _lookup(name: str, create_if_missing: bool = False, **_: Any) -> App:
        return App(name)

    def function(self, **options: Any) -> Callable[[Callable[..., Any]], _Defined]:
        def decorate(fn: Callable[..., Any]) -> _Defined:
            defined = _Defined(fn, options)
            self._functions[options.get("name") or fn.__name__] = defined
            return defined

        return decorate

    def deploy(self, *, name: str | None = None, **_: Any) -> App:
        name = name or self.name
        functions = {fn_name: fn.spec() for fn_name, fn in self._functions.items()}
        _store.write_json(
            _store.root() / "apps" / f"{name}.json", {"functions": functions, "tags": self.tags}
        )
        return self


class FunctionCall:
    def __init__(self, call_id: str) -> None:
        self.object_id = call_id
        self._dir = _store.root() / "calls" / call_id

    @staticmethod
    def from_id(call_id: str, **_: Any) -> FunctionCall:
        if not (_store.root() / "calls" / call_id).is_dir():
            raise NotFoundError(f"FunctionCall {call_id} not found")
        return FunctionCall(call_id)

    def get(self, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            outcome = _store.read_json(self._dir / "outcome.json")
            if outcome is not None:
                if outcome["state"] == "done":
                    return outcome["value"]
                raise ExecutionError(f"{outcome['state']}: {outcome.get('error')}")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError()
            time.sleep(0.05)

    def cancel(self, terminate_containers: bool = False) -> None:
        _store.write_json(self._dir / "cancelled.json", {"terminate": terminate_containers})
        pid = container_pid(self._dir)
        if pid is None:
            return
        try:
            if terminate_containers:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass


def container_pid(call_dir: Path) -> int | None:
    """The running container's process (its group's leader) of a call, if any."""
    attempts = sorted(
        call_dir.glob("attempt-*/pid"), key=lambda p: int(p.parent.name.split("-")[1])
    )
    if not attempts or (attempts[-1].parent / "exit").exists():
        return None
    return int(attempts[-1].read_text())


class Function:
    def __init__(self, app_name: str, name: str) -> None:
        self.app_name = app_name
        self.name = name

    @staticmethod
    def from_name(app_name: str, name: str, **_: Any) -> Function:
        return Function(app_name, name)

    def spawn(self, *args: Any, **kwargs: Any) -> FunctionCall:
        app = _store.read_json(_store.root() / "apps" / f"{self.app_name}.json")
        if app is None or self.name not in app["functions"]:
            raise NotFoundError(f"Function {self.app_name}/{self.name} not found")
        call_id = f"fc-{uuid.uuid4().hex[:16]}"
        call_dir = _store.root() / "calls" / call_id
        _store.write_json(
            call_dir / "spec.json",
            {**app["functions"][self.name], "app": self.app_name, "function": self.name},
        )
        _store.write_json(call_dir / "input.json", {"args": list(args), "kwargs": kwargs})
        _store.start_supervisor(
            SUPERVISOR, call_dir, {**os.environ, "FAKE_MODAL_ROOT": str(_store.root())}
        )
        return FunctionCall(call_id)


def current_function_call_id() -> str | None:
    return os.environ.get("FAKE_MODAL_CALL_ID") or None


def is_local() -> bool:
    return current_function_call_id() is None

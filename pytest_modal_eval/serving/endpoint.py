"""Types shared by the serving backends, the plugin and the Modal container.

Everything here is JSON-able because it crosses process boundaries: xdist workers receive the
``Endpoint`` from the controller, and the Modal container receives the ``ServerProfile`` through
an environment variable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_modal_eval.config.backends import BACKENDS, backend

if TYPE_CHECKING:
    # Types only: the Modal container imports this module without pytest installed, and every
    # pytest session imports it without needing pydantic (see from_json).
    from pytest_modal_eval.config.loader import Benchmark
    from pytest_modal_eval.config.options import Settings
    from pytest_modal_eval.config.schema import InfraConfig, VllmConfig


def _check_starts_server(name: str) -> None:
    if name not in BACKENDS or not BACKENDS[name].starts_server:
        names = [spec.name for spec in BACKENDS.values() if spec.starts_server]
        raise ValueError(f"backend must be one of {tuple(names)}, got {name!r}")


#: How much of a server log a startup failure shows.
LOG_TAIL_LINES = 40


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a server log, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def canonical_json(value: object) -> str:
    """The one JSON spelling of ``value`` that hashes are computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True)
class ServerProfile:
    """What a server depends on. Benchmarks with equal profiles share one server."""

    backend: str  # a backend that starts servers (config/backends.py)
    model: str  # Hugging Face id or a local directory
    infra: InfraConfig
    vllm: VllmConfig
    # The benchmark's fallback template: "base" | "code" | "math" | "think" | an absolute .jinja
    # path. Used only when the model has no template of its own.
    chat_template: str | None = None

    def __post_init__(self) -> None:
        _check_starts_server(self.backend)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "model": self.model,
            "infra": self.infra.model_dump(mode="json"),
            "vllm": self.vllm.model_dump(mode="json"),
            "chat_template": self.chat_template,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerProfile:
        from pytest_modal_eval.config.schema import InfraConfig, VllmConfig

        name = str(data["backend"])
        _check_starts_server(name)
        # Validate through JSON mode: the config models are strict, and JSON mode is the strict
        # mode that accepts what json.loads produces (e.g. 1 for a float field).
        return cls(
            backend=name,
            model=str(data["model"]),
            infra=InfraConfig.model_validate_json(canonical_json(data["infra"])),
            vllm=VllmConfig.model_validate_json(canonical_json(data["vllm"])),
            chat_template=data.get("chat_template"),
        )

    def key(self) -> str:
        """A short stable hash of every field (10 hex digits)."""
        return hashlib.sha256(canonical_json(self.to_json()).encode()).hexdigest()[:10]

    # VllmConfig holds a list and is therefore unhashable; hash the canonical form instead so
    # profiles can key dicts of servers.
    def __hash__(self) -> int:
        return hash(self.key())


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server and the model to ask: where every request goes.

    Servers hand one back when they start; the evaluation sends to it. Never holds a secret:
    the key is named by ``api_key_env`` and read from the environment when a client is made.
    """

    base_url: str  # ends with /v1
    model: str  # the served model name to put in requests
    api_key_env: str | None = None  # variable holding the API key; None: no key is sent
    # Sent with every request: the local Modal proxy's per-session client token, nothing else
    # secret. Crosses to xdist workers over loopback; never written to a run's files.
    headers: tuple[tuple[str, str], ...] = ()
    # The template the server actually uses: {"source": ..., "sha256": ...}; empty if unknown.
    chat_template: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "headers": [list(h) for h in self.headers],
            "chat_template": dict(self.chat_template),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoint:
        return cls(
            base_url=str(data["base_url"]),
            model=str(data["model"]),
            api_key_env=data.get("api_key_env"),
            headers=tuple((str(k), str(v)) for k, v in data.get("headers", ())),
            chat_template={str(k): str(v) for k, v in data.get("chat_template", {}).items()},
        )


@dataclass(frozen=True)
class ServerRequest:
    """What a benchmark needs from the serving tier; JSON-able for the trip to the controller."""

    backend: str
    model: str
    infra: dict[str, Any]
    vllm: dict[str, Any]
    chat_template: str | None
    base_url: str | None
    api_key_env: str
    # The Hub commit the model's identity names when ``vllm.revision`` names none: the server
    # is started at it, so the weights that answer are the ones the answer key holds. Not in
    # ``profile()``: the session's plan of servers is made before the commit is known.
    pinned_revision: str | None = None

    @classmethod
    def for_benchmark(
        cls, settings: Settings, benchmark: Benchmark, model: str | None = None
    ) -> ServerRequest:
        """The request of ``benchmark`` for ``model`` (default: the first ``--model``); the
        model is part of the profile, so each model gets its own server."""
        config = benchmark.config
        template = config.chat_template
        if template is not None and template.endswith(".jinja"):
            # A template file is named relative to its benchmark YAML.
            template = str((benchmark.path.parent / template).resolve())
        return cls(
            backend=settings.backend,
            model=model or settings.model or "",
            infra=config.infra.model_dump(),
            vllm=config.vllm.model_dump(),
            chat_template=template,
            base_url=settings.base_url,
            api_key_env=settings.api_key_env,
        )

    @property
    def endpoint_identity(self) -> str | None:
        """The endpoint's part of the answer key: a ``--base-url`` endpoint is known by its URL;
        a server we start, by its profile's fields (already in the key)."""
        return self.base_url if backend(self.backend).takes_base_url else None

    def applies_template(self, recorded: object) -> bool:
        """Whether the vLLM we start for this request, started now, would apply the chat
        template a finished run recorded (see ``chat_template.decided_now``)."""
        from pytest_modal_eval.serving.chat_template import decided_now

        return decided_now(
            recorded,
            self.model,
            self.chat_template,
            extra_args=self.vllm.get("extra_args") or (),
            served_from_here=backend(self.backend).runs_here,
            revision=self.vllm.get("revision"),
        )

    def profile(self) -> dict[str, Any]:
        """The server profile: the fields that decide which server answers."""
        if backend(self.backend).takes_base_url:
            return {"backend": self.backend, "base_url": self.base_url, "model": self.model}
        return {
            "backend": self.backend,
            "model": self.model,
            "infra": self.infra,
            "vllm": self.vllm,
            "chat_template": self.chat_template,
        }

    def served_profile(self) -> dict[str, Any]:
        """:meth:`profile` as the server is started: at the pinned revision, if any."""
        profile = self.profile()
        if self.pinned_revision is not None and backend(self.backend).starts_server:
            profile["vllm"] = {**self.vllm, "revision": self.pinned_revision}
        return profile


@dataclass(frozen=True)
class ServerStartup:
    """How this session started an endpoint's server: the one record of its start-up, for the
    cost report (``serving.costs``) and the run's ``run_config.json`` (``show``)."""

    seconds: float  # from asking for the server until it answered
    started_for: str | None = None  # the item (node id) whose request started it
    # By phase, when the backend times them (Modal: "deploy", "until_serving"); else {}.
    phases: dict[str, float] = field(default_factory=dict)

    def waited_by(self, nodeid: str) -> float:
        """The start-up the item ``nodeid`` waited for: all of it for the item that started
        the server, none for the items that found it up."""
        return self.seconds if nodeid == self.started_for else 0.0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerStartup:
        return cls(
            seconds=float(data["seconds"]),
            started_for=data.get("started_for"),
            phases={str(k): float(v) for k, v in (data.get("phases") or {}).items()},
        )


@dataclass(frozen=True)
class EndpointInfo:
    endpoint: Endpoint
    profile: dict[str, Any]
    chat_template: dict[str, str] = field(default_factory=dict)
    identity: str | None = None  # part of the resume key (the endpoint URL for `endpoint`)
    check_timeout: float = 15.0
    server_logs: str | None = None  # directory of the server's logs, linked into each run
    proxied: bool = False  # behind our proxy: requests may route their log line per run
    startup: ServerStartup | None = None  # None: this session started no server for it

    def waited_by(self, nodeid: str) -> float:
        """Seconds of server start-up the item ``nodeid`` waited for (see ServerStartup)."""
        return self.startup.waited_by(nodeid) if self.startup is not None else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "endpoint": self.endpoint.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndpointInfo:
        startup = data.get("startup")
        return cls(
            **{
                **data,
                "endpoint": Endpoint.from_json(data["endpoint"]),
                "startup": ServerStartup.from_json(startup) if startup else None,
            }
        )


class Server(Protocol):
    def start(self) -> Endpoint:
        """Start (or reuse) the server; block until it answers."""
        ...

    def stop(self) -> None:
        """Stop the server. Idempotent."""
        ...

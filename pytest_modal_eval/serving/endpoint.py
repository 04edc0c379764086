"""Types shared by the serving backends, the plugin and the Modal container.

Everything here is JSON-able because it crosses process boundaries: xdist workers receive the
``Endpoint`` from the controller, and the Modal container receives the ``ServerProfile`` through
an environment variable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from pytest_modal_eval.config.schema import InfraConfig, VllmConfig

BackendName = Literal["modal", "local"]
_BACKENDS: tuple[BackendName, ...] = ("modal", "local")


class ServingError(Exception):
    """A server could not be started or reached.

    The message is shown to the user as is: it says what failed, where the log is and what to
    check, so callers should not wrap it in a traceback.
    """


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

    backend: BackendName
    model: str  # Hugging Face id or a local directory
    infra: InfraConfig
    vllm: VllmConfig
    # The benchmark's fallback template: "base" | "code" | "math" | "think" | an absolute .jinja
    # path. Used only when the model has no template of its own.
    chat_template: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {self.backend!r}")

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
        backend = data["backend"]
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        # Validate through JSON mode: the config models are strict, and JSON mode is the strict
        # mode that accepts what json.loads produces (e.g. 1 for a float field).
        return cls(
            backend=cast(BackendName, backend),
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
    """An OpenAI-compatible server that answers."""

    base_url: str  # ends with /v1
    model: str  # the served model name to put in requests
    headers: dict[str, str] = field(default_factory=dict)  # non-secret headers only
    # The template the server actually uses: {"source": ..., "sha256": ...}; empty if unknown.
    chat_template: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "model": self.model,
            "headers": dict(self.headers),
            "chat_template": dict(self.chat_template),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoint:
        return cls(
            base_url=str(data["base_url"]),
            model=str(data["model"]),
            headers={str(k): str(v) for k, v in data.get("headers", {}).items()},
            chat_template={str(k): str(v) for k, v in data.get("chat_template", {}).items()},
        )


class Server(Protocol):
    def start(self) -> Endpoint:
        """Start (or reuse) the server; block until it answers."""
        ...

    def stop(self) -> None:
        """Stop the server. Idempotent."""
        ...

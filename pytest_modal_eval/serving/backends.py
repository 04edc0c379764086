"""The serving backends by name, and starting the server a benchmark asks for.

One entry per value of ``--backend`` (:data:`pytest_modal_eval.config.schema.Backend`): what
the backend is (a vLLM we start here, one we deploy on Modal, or an endpoint someone else
runs), where its server log goes, how long the first answer may take, and whether requests go
through the plugin's redirect proxy. The classes that start servers are imported only when a
server of that kind starts, so collection stays cheap.

Called by :class:`pytest_modal_eval.serving.deployments.Deployments` (on the controller under
xdist), once per server profile per session.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from pytest_modal_eval.config.choices import Backend
from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.serving.endpoint import (
    Endpoint,
    EndpointInfo,
    Server,
    ServerProfile,
    ServerRequest,
    ServerStartup,
)

#: Extra time for the first answer through Modal: a cold start can pass the startup timeout.
MODAL_CHECK_MARGIN_S = 300.0

#: Time a locally started vLLM (already answering /health) gets for its first answer.
LOCAL_CHECK_TIMEOUT_S = 30.0

#: Time an existing endpoint (``--base-url``) gets to answer the first check.
ENDPOINT_CHECK_TIMEOUT_S = 15.0

#: Builds a backend's server: (profile, logs directory, settings, served model name).
ServerFactory = Callable[[ServerProfile, Path, Settings, str], Server]


@dataclass(frozen=True)
class BackendSpec:
    name: Backend
    make_server: ServerFactory | None  # None: the endpoint exists already, nothing is started
    runs_here: bool  # the server is a process on this machine (one GPU at a time)
    proxied: bool  # requests go through the plugin's redirect proxy
    check_timeout: Callable[[ServerProfile | None], float]

    @property
    def starts_server(self) -> bool:
        return self.make_server is not None


def _local_server(profile: ServerProfile, logs: Path, settings: Settings, name: str) -> Server:
    from pytest_modal_eval.serving.vllm.local import LocalVllmServer

    python = settings.vllm_python or sys.executable
    return LocalVllmServer(profile, logs_dir=logs, python=python, served_model_name=name)


def _modal_server(profile: ServerProfile, logs: Path, settings: Settings, name: str) -> Server:
    from pytest_modal_eval.serving.modal.backend import ModalServer

    return ModalServer(
        profile,
        logs_dir=logs,
        keep_deployment=settings.keep_deployment,
        served_model_name=name,
        log_root=settings.output_dir,
    )


def _modal_check_timeout(profile: ServerProfile | None) -> float:
    assert profile is not None
    return profile.infra.startup_timeout + MODAL_CHECK_MARGIN_S


BACKENDS: dict[str, BackendSpec] = {
    "modal": BackendSpec(
        "modal", _modal_server, runs_here=False, proxied=True, check_timeout=_modal_check_timeout
    ),
    "local": BackendSpec(
        "local",
        _local_server,
        runs_here=True,
        proxied=False,
        check_timeout=lambda _: LOCAL_CHECK_TIMEOUT_S,
    ),
    "endpoint": BackendSpec(
        "endpoint",
        None,
        runs_here=False,
        proxied=False,
        check_timeout=lambda _: ENDPOINT_CHECK_TIMEOUT_S,
    ),
}
assert set(BACKENDS) == set(get_args(Backend)), "every --backend value needs an entry"


def backend(name: str) -> BackendSpec:
    """The backend called ``name``; ``ValueError`` naming the choices if there is none."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}") from None


def endpoint_info_for_existing(request: ServerRequest) -> EndpointInfo:
    """An endpoint someone else runs (``--base-url``): nothing to start."""
    assert request.base_url is not None
    return EndpointInfo(
        endpoint=Endpoint(request.base_url, request.model, request.api_key_env),
        profile=request.profile(),
        identity=request.endpoint_identity,
        check_timeout=backend("endpoint").check_timeout(None),
    )


def start_server(
    request: ServerRequest, settings: Settings, logs_root: Path, started_for: str | None = None
) -> tuple[Server, EndpointInfo]:
    """Start (or, for Modal, reuse) the server for ``request``, for the item ``started_for``;
    raise ``ServingError`` if not."""
    began = time.monotonic()
    spec = backend(request.backend)
    assert spec.make_server is not None, f"{spec.name} starts no server"
    profile_json: dict[str, Any] = request.served_profile()
    model_dir = Path(request.model).expanduser()
    if spec.runs_here and model_dir.is_dir():
        # vLLM runs with its own working directory semantics; give it an absolute path.
        profile_json["model"] = str(model_dir.resolve())
    profile = ServerProfile.from_json(profile_json)
    logs_dir = logs_root / f"{request.backend}-{profile.key()}"
    logs_dir.mkdir(parents=True, exist_ok=True)
    server = spec.make_server(profile, logs_dir, settings, request.model)
    served = server.start()
    info = EndpointInfo(
        # api_key_env stays None: the proxy (Modal) injects credentials; local vLLM has none.
        endpoint=served,
        profile=request.served_profile(),
        chat_template=dict(served.chat_template),
        identity=request.endpoint_identity,
        check_timeout=spec.check_timeout(profile),
        server_logs=str(logs_dir),
        proxied=spec.proxied,
        startup=ServerStartup(
            seconds=time.monotonic() - began,
            started_for=started_for,
            phases=dict(getattr(server, "timings", None) or {}),
        ),
    )
    return server, info

"""Starting the server a benchmark asks for, through its backend.

What each backend is (``--backend``'s values, and the flags that tell them apart) is
:data:`pytest_modal_eval.config.backends.BACKENDS`; here is how a backend that starts a server
builds it (a vLLM we start here, one we deploy on Modal) and where its server log goes. The
classes that start servers are imported only when a server of that kind starts, so collection
stays cheap.

Called by :class:`pytest_modal_eval.serving.deployments.Deployments` (on the controller under
xdist), once per server profile per session.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.config.backends import BACKENDS, LOCAL, MODAL, backend
from pytest_modal_eval.config.locations import vllm_interpreter
from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.serving.endpoint import (
    Endpoint,
    EndpointInfo,
    Server,
    ServerProfile,
    ServerRequest,
    ServerStartup,
)

if TYPE_CHECKING:
    from pytest_modal_eval.redact import Redactor

#: Builds a backend's server: (profile, logs directory, settings, served model name, the
#: session's redactor for what the server logs).
ServerFactory = Callable[[ServerProfile, Path, Settings, str, "Redactor | None"], Server]


def _local_server(
    profile: ServerProfile, logs: Path, settings: Settings, name: str, redactor: Redactor | None
) -> Server:
    from pytest_modal_eval.serving.vllm.local import LocalVllmServer

    python = vllm_interpreter(settings.vllm_python)
    return LocalVllmServer(
        profile, logs_dir=logs, python=python, served_model_name=name, redactor=redactor
    )


def _modal_server(
    profile: ServerProfile, logs: Path, settings: Settings, name: str, redactor: Redactor | None
) -> Server:
    from pytest_modal_eval.serving.modal.backend import ModalServer

    return ModalServer(
        profile,
        logs_dir=logs,
        keep_deployment=settings.keep_deployment,
        served_model_name=name,
        log_root=settings.output_dir,
        redactor=redactor,
    )


#: How each backend that starts a server builds it.
SERVER_FACTORIES: dict[str, ServerFactory] = {MODAL.name: _modal_server, LOCAL.name: _local_server}
assert set(SERVER_FACTORIES) == {n for n, spec in BACKENDS.items() if spec.starts_server}, (
    "every backend that starts a server needs a factory"
)


def endpoint_info_for_existing(request: ServerRequest) -> EndpointInfo:
    """An endpoint someone else runs (``--base-url``): nothing to start."""
    assert request.base_url is not None
    return EndpointInfo(
        endpoint=Endpoint(request.base_url, request.model, request.api_key_env),
        profile=request.profile(),
        identity=request.endpoint_identity,
        check_timeout=backend(request.backend).check_timeout_s,
    )


def start_server(
    request: ServerRequest,
    settings: Settings,
    logs_root: Path,
    started_for: str | None = None,
    redactor: Redactor | None = None,
) -> tuple[Server, EndpointInfo]:
    """Start (or, for Modal, reuse) the server for ``request``, for the item ``started_for``,
    keeping the secrets ``redactor`` knows out of the server's logs; raise
    ``ServingError`` if not."""
    began = time.monotonic()
    spec = backend(request.backend)
    make_server = SERVER_FACTORIES[spec.name]
    profile_json: dict[str, Any] = request.served_profile()
    model_dir = Path(request.model).expanduser()
    if spec.runs_here and model_dir.is_dir():
        # vLLM runs with its own working directory semantics; give it an absolute path.
        profile_json["model"] = str(model_dir.resolve())
    profile = ServerProfile.from_json(profile_json)
    logs_dir = logs_root / f"{request.backend}-{profile.key()}"
    logs_dir.mkdir(parents=True, exist_ok=True)
    server = make_server(profile, logs_dir, settings, request.model, redactor)
    served = server.start()
    info = EndpointInfo(
        # api_key_env stays None: the proxy (Modal) injects credentials; local vLLM has none.
        endpoint=served,
        profile=request.served_profile(),
        chat_template=dict(served.chat_template),
        identity=request.endpoint_identity,
        check_timeout=spec.check_timeout(profile.infra.startup_timeout),
        server_logs=str(logs_dir),
        proxied=spec.proxied,
        startup=ServerStartup(
            seconds=time.monotonic() - began,
            started_for=started_for,
            phases=dict(getattr(server, "timings", None) or {}),
        ),
    )
    return server, info

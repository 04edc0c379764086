"""From a benchmark's :class:`ServerRequest` to a started server and the endpoint it serves.

Called by :class:`pytest_modal_eval.serving.deployments.Deployments` (on the controller under
xdist), once per server profile per session.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.client.verifiers_adapter import Endpoint
from pytest_modal_eval.serving.endpoint import Server, ServerProfile

if TYPE_CHECKING:
    from pytest_modal_eval.config.options import Settings
    from pytest_modal_eval.serving.deployments import EndpointInfo, ServerRequest

#: Extra time for the first answer through Modal: a cold start can pass the startup timeout.
MODAL_CHECK_MARGIN_S = 300.0


def start_server(
    request: ServerRequest, settings: Settings, logs_root: Path
) -> tuple[Server, EndpointInfo]:
    """Start (or, for Modal, reuse) the server for ``request``; raise ``ServingError`` if not."""
    from pytest_modal_eval.serving.deployments import EndpointInfo

    profile_json: dict[str, Any] = dict(request.profile())
    model_dir = Path(request.model).expanduser()
    if request.backend == "local" and model_dir.is_dir():
        # vLLM runs with its own working directory semantics; give it an absolute path.
        profile_json["model"] = str(model_dir.resolve())
    profile = ServerProfile.from_json(profile_json)
    logs_dir = logs_root / f"{request.backend}-{profile.key()}"
    logs_dir.mkdir(parents=True, exist_ok=True)
    server: Server
    if request.backend == "local":
        from pytest_modal_eval.serving.vllm.local import LocalVllmServer

        server = LocalVllmServer(
            profile,
            logs_dir=logs_dir,
            python=settings.vllm_python or sys.executable,
            served_model_name=request.model,
        )
        check_timeout = 30.0
    else:
        from pytest_modal_eval.serving.modal.backend import ModalServer

        server = ModalServer(
            profile,
            logs_dir=logs_dir,
            keep_deployment=settings.keep_deployment,
            served_model_name=request.model,
        )
        check_timeout = profile.infra.startup_timeout + MODAL_CHECK_MARGIN_S
    served = server.start()
    info = EndpointInfo(
        endpoint=Endpoint(
            base_url=served.base_url,
            model=served.model,
            api_key_env=None,  # the proxy (Modal) injects credentials; local vLLM has none
            headers=tuple(sorted(served.headers.items())),
        ),
        profile=request.profile(),
        chat_template=dict(served.chat_template),
        identity=request.endpoint_identity,
        check_timeout=check_timeout,
        server_logs=str(logs_dir),
        proxied=request.backend == "modal",
    )
    return server, info

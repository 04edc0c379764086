"""Serve a model on Modal: deploy (or reuse) the app, put the local proxy in front, wait for it.

Almost everything here talks to Modal's servers and cannot run in this project's tests; it is
kept thin on purpose. The app definition itself (``modal_app``) is tested offline.

Secrets the local side needs, from the environment (the proxy's names):
``MODAL_PROXY_TOKEN_ID`` / ``MODAL_PROXY_TOKEN_SECRET`` (a Modal proxy auth token, since the
endpoint has ``requires_proxy_auth``) and ``VLLM_API_KEY`` (equal to the one in the
``vllm-api-key`` Modal secret). The proxy injects them; the Endpoint carries none.

``modal_vllm.log`` (the Modal CLI's deploy output, ``modal app logs`` of the container, this
module's own notes) and the proxy's ``proxy.log`` are written through the session's redactor,
line by line: a container or a gateway that prints a key leaves ``[redacted]`` in the log.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from pytest_modal_eval import phases
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.redact import Redactor, redact_args
from pytest_modal_eval.serving.chat_template import parse_log_line
from pytest_modal_eval.serving.endpoint import LOG_TAIL_LINES, Endpoint, ServerProfile, log_tail
from pytest_modal_eval.serving.log_redaction import LogRules, copy_redacted
from pytest_modal_eval.serving.modal import app as modal_app
from pytest_modal_eval.serving.modal.app import DeploySpec

if TYPE_CHECKING:
    from pytest_modal_eval.serving.modal.redirect_proxy import ProxyThread

LOG_NAME = "modal_vllm.log"
#: The directory holding this plugin's package (this file is its ``serving/modal/backend.py``).
_PACKAGE_PARENT = Path(__file__).resolve().parents[3]
PROXY_LOG_NAME = "proxy.log"
APP_LOG_ENTRIES = 200

#: env var -> (header, value template). The same names the proxy's CLI reads.
SECRET_HEADERS = {
    "MODAL_PROXY_TOKEN_ID": ("Modal-Key", "{}"),
    "MODAL_PROXY_TOKEN_SECRET": ("Modal-Secret", "{}"),
    "VLLM_API_KEY": ("Authorization", "Bearer {}"),
}
UNKNOWN_TEMPLATE = {"source": "decided in container", "sha256": ""}

_NO_TOKEN = (
    "No Modal token is configured, so the model cannot be served on Modal.\n"
    "Run `modal token new` (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET), or serve elsewhere:\n"
    "  --backend local      runs vLLM on this machine\n"
    "  --base-url URL       uses an OpenAI-compatible server that is already running"
)


def check_modal_token() -> None:
    """Fail at once, without network, when no Modal token is configured.

    Without this the first remote call fails only later; with a token but no reachable Modal
    server it would retry for about a minute.
    """
    import modal.config

    from pytest_modal_eval.serving.modal.access import in_modal_container

    if in_modal_container():  # a detached session's container has its own credentials
        return
    config = modal.config.config
    if not (config.get("token_id") and config.get("token_secret")):
        raise ServingError(_NO_TOKEN)


def upstream_headers(environ: Mapping[str, str]) -> dict[str, str]:
    """The secret headers the proxy injects; every one is required by the deployed app."""
    missing = [name for name in SECRET_HEADERS if not environ.get(name, "").strip()]
    if missing:
        raise ServingError(
            f"Serving on Modal needs {', '.join(missing)} in the environment.\n"
            "MODAL_PROXY_TOKEN_ID/MODAL_PROXY_TOKEN_SECRET: a proxy auth token from "
            "https://modal.com/settings/proxy-auth-tokens (the endpoint requires one).\n"
            f"VLLM_API_KEY: any secret string; store the same value in Modal with "
            f"`modal secret create {modal_app.API_KEY_SECRET} VLLM_API_KEY=...`."
        )
    return {
        header: template.format(environ[name].strip())
        for name, (header, template) in SECRET_HEADERS.items()
    }


def lookup_url(app_name: str) -> str | None:
    """The URL of a deployed app's vLLM Server (a network call); raises modal's errors."""
    import modal

    url: str | None = modal.Server.from_name(app_name, modal_app.FUNCTION_NAME).get_url()
    return url


class ModalServer:
    """vLLM on Modal behind a local proxy. ``start()`` blocks until vLLM answers."""

    def __init__(
        self,
        profile: ServerProfile,
        *,
        logs_dir: Path,
        keep_deployment: bool = False,
        served_model_name: str | None = None,
        proxy_options: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        modal_cli: Sequence[str] | None = None,
        deploy_timeout: float = 1800.0,
        redeploy: bool = False,
        log_root: Path | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        """``redactor``: the secrets kept out of ``modal_vllm.log`` and ``proxy.log`` (default:
        the environment's, ``environ``'s)."""
        self.profile = profile
        self.logs_dir = Path(logs_dir)
        self.keep_deployment = keep_deployment
        self.served_model_name = served_model_name or profile.model
        # Extra ProxySettings fields (request_deadline_s, max_attempts, ...).
        self.proxy_options = dict(proxy_options or {})
        self._environ = os.environ if environ is None else environ
        self.redactor = redactor or Redactor.from_environ(self._environ)
        # The proxy's credentials are secrets wherever they come from.
        self.redactor.learn_variables(SECRET_HEADERS, self._environ)
        # A subprocess keeps Modal's rich build output in our log and out of pytest's terminal.
        self._cli = list(modal_cli or [sys.executable, "-m", "modal"])
        self._deploy_timeout = deploy_timeout
        self._spec: DeploySpec | None = None
        self._proxy: ProxyThread | None = None
        self._deployed_here = False
        # Deploy even when the app exists (``pytest-modal-eval deploy``: new scaling settings).
        self.redeploy = redeploy
        # Runs may route their proxy log lines to files under it (the output directory).
        self.log_root = log_root
        # The local proxy serves only this session's clients: they send this with every request.
        self._client_token = secrets.token_urlsafe(32)
        self.endpoint: Endpoint | None = None
        self.url: str | None = None  # the app's own URL on Modal, once known
        #: Seconds spent deploying and until vLLM answered: the start-up cost users see.
        self.timings: dict[str, float] = {}

    @property
    def log_path(self) -> Path:
        return self.logs_dir / LOG_NAME

    @property
    def app_name(self) -> str:
        return self._deploy_spec().app_name()

    def _deploy_spec(self) -> DeploySpec:
        if self._spec is None:
            self._spec = DeploySpec.for_profile(self.profile, self.served_model_name)
        return self._spec

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Endpoint:
        if self.endpoint is not None:
            return self.endpoint
        # Every check that needs no network comes first, so mistakes fail in milliseconds.
        check_modal_token()
        if Path(self.profile.model).exists():
            raise ServingError(
                f"--model {self.profile.model} is a local path; a Modal container cannot see it.\n"
                "Use --backend local, or push the model to the Hugging Face Hub and pass its id."
            )
        headers = upstream_headers(self._environ)
        spec = self._deploy_spec()
        name = spec.app_name()
        self._validate_offline(spec)
        self.logs_dir.mkdir(parents=True, exist_ok=True)

        phases.detail("deploying the app")
        url = self._deployed_url(spec)

        from pytest_modal_eval.serving.env_proxy import env_proxy
        from pytest_modal_eval.serving.modal.redirect_proxy import ProxySettings, ProxyThread

        settings = ProxySettings(
            upstream=url,
            inject_headers=headers,
            log_path=self.logs_dir / PROXY_LOG_NAME,
            client_token=self._client_token,
            log_root=self.log_root,
            redact=self.redactor.text,
            **{"upstream_proxy": env_proxy(url, self._environ), **self.proxy_options},
        )
        self._proxy = ProxyThread(settings)
        base = self._proxy.start()
        began = time.monotonic()
        phases.detail("waiting for Modal's cold start (container, weights, vLLM)")
        try:
            self._wait_ready(base)
            self.timings["until_serving"] = round(time.monotonic() - began, 1)
            self._note(f"vLLM answered {self.timings['until_serving']:.1f} s after the proxy asked")
        except ServingError:
            with contextlib.suppress(ServingError):  # the startup failure is the news
                self.stop()
            raise
        self.endpoint = Endpoint(
            base_url=f"{base}/v1",
            model=self.served_model_name,
            headers=self.client_headers,
            chat_template=self._chat_template(name),
        )
        return self.endpoint

    def deploy_only(self) -> str:
        """Deploy (or find) the app without waiting for vLLM; its URL."""
        check_modal_token()
        spec = self._deploy_spec()
        self._validate_offline(spec)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        return self._deployed_url(spec)

    def _deployed_url(self, spec: DeploySpec) -> str:
        name = spec.app_name()
        url = None if self.redeploy else self._web_url(name)
        if url is None:
            began = time.monotonic()
            self._deploy(spec)
            self.timings["deploy"] = round(time.monotonic() - began, 1)
            self._deployed_here = True
            url = self._web_url(name)
            if url is None:
                raise self._failure(f"app {name} deployed but has no URL")
        else:
            self._note(f"reusing deployed app {name} at {url}")
        self.url = url
        return url

    @property
    def client_headers(self) -> tuple[tuple[str, str], ...]:
        """What every request to the local proxy carries: this session's client token."""
        from pytest_modal_eval.serving.modal.redirect_proxy import CLIENT_TOKEN_HEADER

        return ((CLIENT_TOKEN_HEADER, self._client_token),)

    def stop(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.stop()
        self.endpoint = None
        # Stop only what this session deployed: a reused app may serve another run right now.
        if self._deployed_here and not self.keep_deployment:
            self._deployed_here = False
            name = self.app_name
            result = self._run_cli(["app", "stop", name, "--yes"], timeout=120)
            if result != 0:
                raise ServingError(
                    f"could not stop Modal app {name} (see {self.log_path}); "
                    f"stop it with `modal app stop {name}`"
                )

    @staticmethod
    def _validate_offline(spec: DeploySpec) -> None:
        """Build the app locally: Modal's own checks (GPU spec, scaledown_window in 2..3600,
        ...) then fail here, in milliseconds, instead of minutes into a deploy."""
        import modal.exception

        try:
            modal_app.build(spec)
        except modal.exception.InvalidError as exc:
            raise ServingError(f"invalid Modal settings for {spec.profile.model}: {exc}") from exc

    # -- Modal calls (network) ----------------------------------------------------------

    def _web_url(self, name: str) -> str | None:
        """The deployed app's URL, or None when no app of that name is deployed."""
        import modal.exception

        try:
            url = lookup_url(name)
        except (modal.exception.NotFoundError, modal.exception.ExecutionError):
            return None
        except modal.exception.AuthError as exc:
            raise ServingError(f"Modal rejected the token: {exc}\n{_NO_TOKEN}") from exc
        except modal.exception.Error as exc:  # e.g. ConnectionError after ~1 min of retries
            raise ServingError(f"cannot reach Modal to look up app {name}: {exc}") from exc
        return url or None

    def _deploy(self, spec: DeploySpec) -> None:
        name = spec.app_name()
        package_root = str(_PACKAGE_PARENT)
        env = {
            **os.environ,
            **spec.to_env(),
            # The CLI imports the app module by name; make sure it finds this very checkout.
            "PYTHONPATH": os.pathsep.join(
                filter(None, [package_root, os.environ.get("PYTHONPATH")])
            ),
        }
        args = ["deploy", "-m", modal_app.__name__, "--name", name]
        result = self._run_cli(args, timeout=self._deploy_timeout, env=env)
        if result != 0:
            how = "timed out" if result is None else f"failed (exit {result})"
            raise self._failure(f"`modal deploy` of {name} {how}")

    def _wait_ready(self, base: str) -> None:
        """Ask vLLM for its models through the proxy until it lists ours.

        This deliberately takes the cold start (image pull, weights, vLLM boot) now, not during
        the first benchmark; the proxy follows Modal's 303s while the container boots.
        """
        # Generous: startup_timeout is what Modal gives vLLM, the margin covers scheduling.
        deadline = time.monotonic() + self.profile.infra.startup_timeout + 300
        last = "no answer"
        with httpx.Client(trust_env=False) as client:
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    response = client.get(
                        f"{base}/v1/models", timeout=remaining, headers=dict(self.client_headers)
                    )
                    if response.status_code == 200:
                        ids = [m.get("id") for m in response.json().get("data", [])]
                        if self.served_model_name in ids:
                            return
                        last = f"models {ids} do not include {self.served_model_name!r}"
                    else:
                        last = f"HTTP {response.status_code}: {response.text[:300]}"
                except (httpx.HTTPError, ValueError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                self._note(f"not ready: {last}")
                time.sleep(min(10.0, max(0.0, deadline - time.monotonic())))
        raise self._failure(f"vLLM on Modal did not answer in time ({last})")

    def _chat_template(self, name: str) -> dict[str, str]:
        """The container's decision: from the Modal Dict it writes, else from its log line."""
        try:
            value = self._read_template_dict(name)
            if isinstance(value, dict) and value.get("source"):
                return {str(k): str(v) for k, v in value.items()}
        except Exception as exc:  # bookkeeping only: never fail a started server over it
            self._note(f"chat template Dict unreadable: {exc}")
        logs = self._capture_cli(["app", "logs", name, "--tail", "1000"], timeout=60)
        return parse_log_line(logs) or dict(UNKNOWN_TEMPLATE)

    def _read_template_dict(self, name: str) -> object:
        import modal

        return modal.Dict.from_name(modal_app.TEMPLATE_DICT).get(name)

    # -- helpers ------------------------------------------------------------------------

    def _failure(self, what: str) -> ServingError:
        """A ServingError whose message has the tail of our log, after fetching app logs."""
        name = self.app_name
        self._run_cli(["app", "logs", name, "--tail", str(APP_LOG_ENTRIES)], timeout=60)
        return ServingError(
            f"{what}.\nLog: {self.log_path} (deploy output and `modal app logs {name}`)\n"
            f"--- last {LOG_TAIL_LINES} lines ---\n{log_tail(self.log_path)}\n---\n"
            f"Check: the Modal secrets {modal_app.HF_SECRET!r} and {modal_app.API_KEY_SECRET!r} "
            f"exist (`modal secret list`), the GPU type {self.profile.infra.gpu!r}, and that "
            f"the model id {self.profile.model!r} is right."
        )

    def _note(self, line: str) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(f"[pytest-modal-eval] {self.redactor.text(line)}\n")

    def _run_cli(
        self, args: list[str], *, timeout: float, env: Mapping[str, str] | None = None
    ) -> int | None:
        """Run the Modal CLI with its output appended to our log, line by line through the
        redactor; None when it timed out."""
        cmd = [*self._cli, *args]
        self._note(f"$ {shlex.join(redact_args(cmd))}")
        try:
            process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=None if env is None else dict(env),
            )
        except OSError as exc:
            self._note(f"cannot run {cmd[0]}: {exc}")
            return None
        assert process.stdout is not None
        copier = threading.Thread(target=self._copy_to_log, args=(process.stdout,), daemon=True)
        copier.start()
        code: int | None = None
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:  # also on Ctrl-C: the CLI does not outlive the session
            if code is None:
                process.kill()
                process.wait()
        # The CLI's children may hold the pipe after it exits: the log gets what came by then.
        copier.join(5.0)
        return code

    def _copy_to_log(self, stream: Any) -> None:
        """A process's output to our log without the secrets the redactor knows, found across
        lines and writes (``serving.log_redaction``)."""
        known: list[Any] = [None, None]  # the secrets the rules were made from, the rules

        def rules() -> LogRules:
            if known[0] != len(self.redactor.values):
                known[:] = [len(self.redactor.values), LogRules(self.redactor.to_json())]
            rules_now: LogRules = known[1]
            return rules_now

        with stream, self.log_path.open("a", encoding="utf-8", errors="replace") as log:

            def write(text: str) -> None:
                log.write(text)
                log.flush()

            copy_redacted(stream.fileno(), write, rules)

    def _capture_cli(self, args: list[str], *, timeout: float) -> str:
        try:
            result = subprocess.run(
                [*self._cli, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except (subprocess.TimeoutExpired, OSError):
            return ""
        return self.redactor.text(result.stdout)

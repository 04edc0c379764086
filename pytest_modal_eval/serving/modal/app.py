"""The Modal app that serves one model with vLLM.

Modal re-imports this module inside the container, where the local process's variables are gone.
So everything the container needs travels in one environment variable, ``MODAL_EVAL_SPEC``
(JSON of a ``DeploySpec``), set on the function: ``build_app(spec)`` builds the app locally, and
the module-level ``app`` below rebuilds the same app from that variable both for
``modal deploy -m pytest_modal_eval.serving.modal.app`` and inside the container.

``serve`` is defined at module level and decorated inside ``build_app``: Modal's container loads
it with ``getattr(module, "serve")`` and finds its App by name among the apps the import built.

Import-light on purpose: the container has modal, vLLM and vLLM's dependencies (pydantic,
huggingface_hub), not this plugin's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import modal

from pytest_modal_eval.model_names import model_label
from pytest_modal_eval.serving.chat_template import (
    FallbackTemplate,
    load_fallback,
    log_line,
    resolve_for_model,
    sha256_text,
)
from pytest_modal_eval.serving.endpoint import ServerProfile, canonical_json
from pytest_modal_eval.serving.forwarding import forwarded_target
from pytest_modal_eval.serving.vllm.command import vllm_args, vllm_command

VLLM_VERSION = "0.32.0"  # the same version as the CPU build the flags are tested against
PYTHON_VERSION = "3.12"
# Bump when the container's behaviour changes without the spec changing: it is part of the app
# name, so a deployment made by older code is never silently reused.
SERVING_REVISION = "2"

PORT = 8000
FUNCTION_NAME = "serve"
SPEC_ENV = "MODAL_EVAL_SPEC"

HF_CACHE_VOLUME, HF_CACHE_PATH = "huggingface-cache", "/root/.cache/huggingface"
VLLM_CACHE_VOLUME, VLLM_CACHE_PATH = "vllm-cache", "/root/.cache/vllm"
HF_SECRET = "huggingface"  # HF_TOKEN, for gated models
API_KEY_SECRET = "vllm-api-key"  # VLLM_API_KEY, which vLLM itself reads from its environment

#: Where the container records its chat-template decision, keyed by app name.
TEMPLATE_DICT = "pytest-modal-eval-chat-templates"
#: Where each container records how long vLLM took to answer, keyed by app name.
STARTUP_DICT = "pytest-modal-eval-startups"
STARTUPS_KEPT = 20

#: The tag that marks an app as this tool's: ``stop`` and ``status`` touch no other app.
CREATED_BY_TAG, CREATED_BY = "created-by", "pytest-modal-eval"

#: Settings Modal applies at deploy time that do not change what the server answers. They are
#: left out of the app name, so `pytest-modal-eval deploy --warm` and a later `pytest` run with
#: the benchmark's own scaling settings find the same app.
DEPLOY_TIME_FIELDS = (
    "timeout",
    "scaledown_window",
    "max_concurrent_inputs",
    "startup_timeout",
    "min_containers",
    "max_containers",
    "target_concurrency",
    "memory_snapshot",
)

# Modal allows 64 characters of [A-Za-z0-9._-] in an app name, but the name also becomes part of
# the web URL's DNS label (<workspace>--<app>-serve.modal.run, at most 63 characters, lowercase
# letters, digits and dashes). Staying short and DNS-safe keeps that URL readable.
APP_NAME_PREFIX = "eval"
_SLUG_MAX = 24
_CONTAINER_TEMPLATE_PATH = "/root/modal_eval_chat_template.jinja"


@dataclass(frozen=True)
class DeploySpec:
    """Everything a deployment depends on; equal specs share one deployed app."""

    profile: ServerProfile
    served_model_name: str
    fallback: FallbackTemplate | None  # the fallback's text travels: the container has no files

    @classmethod
    def for_profile(cls, profile: ServerProfile, served_model_name: str) -> DeploySpec:
        return cls(profile, served_model_name, load_fallback(profile.chat_template))

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile.to_json(),
            "served_model_name": self.served_model_name,
            "fallback": self.fallback.to_json() if self.fallback else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeploySpec:
        fallback = data.get("fallback")
        return cls(
            profile=ServerProfile.from_json(data["profile"]),
            served_model_name=str(data["served_model_name"]),
            fallback=FallbackTemplate.from_json(fallback) if fallback else None,
        )

    def to_env(self) -> dict[str, str]:
        return {SPEC_ENV: canonical_json(self.to_json())}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DeploySpec | None:
        raw = (os.environ if environ is None else environ).get(SPEC_ENV)
        return cls.from_json(json.loads(raw)) if raw else None

    def app_name(self) -> str:
        """``eval-<model slug>-<hash>``: readable, unique per server, within Modal's limits.

        The hash covers what the server answers with (model, vLLM arguments, GPU, chat
        template), not :data:`DEPLOY_TIME_FIELDS`: the same server scaled differently is the
        same app, redeployed in place by ``pytest-modal-eval deploy``.
        """
        tail = self.profile.model.rstrip("/").rsplit("/", 1)[-1].lower()
        slug = re.sub(r"[^a-z0-9]+", "-", tail).strip("-")[:_SLUG_MAX].strip("-") or "model"
        spec = self.to_json()
        spec["profile"]["infra"] = {
            k: v for k, v in spec["profile"]["infra"].items() if k not in DEPLOY_TIME_FIELDS
        }
        identity = {"spec": spec, "vllm": VLLM_VERSION, "rev": SERVING_REVISION}
        return f"{APP_NAME_PREFIX}-{slug}-{sha256_text(canonical_json(identity))[:10]}"

    def tags(self) -> dict[str, str]:
        """Modal app tags: this tool's mark, and what ``status`` shows without the spec."""
        profile = self.profile
        return {
            CREATED_BY_TAG: CREATED_BY,
            "model": model_tag(profile.model),
            "gpu": tag_value(profile.infra.gpu),
            "tp": str(profile.vllm.tensor_parallel_size),
            "dp": str(profile.vllm.data_parallel_size),
        }


def tag_value(text: str) -> str:
    """``text`` as a Modal tag's value, which allows 63 characters of [A-Za-z0-9._-]:
    ``H100:2`` -> ``H100x2``."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text.replace("/", "--").replace(":", "x"))[:63]


def model_tag(model: str) -> str:
    """The ``model`` tag of the app serving ``model`` (what ``status`` shows and ``stop -m``
    matches): the model's label (``model_names.model_label``, a Hub id's, since a Modal
    container cannot load a local directory), as a tag's value."""
    return tag_value(model_label(model))


def vllm_image() -> modal.Image:
    """vLLM pinned; xet's high-performance mode speeds up first downloads of large weights."""
    return (
        modal.Image.debian_slim(python_version=PYTHON_VERSION)
        .uv_pip_install(f"vllm=={VLLM_VERSION}")
        .env({"HF_XET_HIGH_PERFORMANCE": "1"})
    )


def container_command(spec: DeploySpec, chat_template_path: str | None) -> list[str]:
    """The exact command the container runs: vLLM on 0.0.0.0:8000, where Modal routes."""
    args = vllm_args(
        spec.profile,
        served_model_name=spec.served_model_name,
        host="0.0.0.0",
        port=PORT,
        chat_template_path=chat_template_path,
    )
    return vllm_command(sys.executable, args)


def serve(*, sleep_mode: bool = False) -> subprocess.Popen[bytes]:
    """Container body: decide the chat template, record the decision, start vLLM.

    Returns once vLLM is started; Modal then waits for port 8000 up to ``startup_timeout``.
    ``sleep_mode`` starts vLLM so that it can release the GPU before a memory snapshot.
    """
    spec = DeploySpec.from_env()
    if spec is None:
        raise RuntimeError(f"{SPEC_ENV} is not set; deploy through pytest-modal-eval")
    # Only the template files are fetched here (into the HF cache volume vLLM then reads from),
    # so the decision is the one vLLM's tokenizer will make.
    choice = resolve_for_model(
        spec.profile.model,
        spec.fallback,
        extra_args=spec.profile.vllm.extra_args,
        revision=spec.profile.vllm.revision,
    )
    template_path = None
    if choice.text is not None:
        Path(_CONTAINER_TEMPLATE_PATH).write_text(choice.text, encoding="utf-8")
        template_path = _CONTAINER_TEMPLATE_PATH
    print(log_line(choice.provenance), flush=True)
    _publish_provenance(spec.app_name(), choice.provenance)
    command = container_command(spec, template_path)
    if sleep_mode:
        command.append("--enable-sleep-mode")
        os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # exposes /sleep and /wake_up
    return subprocess.Popen(command)


def _publish_provenance(app_name: str, provenance: dict[str, str]) -> None:
    # vLLM owns the only port, so the decision reaches the local side through a Modal Dict
    # (read after the server answers); the log line above is the human-readable copy.
    try:
        modal.Dict.from_name(TEMPLATE_DICT, create_if_missing=True)[app_name] = provenance
    except Exception as exc:  # best effort: serving must not fail over bookkeeping
        print(f"could not record the chat template in Dict {TEMPLATE_DICT!r}: {exc}", flush=True)


def _local(path: str, method: str = "GET", timeout: float = 5.0) -> int:
    """Status of a request to the vLLM in this container (0 when it does not answer);
    ``path`` must be a plain one (``serving.forwarding``): the URL is built from parts."""
    import urllib.error
    import urllib.parse
    import urllib.request

    target, query = forwarded_target(path)
    url = urllib.parse.urlunsplit(("http", f"127.0.0.1:{PORT}", target, query, ""))
    request = urllib.request.Request(url, method=method)
    key = os.environ.get("VLLM_API_KEY")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def wait_healthy(process: subprocess.Popen[bytes], timeout: float) -> float:
    """Seconds until vLLM answers ``/health``; raise if it exits or the time runs out."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited with status {process.returncode} while starting")
        if _local("/health") == 200:
            return time.monotonic() - started
        time.sleep(1.0)
    raise RuntimeError(f"vLLM did not answer /health within {timeout:.0f} s")


def record_startup(app_name: str, seconds: float, *, snapshot: bool) -> None:
    """Print and publish how long this container took to serve (``status`` shows it)."""
    entry = {"seconds": round(seconds, 1), "snapshot": snapshot, "at": time.time()}
    print(f"pytest-modal-eval: vLLM serving after {seconds:.1f} s"
          f"{' (restored from a memory snapshot)' if snapshot else ''}", flush=True)  # fmt: skip
    try:
        startups = modal.Dict.from_name(STARTUP_DICT, create_if_missing=True)
        startups[app_name] = [*(startups.get(app_name) or [])[-(STARTUPS_KEPT - 1) :], entry]
    except Exception as exc:  # best effort, as above
        print(f"could not record the start-up time in Dict {STARTUP_DICT!r}: {exc}", flush=True)


class VllmServer:
    """A Modal Server whose container runs vLLM; Modal routes requests to port 8000."""

    @modal.enter()
    def start(self) -> None:
        began = time.monotonic()
        self.process = serve()
        spec = DeploySpec.from_env()
        assert spec is not None

        def measure() -> None:
            # Modal waits for the port itself; this only times it, for `status`.
            with contextlib.suppress(RuntimeError):
                wait_healthy(self.process, spec.profile.infra.startup_timeout)
                record_startup(spec.app_name(), time.monotonic() - began, snapshot=False)

        threading.Thread(target=measure, daemon=True).start()

    @modal.exit()
    def stop(self) -> None:
        self.process.terminate()


class VllmSnapshotServer:
    """As :class:`VllmServer`, started once before a memory snapshot and restored from it.

    vLLM starts in sleep mode, loads and warms up, then sleeps (weights offloaded, the GPU
    freed) so the snapshot holds a started server; each restored container wakes it.
    """

    @modal.enter(snap=True)
    def start(self) -> None:
        spec = DeploySpec.from_env()
        assert spec is not None
        self.process = serve(sleep_mode=True)
        wait_healthy(self.process, spec.profile.infra.startup_timeout)
        if _local("/sleep?level=1", "POST", timeout=600) != 200:
            raise RuntimeError("vLLM refused to sleep before the memory snapshot")

    @modal.enter(snap=False)
    def wake(self) -> None:
        began = time.monotonic()
        spec = DeploySpec.from_env()
        assert spec is not None
        if _local("/wake_up", "POST", timeout=600) != 200:
            raise RuntimeError("vLLM did not wake up after the memory snapshot was restored")
        record_startup(spec.app_name(), time.monotonic() - began, snapshot=True)

    @modal.exit()
    def stop(self) -> None:
        self.process.terminate()


class BuiltApp(NamedTuple):
    app: modal.App
    server: modal.Server  # `.info()` shows its spec offline


def server_options(spec: DeploySpec) -> dict[str, Any]:
    """The arguments of ``@app.server`` that come from the benchmark's ``infra``."""
    infra = spec.profile.infra
    target = infra.target_concurrency or infra.max_concurrent_inputs
    options: dict[str, Any] = {
        "gpu": infra.gpu,
        "startup_timeout": infra.startup_timeout,
        "scaledown_window": infra.scaledown_window,
        "max_concurrency": infra.max_concurrent_inputs,
        "target_concurrency": target,
        "min_containers": infra.min_containers,
        "max_containers": infra.max_containers,
        "enable_memory_snapshot": infra.memory_snapshot,
    }
    if infra.memory_snapshot:
        options["experimental_options"] = {"enable_gpu_snapshot": True}
    return options


def build(spec: DeploySpec) -> BuiltApp:
    """The Modal app for ``spec`` and its one Server; building is offline, deploying is not."""
    app = modal.App(spec.app_name(), tags=spec.tags())
    body = VllmSnapshotServer if spec.profile.infra.memory_snapshot else VllmServer
    server = app.server(
        name=FUNCTION_NAME,
        image=vllm_image(),
        port=PORT,
        unauthenticated=False,  # callers need a Modal proxy token, as the local proxy sends
        volumes={
            HF_CACHE_PATH: modal.Volume.from_name(HF_CACHE_VOLUME, create_if_missing=True),
            VLLM_CACHE_PATH: modal.Volume.from_name(VLLM_CACHE_VOLUME, create_if_missing=True),
        },
        secrets=[
            modal.Secret.from_name(HF_SECRET),
            modal.Secret.from_name(API_KEY_SECRET, required_keys=["VLLM_API_KEY"]),
        ],
        env={**spec.to_env()},
        **server_options(spec),
    )(body)
    return BuiltApp(app, server)


def build_app(spec: DeploySpec) -> modal.App:
    return build(spec).app


# For `modal deploy -m pytest_modal_eval.serving.modal.app` (with MODAL_EVAL_SPEC set) and for the
# container's re-import; None when imported without a spec (tests, the plugin).
_spec = DeploySpec.from_env()
app: modal.App | None = build_app(_spec) if _spec is not None else None

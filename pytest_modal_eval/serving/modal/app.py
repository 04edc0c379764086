"""The Modal app that serves one model with vLLM (the original tool's ``serve.py``).

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

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import modal

from pytest_modal_eval.serving.chat_template import (
    FallbackTemplate,
    load_fallback,
    log_line,
    resolve_for_model,
    sha256_text,
)
from pytest_modal_eval.serving.endpoint import ServerProfile, canonical_json
from pytest_modal_eval.serving.vllm.command import vllm_args, vllm_command

VLLM_VERSION = "0.32.0"  # the same version as the CPU build the flags are tested against
PYTHON_VERSION = "3.12"
# Bump when the container's behaviour changes without the spec changing: it is part of the app
# name, so a deployment made by older code is never silently reused.
SERVING_REVISION = "1"

PORT = 8000
FUNCTION_NAME = "serve"
SPEC_ENV = "MODAL_EVAL_SPEC"

HF_CACHE_VOLUME, HF_CACHE_PATH = "huggingface-cache", "/root/.cache/huggingface"
VLLM_CACHE_VOLUME, VLLM_CACHE_PATH = "vllm-cache", "/root/.cache/vllm"
HF_SECRET = "huggingface"  # HF_TOKEN, for gated models
API_KEY_SECRET = "vllm-api-key"  # VLLM_API_KEY, which vLLM itself reads from its environment

#: Where the container records its chat-template decision, keyed by app name.
TEMPLATE_DICT = "pytest-modal-eval-chat-templates"

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
        """``eval-<model slug>-<hash>``: readable, unique per spec, within Modal's limits."""
        tail = self.profile.model.rstrip("/").rsplit("/", 1)[-1].lower()
        slug = re.sub(r"[^a-z0-9]+", "-", tail).strip("-")[:_SLUG_MAX].strip("-") or "model"
        identity = {"spec": self.to_json(), "vllm": VLLM_VERSION, "rev": SERVING_REVISION}
        return f"{APP_NAME_PREFIX}-{slug}-{sha256_text(canonical_json(identity))[:10]}"


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


def serve() -> None:
    """Container body: decide the chat template, record the decision, start vLLM.

    Returns at once; ``@modal.web_server`` then waits for port 8000 up to its startup timeout.
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
    subprocess.Popen(container_command(spec, template_path))


def _publish_provenance(app_name: str, provenance: dict[str, str]) -> None:
    # vLLM owns the only port, so the decision reaches the local side through a Modal Dict
    # (read after the server answers); the log line above is the human-readable copy.
    try:
        modal.Dict.from_name(TEMPLATE_DICT, create_if_missing=True)[app_name] = provenance
    except Exception as exc:  # best effort: serving must not fail over bookkeeping
        print(f"could not record the chat template in Dict {TEMPLATE_DICT!r}: {exc}", flush=True)


class BuiltApp(NamedTuple):
    app: modal.App
    function: modal.Function[[], None, None]  # the web server; `.info()` shows its spec offline


def build(spec: DeploySpec) -> BuiltApp:
    """The Modal app for ``spec`` and its one function; building is offline, deploying is not."""
    infra = spec.profile.infra
    env: dict[str, str | None] = {**spec.to_env()}
    app = modal.App(spec.app_name())
    web = modal.web_server(
        port=PORT, startup_timeout=infra.startup_timeout, requires_proxy_auth=True
    )
    function: modal.Function[[], None, None] = app.function(
        name=FUNCTION_NAME,
        image=vllm_image(),
        gpu=infra.gpu,
        timeout=infra.timeout,
        scaledown_window=infra.scaledown_window,
        volumes={
            HF_CACHE_PATH: modal.Volume.from_name(HF_CACHE_VOLUME, create_if_missing=True),
            VLLM_CACHE_PATH: modal.Volume.from_name(VLLM_CACHE_VOLUME, create_if_missing=True),
        },
        secrets=[
            modal.Secret.from_name(HF_SECRET),
            modal.Secret.from_name(API_KEY_SECRET, required_keys=["VLLM_API_KEY"]),
        ],
        env=env,
    )(modal.concurrent(max_inputs=infra.max_concurrent_inputs)(web(serve)))
    return BuiltApp(app, function)


def build_app(spec: DeploySpec) -> modal.App:
    return build(spec).app


# For `modal deploy -m pytest_modal_eval.serving.modal.app` (with MODAL_EVAL_SPEC set) and for the
# container's re-import; None when imported without a spec (tests, the plugin).
_spec = DeploySpec.from_env()
app: modal.App | None = build_app(_spec) if _spec is not None else None

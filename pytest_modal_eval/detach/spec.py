"""What the runner app's definition depends on (:class:`RunnerSpec`), and its names: apart from
``app.py`` so that the container's code reads them without importing the app."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_modal_eval.config.options import CONTAINER_ENV
from pytest_modal_eval.detach.image import RunnerImage

SPEC_ENV = "MODAL_EVAL_RUNNER_SPEC"
APP_PREFIX = "evalrun"
CONTROLLER = "run_session"
WORKER = "run_worker"
#: Seconds one attempt may run: Modal's maximum. A longer session goes on in the next attempt
#: (a retry), from what the Volume holds.
TIMEOUT_S = 24 * 3600
#: Attempts after the first; a pre-empted container is restarted on the same input too.
MAX_RETRIES = 5
#: The tags that mark the app as this tool's runner (``status`` and ``stop --all`` touch only
#: serving apps, whose names start with ``eval-``).
TAGS = {"created-by": "pytest-modal-eval", "role": "detached-runner"}


@dataclass(frozen=True)
class RunnerSpec:
    """Everything the runner's definition depends on; equal specs share one deployed app."""

    image: RunnerImage
    volume: str
    cpu: float
    memory_mib: int
    secrets: tuple[str, ...] = ()  # named Modal secrets
    env_names: tuple[str, ...] = ()  # variables whose values travel as a Secret.from_dict
    # Settings that travel in the same Secret.from_dict but are not secrets (``OTEL_*``,
    # ``WANDB_*``): the container's redactor does not learn them.
    setting_names: tuple[str, ...] = ()
    project: str = "project"  # the project directory's name, for the app's name

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image.to_json(),
            "volume": self.volume,
            "cpu": self.cpu,
            "memory_mib": self.memory_mib,
            "secrets": list(self.secrets),
            "env_names": list(self.env_names),
            "setting_names": list(self.setting_names),
            "project": self.project,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunnerSpec:
        return cls(
            image=RunnerImage.from_json(data["image"]),
            volume=str(data["volume"]),
            cpu=float(data["cpu"]),
            memory_mib=int(data["memory_mib"]),
            secrets=tuple(data.get("secrets") or ()),
            env_names=tuple(data.get("env_names") or ()),
            setting_names=tuple(data.get("setting_names") or ()),
            project=str(data.get("project") or "project"),
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RunnerSpec | None:
        raw = (os.environ if environ is None else environ).get(SPEC_ENV)
        return cls.from_json(json.loads(raw)) if raw else None

    def app_name(self) -> str:
        """``evalrun-<project>-<hash>``: one app per project and environment, within Modal's
        64 characters."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.project.lower()).strip("-")[:24] or "project"
        text = json.dumps(self.to_json(), sort_keys=True)
        return f"{APP_PREFIX}-{slug}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"

    def container_env(self) -> dict[str, str]:
        """The environment every runner container gets (not secret)."""
        size = {"cpu": self.cpu, "memory_mib": self.memory_mib}
        return {
            SPEC_ENV: json.dumps(self.to_json(), sort_keys=True),
            CONTAINER_ENV: json.dumps(size, sort_keys=True),
        }

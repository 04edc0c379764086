"""The Modal app that runs detached sessions: a controller function (the session) and a worker
function (one benchmark item, or one shard of its examples, of a fanned-out session), both in a
CPU container with the results Volume mounted at :data:`~.layout.VOLUME_MOUNT`.

As for the serving app (``serving/modal/app.py``), Modal re-imports this module in the
container, so what the definition depends on travels in one environment variable,
``MODAL_EVAL_RUNNER_SPEC`` (JSON of a :class:`RunnerSpec`): :func:`build` makes the app here
and the module-level :data:`app` makes the same one from that variable there.
``run_session`` and ``run_worker`` are defined at module level and decorated inside
:func:`build`: the container finds them by name.

Secrets: the values of the variables :attr:`RunnerSpec.env_names` names (and of the settings
:attr:`RunnerSpec.setting_names` names: traces' ``OTEL_*``, W&B's ``WANDB_*``) travel in a
``Secret.from_dict`` made from the launching machine's environment at deploy time, and the
named Modal secrets of :attr:`RunnerSpec.secrets` are attached; none is in the image, the spec
or any call's arguments.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import modal

from pytest_modal_eval.detach.layout import VOLUME_MOUNT
from pytest_modal_eval.detach.spec import (
    CONTROLLER,
    MAX_RETRIES,
    TAGS,
    TIMEOUT_S,
    WORKER,
    RunnerSpec,
)


def run_session(request: dict[str, Any]) -> dict[str, Any]:
    """The controller: runs the detached pytest session (see :mod:`.container`)."""
    from pytest_modal_eval.detach.container import run_controller

    return run_controller(request)


def run_worker(request: dict[str, Any]) -> dict[str, Any]:
    """A worker of a fanned-out session: one benchmark item, or one shard of its examples."""
    from pytest_modal_eval.detach.container import run_worker as work

    return work(request)


class BuiltRunner(NamedTuple):
    app: modal.App
    controller: modal.Function[..., Any, Any]  # `.info()` shows its spec offline
    worker: modal.Function[..., Any, Any]


def build(spec: RunnerSpec, env_values: Mapping[str, str] | None = None) -> BuiltRunner:
    """The runner app for ``spec``; ``env_values`` are the secret variables' values (the
    launching machine's; in the container, its own environment's)."""
    app = modal.App(spec.app_name(), tags=dict(TAGS))
    values = env_values if env_values is not None else os.environ
    present: dict[str, str | None] = {
        name: values[name] for name in (*spec.env_names, *spec.setting_names) if values.get(name)
    }
    secrets = [modal.Secret.from_name(name) for name in spec.secrets]
    if present:
        secrets.append(modal.Secret.from_dict(present))
    options: dict[str, Any] = {
        "image": spec.image.build(),
        "cpu": spec.cpu,
        "memory": spec.memory_mib,
        "timeout": TIMEOUT_S,
        "retries": modal.Retries(max_retries=MAX_RETRIES, initial_delay=5.0),
        "volumes": {VOLUME_MOUNT: modal.Volume.from_name(spec.volume, create_if_missing=True)},
        "secrets": secrets,
        "env": spec.container_env(),
        # A fresh container for each input: one session's files and processes never meet
        # another's.
        "single_use_containers": True,
        # This package is in the image: pinned when installed from an index, else added as
        # local source (RunnerImage.sources); Modal does not add it a second time.
        "include_source": False,
    }
    controller = app.function(name=CONTROLLER, **options)(run_session)
    worker = app.function(name=WORKER, **options)(run_worker)
    return BuiltRunner(app, controller, worker)


# In the container (and for `modal deploy -m` with the spec set): the same app, rebuilt.
_spec = RunnerSpec.from_env()
app: modal.App | None = build(_spec).app if _spec is not None else None

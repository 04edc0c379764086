"""What the items of one process share: settings, the redactor, endpoints (kept in
``config.stash``; the hooks that drive it are in :mod:`pytest_modal_eval.session`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_modal_eval.client.observe import EvalObserver
from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.serving.broker import BrokerClient
from pytest_modal_eval.serving.deployments import Deployments
from pytest_modal_eval.serving.endpoint_check import EndpointChecker

if TYPE_CHECKING:
    from typing import Any

    from pytest_modal_eval.runs.identity import ServedModel
    from pytest_modal_eval.serving.endpoint import ServerRequest


@dataclass
class EvalContext:
    """What every benchmark item of this process shares; the work is in :mod:`.item_run`."""

    config: pytest.Config
    settings: Settings
    checker: EndpointChecker = field(default_factory=EndpointChecker)
    # Where the reference model's items leave their results for the other models' items (see
    # gate/reference.py); shared by the controller and its xdist workers, created on first use.
    references_dir: Path | None = None
    # Who evaluates, as a run's lock records it (runs.writer_lock): the session's id (xdist's
    # testrunuid under -n, so workers share it) and this process's worker id.
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    worker: str | None = None
    # One line per run Ctrl-C ended (report/interrupted.py says them at the session's end),
    # and those runs' directories (the session's HTML report shows what they keep).
    interrupted: list[str] = field(default_factory=list)
    interrupted_runs: list[str] = field(default_factory=list)
    # Every secret value this process holds, for everything it writes, prints or shares; it
    # learns each benchmark's secret env_args as the benchmark is collected.
    redactor: Redactor = field(default_factory=Redactor)
    # Who watches each run as it goes (the session's traces, pytest_modal_eval.traces);
    # None: nobody.
    observer: EvalObserver | None = None


def session_redactor(settings: Settings) -> Redactor:
    """The secrets of a session's environment: the key ``--api-key-env`` names, the variables
    ini ``modal_eval_secret_env`` lists, the plugin's own credentials (Modal, vLLM, the Hub) and
    every variable with a secret-looking name."""
    return Redactor.from_environ(names=[settings.api_key_env, *settings.secret_env])


CONTEXT_KEY = pytest.StashKey[EvalContext]()
#: The servers this process owns (in-process, or the controller under xdist).
DEPLOYMENTS_KEY = pytest.StashKey[Deployments]()
#: Where this process asks for endpoints: its Deployments, or on an xdist worker the broker.
SOURCE_KEY = pytest.StashKey["Deployments | BrokerClient"]()


def endpoint_source(config: pytest.Config) -> Deployments | BrokerClient:
    return config.stash[SOURCE_KEY]


def served_model(context: EvalContext) -> ServedModel:
    """What the endpoint a ``--base-url`` request goes to says it serves (its ``/models``
    entry, checked once per endpoint by the process's checker), asked where this process asks
    for endpoints: for ``runs.identity.ModelIdentities``."""

    def served(request: ServerRequest) -> tuple[dict[str, Any] | None, str | None]:
        info = endpoint_source(context.config).endpoint_for(request)
        return context.checker.served_model(info.endpoint, info.check_timeout)

    return served

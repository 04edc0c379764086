"""The per-process plugin object: settings and state shared by the session's items."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.serving.endpoint_check import EndpointChecker

if TYPE_CHECKING:
    from pytest_modal_eval.runs.identity import ModelIdentity


@dataclass
class EvalSession:
    """What every benchmark item of this process shares; the work is in :mod:`.item_run`."""

    config: pytest.Config
    settings: Settings
    checker: EndpointChecker = field(default_factory=EndpointChecker)
    # Where the reference model's items leave their results for the other models' items (see
    # judge/reference.py); shared by the controller and its xdist workers, created on first use.
    references_dir: Path | None = None
    # Model identities found this session (runs.identity), by what they depend on: the Hub is
    # asked and a directory hashed once per process, not once per benchmark.
    identities: dict[str, ModelIdentity] = field(default_factory=dict)


SESSION_KEY = pytest.StashKey[EvalSession]()

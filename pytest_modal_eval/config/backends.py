"""The serving backends: one entry per value of ``--backend``, saying what each one is.

Everything that differs between backends is a field of :class:`BackendSpec` here: whether a
server is started (and where), whether requests go through the plugin's redirect proxy, how
long the first answer may take, whether it runs on Modal. Code asks the spec (``if
backend(name).starts_server``), never compares names. Option parsing reads this module in every
pytest session, and the Modal container reads it too, so it imports nothing but the standard
library; how each backend's server is built is in ``serving/backends.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BackendSpec:
    name: str
    starts_server: bool  # False: the endpoint exists already (``--base-url``); nothing started
    runs_here: bool  # the server is a process on this machine (one GPU at a time)
    proxied: bool  # requests go through the plugin's redirect proxy
    # The server runs on Modal: Modal credentials are checked before collection, and its server
    # time is GPU-hours at Modal's GPU prices.
    on_modal: bool
    check_timeout_s: float  # time the first answer may take once the server is up
    # The first answer may also wait for the profile's startup_timeout (a cold start on Modal).
    check_waits_for_startup: bool = False
    # The benchmark settings its server is built from: a YAML section (``vllm``), or one key of
    # one (``infra.startup_timeout``). A backend that starts nothing uses none of them.
    server_settings: tuple[str, ...] = ()

    @property
    def takes_base_url(self) -> bool:
        """Whether the backend is a given URL (``--base-url``) rather than a server we start."""
        return not self.starts_server

    def check_timeout(self, startup_timeout: float) -> float:
        """Seconds the first answer may take, for a profile with ``startup_timeout``."""
        extra = startup_timeout if self.check_waits_for_startup else 0.0
        return self.check_timeout_s + extra

    def server_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Of a benchmark configuration as JSON (``BenchmarkConfig.model_dump``), the settings
        of :data:`SERVER_SECTIONS` this backend's server was built from: what applied to a run."""
        used: dict[str, Any] = {}
        for setting in self.server_settings:
            section, _, key = setting.partition(".")
            if section not in config:
                continue
            if not key:
                used[section] = config[section]
            elif isinstance(config[section], Mapping) and key in config[section]:
                used.setdefault(section, {})[key] = config[section][key]
        return used


#: Serve on Modal: deploy (or reuse) the app, through the plugin's redirect proxy. Extra 300 s
#: for the first answer: a cold start can pass the startup timeout.
MODAL = BackendSpec(
    "modal",
    starts_server=True,
    runs_here=False,
    proxied=True,
    on_modal=True,
    check_timeout_s=300.0,
    check_waits_for_startup=True,
    server_settings=("infra", "vllm", "chat_template"),
)
#: Start vLLM on this machine; it already answers /health when it is checked. Of ``infra``
#: (Modal's GPU and scaling) only the start-up timeout applies.
LOCAL = BackendSpec(
    "local",
    starts_server=True,
    runs_here=True,
    proxied=False,
    on_modal=False,
    check_timeout_s=30.0,
    server_settings=("infra.startup_timeout", "vllm", "chat_template"),
)
#: An endpoint someone else runs (``--base-url``): nothing is started.
ENDPOINT = BackendSpec(
    "endpoint",
    starts_server=False,
    runs_here=False,
    proxied=False,
    on_modal=False,
    check_timeout_s=15.0,
)

#: Every backend by name: ``--backend``'s choices. Each backend's name is spelled only here.
BACKENDS: dict[str, BackendSpec] = {spec.name: spec for spec in (MODAL, LOCAL, ENDPOINT)}

#: The benchmark sections that configure a server (``BackendSpec.server_settings``); the other
#: sections apply to every backend.
SERVER_SECTIONS = ("infra", "vllm", "chat_template")

#: ``--backend`` without ``--base-url``, when neither the option nor the ini key names one.
DEFAULT_BACKEND = MODAL.name

#: The backend ``--base-url`` implies.
BASE_URL_BACKEND = next(spec.name for spec in BACKENDS.values() if spec.takes_base_url)


def backend(name: str) -> BackendSpec:
    """The backend called ``name``; ``ValueError`` naming the choices if there is none."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}") from None

"""Server time per benchmark, and on Modal its GPU-hours and an estimated cost; in a detached
session, the CPU container's time and core-hours too.

The cost is an estimate from list prices: GPU seconds only (Modal also bills the container's
CPU and memory, a few percent of a GPU's price, and an idle container until its
``scaledown_window`` ends when the app is kept), at the prices of :data:`DEFAULT_GPU_PRICES`
unless the ini key ``modal_eval_gpu_prices`` gives others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_modal_eval.config.backends import backend
from pytest_modal_eval.config.gpu_prices import (
    DEFAULT_GPU_PRICES,
    INI_KEY,
    PRICES_DATE,
    gpu_type_and_count,
)


@dataclass(frozen=True)
class ServerTime:
    """One benchmark's share of a server: the start-up it waited for and the time it used it."""

    backend: str
    gpu: str | None  # the Modal GPU spec (TYPE[:COUNT]) of the profile
    startup_s: float  # start-up this benchmark waited for (0 when the server was up already)
    server_s: float  # that start-up plus the time the benchmark evaluated on the server

    def to_json(self, overrides: Mapping[str, float]) -> dict[str, Any]:
        """The figures for ``metadata.json`` and the summary; GPU-hours and cost on Modal.

        GPU-hours and cost derive from the recorded (rounded) server seconds, so the three
        figures in a record agree with each other.
        """
        server_s = round(self.server_s, 1)
        data: dict[str, Any] = {
            "backend": self.backend,
            "server_startup_s": round(self.startup_s, 1),
            "server_s": server_s,
        }
        if backend(self.backend).on_modal and self.gpu:
            kind, count = gpu_type_and_count(self.gpu)
            hours = server_s * count / 3600
            price = overrides.get(kind, DEFAULT_GPU_PRICES.get(kind))
            source = f"ini {INI_KEY}" if kind in overrides else f"Modal list price {PRICES_DATE}"
            data.update(
                gpu=self.gpu,
                gpu_hours=round(hours, 4),
                usd_per_gpu_hour=price,
                est_cost_usd=None if price is None else round(hours * price, 4),
                price_source=source if price is not None else "no price known",
            )
        return data


@dataclass(frozen=True)
class ContainerTime:
    """One benchmark's share of a detached session's CPU container (``--detach``): the time
    it held the container, and the core-hours and GiB-hours that makes at the container's size.
    (No price: Modal bills CPU and memory per second at rates this tool does not track.)"""

    cpu: float  # cores
    memory_mib: int
    container_s: float

    def to_json(self) -> dict[str, Any]:
        seconds = round(self.container_s, 3)  # a benchmark's share may be well under 0.1 s
        return {
            "cpu": self.cpu,
            "memory_mib": self.memory_mib,
            "container_s": seconds,
            "cpu_core_hours": round(seconds * self.cpu / 3600, 4),
            "memory_gib_hours": round(seconds * self.memory_mib / 1024 / 3600, 4),
        }

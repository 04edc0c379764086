"""Server time per benchmark, and on Modal its GPU-hours and an estimated cost.

The cost is an estimate from list prices: GPU seconds only (Modal also bills the container's
CPU and memory, a few percent of a GPU's price, and an idle container until its
``scaledown_window`` ends when the app is kept), at the prices of :data:`DEFAULT_GPU_PRICES`
unless the ini key ``modal_eval_gpu_prices`` gives others.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: When :data:`DEFAULT_GPU_PRICES` were read from Modal's published per-second prices.
PRICES_DATE = "2026-05-07"

#: USD per GPU-hour on Modal (its per-second list price times 3600), by GPU type.
DEFAULT_GPU_PRICES: dict[str, float] = {
    "B200": 6.2496,
    "H200": 4.5396,
    "H100": 3.9492,
    "A100-80GB": 2.4984,
    "A100-40GB": 2.0988,
    "L40S": 1.9512,
    "A10G": 1.1016,
    "L4": 0.7992,
    "T4": 0.5904,
}
#: GPU names Modal accepts that are priced as another entry of the table.
ALIASES = {"A10": "A10G", "A100": "A100-40GB"}

INI_KEY = "modal_eval_gpu_prices"


class PriceError(ValueError):
    """A malformed ``modal_eval_gpu_prices`` line; the message says which and how to write it."""


def parse_prices(lines: Iterable[str]) -> dict[str, float]:
    """Ini lines ``TYPE = USD_PER_GPU_HOUR``, as a table of the GPUs they price."""
    prices: dict[str, float] = {}
    for line in lines:
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        name, sep, value = text.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = math.nan
        if not sep or not name.strip() or not (math.isfinite(price) and price >= 0):
            raise PriceError(
                f"ini {INI_KEY}: cannot read {text!r}; write one GPU per line as "
                "TYPE = USD_PER_GPU_HOUR, e.g. H100 = 3.95"
            )
        prices[gpu_type_and_count(name)[0]] = price
    return prices


def gpu_type_and_count(gpu: str) -> tuple[str, int]:
    """``"a100-80gb:2"`` -> ``("A100-80GB", 2)``; aliases resolved."""
    kind, _, count = gpu.partition(":")
    key = kind.strip().upper()
    return ALIASES.get(key, key), int(count) if count.strip() else 1


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
        if self.backend == "modal" and self.gpu:
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

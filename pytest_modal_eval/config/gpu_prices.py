"""Modal's GPU prices: the list-price table and the ini key ``modal_eval_gpu_prices`` that
overrides it.

Settings parse the ini key (`config/options.py`); `serving/costs.py` turns a server's time into
GPU-hours and a cost with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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

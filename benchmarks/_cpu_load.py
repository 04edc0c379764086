"""A steady CPU load unrelated to any client: busy for ``BUSY_MS``, then asleep for ``IDLE_MS``.

``python -m benchmarks._cpu_load BUSY_MS IDLE_MS`` runs until killed. ``throughput`` runs the raw
client beside it as a control: how much a server sharing the client's cores loses to *any*
process using that much CPU, whatever it does.
"""

from __future__ import annotations

import sys
import time


def main() -> None:
    busy_s, idle_s = (float(arg) / 1000 for arg in sys.argv[1:3])
    while True:
        until = time.perf_counter() + busy_s
        while time.perf_counter() < until:
            pass
        time.sleep(idle_s)


if __name__ == "__main__":
    main()

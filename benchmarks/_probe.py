"""A pytest plugin the benchmarks load into the run they measure (``-p benchmarks._probe``).

It records when each example's subtest report arrives and the process's peak RSS, and writes
them at the end of the session: figures as JSON to ``$BENCH_PROBE_OUT``, the timestamps as
raw doubles to ``$BENCH_PROBE_OUT.times`` (no list of floats or JSON text in the measured
process). With ``$BENCH_PROXY_UPSTREAM``
and ``$BENCH_PROXY_PORT`` it also runs the plugin's own proxy (``ProxyThread``) inside the
pytest process, as the Modal backend does, so ``--base-url http://127.0.0.1:PORT/v1`` goes
through it. Cost per example: a ``perf_counter()`` and a ``process_time()`` call, an append to
an ``array('d')`` (8 bytes; a list of floats would add ~3 MB to the RSS measured at 100,000).
"""

from __future__ import annotations

import json
import os
import resource
import time
from array import array
from pathlib import Path
from typing import Any

import pytest

_times = array("d")
_cpu = [0.0, 0.0]  # process CPU seconds (all threads) at the first and at the latest example
_started = time.perf_counter()
_proxy: Any = None


def pytest_configure(config: pytest.Config) -> None:
    """Starts the in-process proxy when asked to (controller, before any item runs)."""
    global _proxy
    upstream = os.environ.get("BENCH_PROXY_UPSTREAM")
    if upstream:
        from pytest_modal_eval.serving.modal.redirect_proxy import ProxySettings, ProxyThread

        log = os.environ.get("BENCH_PROXY_LOG")
        settings = ProxySettings(upstream=upstream, log_path=Path(log) if log else None)
        _proxy = ProxyThread(settings, port=int(os.environ["BENCH_PROXY_PORT"]))
        _proxy.start()


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """One timestamp per example (a subtest report of the call phase)."""
    if report.when == "call" and hasattr(report, "context"):
        _times.append(time.perf_counter())
        _cpu[1] = time.process_time()
        if len(_times) == 1:
            _cpu[0] = _cpu[1]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Writes the figures; stops the proxy."""
    if _proxy is not None:
        _proxy.stop()
    out = os.environ.get("BENCH_PROBE_OUT")
    if not out:
        return
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # perf_counter() is CLOCK_MONOTONIC on Linux: comparable with the benchmark's own clock.
    data = {
        "examples": len(_times),
        "started": _started,
        "peak_rss_mb": peak_kb / 1024,
        "cpu_window_s": _cpu[1] - _cpu[0],
    }
    with open(f"{out}.times", "wb") as times:
        _times.tofile(times)
    Path(out).write_text(json.dumps(data), encoding="utf-8")

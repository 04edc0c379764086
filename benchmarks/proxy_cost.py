"""Proxy cost: added latency per request and maximum requests/s, through the proxy vs direct.

The upstream is ``tests/support/openai_server.py`` (answers at once), so what is measured is the
proxy's own cost. The proxy is the plugin's (``python -m
pytest_modal_eval.serving.modal.redirect_proxy``, the same ``ModalProxy`` the Modal backend runs in
a thread), logging one line per request as in use. An aiohttp client sends the same chat request (a)
one at a time, for latency, and (b) with 256 in flight, for maximum throughput; direct and proxied
runs alternate, medians of the rounds.

Note the client, the proxy and the upstream share this machine's cores: on a small machine the
proxy's CPU is taken from the upstream, which is the pessimistic case.

Run: ``.venv/bin/python -m benchmarks.proxy_cost`` (about 1 minute).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks._common import (
    chat_bodies,
    demo_rows,
    fake_server,
    header,
    log,
    median,
    percentile,
    print_table,
    proxy_process,
    raw_client,
)

CONCURRENCY = 256


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=1000, help="requests, 1 in flight")
    parser.add_argument("--loaded", type=int, default=10000, help="requests, 256 in flight")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    header(
        "proxy cost: pytest_modal_eval.serving.modal.redirect_proxy vs direct, fast local upstream"
    )

    rows = demo_rows()
    one_by_one = chat_bodies([rows[i % len(rows)] for i in range(args.sequential)])
    loaded = chat_bodies([rows[i % len(rows)] for i in range(args.loaded)])
    results: dict[str, dict[str, list[float]]] = {
        name: {"p50": [], "p99": [], "rps": [], "p50@256": [], "p99@256": []}
        for name in ("direct", "proxy")
    }
    with (
        tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp,
        fake_server() as upstream,
        proxy_process(upstream, Path(tmp) / "proxy.log") as proxied,
    ):
        targets = {"direct": upstream, "proxy": proxied}
        for url in targets.values():  # warm-up: connections, code paths
            raw_client(url, loaded[:2000], CONCURRENCY)
        for round_ in range(1, args.repeats + 1):
            for name, url in targets.items():
                log(f"round {round_}/{args.repeats}: {name}")
                seq = raw_client(url, one_by_one, 1)
                load = raw_client(url, loaded, CONCURRENCY)
                if seq.errors or load.errors:
                    log(f"warning: {seq.errors + load.errors} failed requests ({name})")
                r = results[name]
                r["p50"].append(percentile(seq.latencies, 50) * 1000)
                r["p99"].append(percentile(seq.latencies, 99) * 1000)
                r["rps"].append(load.rps)
                r["p50@256"].append(percentile(load.latencies, 50) * 1000)
                r["p99@256"].append(percentile(load.latencies, 99) * 1000)

    d, p = ({k: median(v) for k, v in results[n].items()} for n in ("direct", "proxy"))
    ratio = p["rps"] / d["rps"]
    print(
        f"{args.sequential} sequential and {args.loaded} concurrent requests per round, "
        f"{args.repeats} rounds, medians\n"
    )
    print_table(
        ["", "direct", "via proxy", "added / ratio"],
        [
            [
                "latency p50, 1 in flight (ms)",
                f"{d['p50']:.2f}",
                f"{p['p50']:.2f}",
                f"+{p['p50'] - d['p50']:.2f} ms",
            ],
            [
                "latency p99, 1 in flight (ms)",
                f"{d['p99']:.2f}",
                f"{p['p99']:.2f}",
                f"+{p['p99'] - d['p99']:.2f} ms",
            ],
            [
                f"latency p50, {CONCURRENCY} in flight (ms)",
                f"{d['p50@256']:.1f}",
                f"{p['p50@256']:.1f}",
                f"+{p['p50@256'] - d['p50@256']:.1f} ms",
            ],
            [
                f"latency p99, {CONCURRENCY} in flight (ms)",
                f"{d['p99@256']:.1f}",
                f"{p['p99@256']:.1f}",
                f"+{p['p99@256'] - d['p99@256']:.1f} ms",
            ],
            [
                f"max requests/s, {CONCURRENCY} in flight",
                f"{d['rps']:.0f}",
                f"{p['rps']:.0f}",
                f"{ratio:.2f}x",
            ],
        ],
    )
    print(
        f"through the proxy: +{p['p50'] - d['p50']:.2f} ms p50 and "
        f"+{p['p99'] - d['p99']:.2f} ms p99 per request; {ratio:.2f}x the direct requests/s\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

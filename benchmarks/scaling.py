"""Scaling: requests/s against concurrency (1 -> 256), through the plugin and from a raw client.

One vLLM (CPU build, ``models/tiny-arith``) serves both. At each concurrency C the raw client
sends 6*C requests (at least 150) and the plugin evaluates as many examples with
``--override eval.max_concurrent=C``; requests/s is counted between the first and the last
completion; medians of ``--repeats`` rounds, each round going through every level. Where
the raw curve flattens, the server is saturated; where the plugin's flattens below it, the
harness is. Writes the table and ``benchmarks/scaling.png`` (needs matplotlib:
``uv pip install matplotlib``; without it only the table is printed).

Run: ``.venv/bin/python -m benchmarks.scaling [--isolate]`` (about 6 minutes).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks._common import (
    Run,
    chat_bodies,
    demo_rows,
    header,
    log,
    make_project,
    median,
    print_table,
    raw_client,
    run_plugin,
    vllm_server,
    write_workload,
)

LEVELS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
PLOT = Path(__file__).with_name("scaling.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=LEVELS)
    parser.add_argument("--repeats", type=int, default=3, help="rounds over all levels")
    parser.add_argument("--isolate", action="store_true", help="vLLM and clients on own CPUs")
    parser.add_argument("--plot", type=Path, default=PLOT)
    args = parser.parse_args()
    where = "separate CPUs" if args.isolate else "shared CPUs"
    header(f"scaling: requests/s vs concurrency, plugin and raw client, same vLLM ({where})")

    raw: dict[int, list[Run]] = {c: [] for c in args.levels}
    plugin: dict[int, list[Run]] = {c: [] for c in args.levels}
    sizes = {c: max(150, 6 * c) for c in args.levels}
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        root = Path(tmp)
        data = write_workload(root / "data.jsonl", max(sizes.values()))
        rows = demo_rows()
        project = make_project(root / "project", data)
        with vllm_server(root / "vllm-logs", isolate=args.isolate) as url:
            raw_client(url, chat_bodies(rows), 64)  # warm-up
            for round_ in range(1, args.repeats + 1):
                for level in args.levels:
                    n = sizes[level]
                    log(f"round {round_}/{args.repeats}, concurrency {level}: {n} requests")
                    bodies = chat_bodies([rows[i % len(rows)] for i in range(n)])
                    raw[level].append(raw_client(url, bodies, level))
                    overrides = [
                        *("--override", f"eval.max_concurrent={level}"),
                        *("--override", f"eval.num_examples={n}"),
                    ]
                    plugin[level].append(run_plugin(project, url, args=overrides))

    raw_rps = {c: median([r.rps for r in raw[c]]) for c in args.levels}
    plugin_rps = {c: median([r.rps for r in plugin[c]]) for c in args.levels}
    table = []
    for level in args.levels:
        table.append(
            [
                level,
                sizes[level],
                f"{raw_rps[level]:.0f}",
                f"{plugin_rps[level]:.0f}",
                f"{plugin_rps[level] / raw_rps[level]:.2f}",
                f"{median([r.cpu_ms for r in plugin[level]]):.2f}",
            ]
        )
    print(f"median of {args.repeats} rounds (rounds interleave all levels)\n")
    print_table(
        ["concurrency", "requests", "raw req/s", "plugin req/s", "plugin/raw", "plugin CPU ms/req"],
        table,
    )
    peak_raw, peak_plugin = max(raw_rps.values()), max(plugin_rps.values())
    print(
        f"server saturation (raw client peak): {peak_raw:.0f} req/s; plugin peak: "
        f"{peak_plugin:.0f} req/s ({peak_plugin / peak_raw:.2f}x)\n"
    )
    _plot(args.plot, args.levels, raw_rps, plugin_rps, where)
    return 0


def _plot(
    path: Path, levels: list[int], raw: dict[int, float], plugin: dict[int, float], where: str
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (uv pip install matplotlib)")
        return
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=120)
    axes.plot(levels, [raw[c] for c in levels], "o-", label="raw aiohttp client")
    axes.plot(levels, [plugin[c] for c in levels], "s-", label="pytest-modal-eval")
    axes.set_xscale("log", base=2)
    axes.set_xticks(levels, [str(c) for c in levels])
    axes.set_xlabel("requests in flight")
    axes.set_ylabel("requests/s")
    axes.set_title(f"vLLM (CPU build), models/tiny-arith, {where}")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    print(f"plot: {path}")


if __name__ == "__main__":
    raise SystemExit(main())

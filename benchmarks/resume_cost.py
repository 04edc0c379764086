"""Resume cost: what a kill costs in repeated requests, and what restarting costs in time.

1. Requests re-sent: a run of ``--examples`` examples (64 in flight, an endpoint answering in
   ``--delay`` s) is SIGKILLed once half of them are in the checkpoint, then re-run to the end.
   Re-sent = requests of both runs - examples; target <= the concurrency limit (64).
2. Restart-and-skip time: complete runs of two sizes are re-run, so that everything is read
   back from the checkpoint and reported (one subtest per example) and nothing is requested.
   The slope between the two sizes is the cost per finished example, free of fixed start-up
   costs; target <= 1 s per 10,000 finished examples. A finished run asks nothing of its
   endpoint, not even the readiness check (on Modal it would start a deployment): counted.

The endpoint is ``tests/support/openai_server.py``. Run: ``.venv/bin/python -m
benchmarks.resume_cost`` (about 3 minutes). The sizes are 20,000 apart and each is re-run 5
times, so that the few tenths of a second by which one wall time varies move the slope little.
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import time
from pathlib import Path

from benchmarks._common import (
    configure_server,
    fake_server,
    header,
    log,
    make_project,
    median,
    print_table,
    run_plugin,
    server_stats,
    start_plugin,
    verdict,
    write_arithmetic,
)

CONCURRENCY = 64


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=4000, help="examples of the kill test")
    parser.add_argument("--delay", type=float, default=0.05, help="endpoint answer time (s)")
    parser.add_argument("--sizes", type=int, nargs=2, default=[2000, 22000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    header("resume cost: requests re-sent after a kill, time to restart and skip finished work")

    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp, fake_server() as url:
        root = Path(tmp)
        resent, finished, results = _kill_and_resume(root / "kill", url, args.examples, args.delay)
        configure_server(url, delay=0.0)
        skip, restart_requests = _restart_times(root / "skip", url, args.sizes, args.repeats)

    print(
        f"kill test: {args.examples} examples, {CONCURRENCY} in flight, endpoint delay "
        f"{args.delay * 1000:.0f} ms; SIGKILL after {finished} examples were checkpointed\n"
    )
    small, big = args.sizes
    slope = (skip[big] - skip[small]) / (big - small) * 10_000
    print_table(
        ["", "value", "target", "verdict"],
        [
            [
                "requests re-sent after the kill",
                resent,
                f"<= {CONCURRENCY}",
                verdict(resent <= CONCURRENCY),
            ],
            [
                "results.jsonl lines after resuming",
                results,
                f"= {args.examples}",
                verdict(results == args.examples),
            ],
            [
                "endpoint requests while re-running finished runs (incl. the check)",
                restart_requests,
                "= 0",
                verdict(restart_requests == 0),
            ],
            [f"restart, all {small:,} finished (median s)", f"{skip[small]:.2f}", "", ""],
            [f"restart, all {big:,} finished (median s)", f"{skip[big]:.2f}", "", ""],
            [
                "restart cost per 10,000 finished examples (s)",
                f"{slope:.2f}",
                "<= 1.00",
                verdict(slope <= 1.0),
            ],
        ],
    )
    return 0


def _kill_and_resume(root: Path, url: str, n: int, delay: float) -> tuple[int, int, int]:
    data = write_arithmetic(root / "data.jsonl", n)
    project = make_project(root / "project", data, max_concurrent=CONCURRENCY)
    configure_server(url, delay=delay, reset_stats=True)
    log(f"kill test: running {n} examples, SIGKILL at 50%")
    with start_plugin(project, url, fresh=True) as process:
        checkpoint = _wait_for_checkpoint(project, n // 2)
        process.send_signal(signal.SIGKILL)
        process.wait()
    finished = _intact_lines(checkpoint)
    first = int(server_stats(url).get("chat_requests", 0))
    configure_server(url, delay=0.0, reset_stats=True)
    log("kill test: resuming")
    run_plugin(project, url, fresh=False)
    second = int(server_stats(url).get("chat_requests", 0))
    results = len((checkpoint.parent / "results.jsonl").read_text().splitlines())
    return first + second - n, finished, results


def _wait_for_checkpoint(project: Path, lines: int) -> Path:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for checkpoint in (project / "outputs").glob("evals/*/*/checkpoint.jsonl"):
            if checkpoint.read_bytes().count(b"\n") >= lines:
                return checkpoint
        time.sleep(0.01)
    raise RuntimeError("the run did not get to half way within 5 minutes")


def _intact_lines(checkpoint: Path) -> int:
    count = 0
    for line in checkpoint.read_bytes().splitlines():
        try:
            json.loads(line)
        except ValueError:
            continue
        count += 1
    return count


def _restart_times(
    root: Path, url: str, sizes: list[int], repeats: int
) -> tuple[dict[int, float], int]:
    """Median wall time of re-running each complete run, and the endpoint requests they made."""
    projects = {}
    for size in sizes:
        data = write_arithmetic(root / f"data-{size}.jsonl", size)
        projects[size] = make_project(root / f"project-{size}", data, max_concurrent=CONCURRENCY)
        log(f"restart test: a complete run of {size:,} examples")
        run_plugin(projects[size], url, fresh=True)
    walls: dict[int, list[float]] = {size: [] for size in sizes}
    requests = 0
    for round_ in range(1, repeats + 1):
        for size in sizes:
            log(f"restart test: round {round_}/{repeats}, re-running {size:,} finished examples")
            configure_server(url, reset_stats=True)
            walls[size].append(run_plugin(projects[size], url, fresh=False, rss_every=0.05).wall_s)
            stats = server_stats(url)
            requests += int(stats.get("chat_requests", 0)) + int(stats.get("models_requests", 0))
    return {size: median(values) for size, values in walls.items()}, requests


if __name__ == "__main__":
    raise SystemExit(main())

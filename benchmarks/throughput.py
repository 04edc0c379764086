"""Throughput: the plugin's full path against a raw client and against vf-eval, on real vLLM.

One vLLM (CPU build, ``models/tiny-arith``) serves every contender in turn, interleaved and
repeated, on the same chat requests: the demo's 200 questions repeated to ``--examples``, the
demo's system prompt and sampling (temperature 0, 16 tokens), 64 requests in flight.

- raw client: aiohttp posting the exact bodies verifiers sends, nothing else;
- control: the raw client again, while another process (``benchmarks._cpu_load``) uses
  ``--control-load`` of one CPU (default 45 %, about what the plugin's process uses here) and
  does nothing else. When vLLM shares the clients' CPUs, this shows what the server loses to
  *any* process using that much CPU, however it spends it;
- verifiers layer: the plugin's adapter (``run_examples``) alone, no pytest around it; with
  ``--before`` also on two clients the adapter does not use, for comparison: the openai
  SDK's request path (instead of ``DirectOpenAI``) and verifiers' own httpx client (instead of
  the aiohttp transport);
- plugin: ``pytest evals --model tiny-arith --base-url ...`` (collection, verifiers, scoring,
  checkpoint, one subtest per example, results files);
- plugin via proxy: the same with the plugin's ``ProxyThread`` in front of vLLM inside the
  pytest process, as with ``--backend modal`` (without ``-n``, the evaluation hands its
  requests to the proxy's code rather than its port);
- plugin, traced: the plugin with OpenTelemetry traces on (``OTEL_EXPORTER_OTLP_ENDPOINT``
  at a light OTLP/HTTP receiver, ``tests/support/otlp_receiver.py``, in this process): an
  example, a rollout and a request span per example, exported while the run goes;
- vf-eval: verifiers' CLI on the same environment, data, sampling and server.

Targets: plugin and plugin-via-proxy >= 0.95x the raw client's requests/s; the plugin traced
>= 0.95x the plugin untraced (same round); the plugin's wall time <= 1.0x vf-eval's.
``--traces`` runs the plugin untraced and traced only.

vLLM's pace on a shared machine drifts between runs (the raw client's rounds span +-20 %), so
a few percent of harness cost hides in the noise. ``--server batching`` puts a stand-in in
vLLM's place whose pace does not drift: ``tests/support/openai_server.py`` answering as a
continuously batching server does (a request joins the batch at the next step and is answered
``--batch-steps`` steps of ``--batch-step-ms`` later, together with every request that joined
with it; the defaults match tiny-arith's pace on vLLM here, ~200 ms at 64 in flight). Against
it the contenders differ only in how soon each sends its next request.

Run: ``.venv/bin/python -m benchmarks.throughput`` (needs vLLM: ``bash scripts/setup.sh`` or
``MODAL_EVAL_VLLM_PYTHON``). About 5 minutes (6 with ``--before``).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks._common import (
    Run,
    batching_server,
    chat_bodies,
    cpu_load,
    demo_rows,
    header,
    log,
    make_project,
    median,
    print_table,
    raw_client,
    run_plugin,
    run_verifiers_loop,
    run_vf_eval,
    verdict,
    vllm_server,
    write_workload,
)
from tests.support.otlp_receiver import OtlpReceiver

CONCURRENCY = 64


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="requests per run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of all contenders")
    parser.add_argument(
        "--before",
        action="store_true",
        help="also run the verifiers layer on the openai SDK's request path and on httpx",
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="vLLM on half of the CPUs, clients on the other half (default: shared)",
    )
    parser.add_argument(
        "--server",
        choices=["vllm", "batching"],
        default="vllm",
        help="real vLLM (default), or a batching stand-in whose pace does not drift",
    )
    parser.add_argument("--batch-step-ms", type=float, default=12.0, help="with --server batching")
    parser.add_argument("--batch-steps", type=int, default=17, help="with --server batching")
    parser.add_argument(
        "--traces",
        action="store_true",
        help="run only the plugin, untraced and traced (the cost of tracing)",
    )
    parser.add_argument(
        "--control-load",
        type=float,
        default=0.45,
        metavar="SHARE",
        help="CPU share of one core used beside the control's raw client (default: 0.45)",
    )
    args = parser.parse_args()
    server = "vLLM" if args.server == "vllm" else "stand-in"
    where = f"{server} and clients on {'separate' if args.isolate else 'shared'} CPUs"
    header(f"throughput: plugin vs raw client vs vf-eval, same {server}, 64 in flight ({where})")

    control = f"control: raw client + another process using {args.control_load:.0%} of a CPU"
    names = [
        "raw async client (aiohttp)",
        control,
        "verifiers layer, verifiers' httpx client (before)",
        "verifiers layer, openai SDK on aiohttp (before)",
        "verifiers layer, DirectOpenAI (adapter)",
        f"plugin -> {server}",
        f"plugin -> proxy -> {server}",
        f"plugin, traced (OTLP) -> {server}",
    ]
    runs: dict[str, list[Run]] = {name: [] for name in names}
    plugin, via_proxy, traced = names[-3], names[-2], names[-1]
    receiver = OtlpReceiver(keep=False)
    traces_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.start()}
    vf_wall: list[float] = []
    plugin_wall: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        root = Path(tmp)
        data = write_workload(root / "data.jsonl", args.examples)
        rows = [demo_rows()[i % 200] for i in range(args.examples)]
        bodies = chat_bodies(rows)
        project = make_project(root / "project", data, max_concurrent=CONCURRENCY)
        if args.server == "vllm":
            serving = vllm_server(root / "vllm-logs", isolate=args.isolate)
        else:
            serving = batching_server(
                data, isolate=args.isolate, step_s=args.batch_step_ms / 1000, steps=args.batch_steps
            )
        with serving as url:
            raw_client(url, bodies[:256], CONCURRENCY)  # warm-up: caches, allocator, code paths

            def controlled() -> Run:
                with cpu_load(args.control_load):
                    return raw_client(url, bodies, CONCURRENCY)

            contenders: dict[str, Callable[[], Run]] = {
                names[0]: lambda: raw_client(url, bodies, CONCURRENCY),
                names[1]: controlled,
                names[2]: lambda: run_verifiers_loop(url, data, CONCURRENCY, client="httpx"),
                names[3]: lambda: run_verifiers_loop(url, data, CONCURRENCY, client="sdk"),
                names[4]: lambda: run_verifiers_loop(url, data, CONCURRENCY, client="direct"),
                plugin: lambda: run_plugin(project, url),
                via_proxy: lambda: run_plugin(project, url, proxy_upstream=url),
                traced: lambda: run_plugin(project, url, env=traces_env),
            }
            if not args.before:
                for name in names[2:4]:
                    del contenders[name], runs[name]
            if args.traces:
                for name in set(contenders) - {plugin, traced, names[0]}:
                    del contenders[name], runs[name]
            for round_ in range(1, args.repeats + 1):
                for name, contender in contenders.items():
                    log(f"round {round_}/{args.repeats}: {name}")
                    run = contender()
                    if run.errors or run.returncode not in (0, 1):
                        log(f"warning: {run.errors} errors, exit code {run.returncode}")
                    runs[name].append(run)
                plugin_wall.append(runs[plugin][-1].wall_s)
                if args.traces:
                    continue
                log(f"round {round_}/{args.repeats}: vf-eval")
                vf_wall.append(run_vf_eval(url, data, args.examples, CONCURRENCY, root).wall_s)
    receiver.stop()

    base = median([r.rps for r in runs[names[0]]])
    if args.server == "batching":
        print(f"server: batching stand-in, {args.batch_steps} steps of {args.batch_step_ms:g} ms")
    print(f"{args.examples} chat requests per run, {CONCURRENCY} in flight, {args.repeats} rounds;")
    print("requests/s between the first and the last completion, median of the rounds; client CPU")
    print('is the client process\'s CPU time per request (all threads), median; "same round" is')
    print("the median of each round's ratio to the raw client's run of that round.\n")
    table = []
    raw_rounds = [r.rps for r in runs[names[0]]]
    for name in runs:
        rps = [r.rps for r in runs[name]]
        ratio = median(rps) / base
        paired = median([v / raw for v, raw in zip(rps, raw_rounds, strict=True)])
        target = name.startswith("plugin")
        table.append(
            [
                name,
                f"{median(rps):.0f}",
                " ".join(f"{v:.0f}" for v in rps),
                f"{median([r.cpu_ms for r in runs[name]]):.2f}",
                f"{median([r.cpu_ms * r.rps / 10 for r in runs[name]]):.0f}",
                f"{ratio:.2f}",
                f"{paired:.2f}",
                ">= 0.95" if target else "",
                verdict(ratio >= 0.95) if target else "",
            ]
        )
    print_table(
        ["path", "req/s", "rounds", "client CPU ms/req", "% of a CPU", "vs raw",
         "same round", "target", "verdict"],
        table,
    )  # fmt: skip
    if control in runs:
        print(f"(the control's other process used {args.control_load:.0%} of a CPU besides)\n")
    traced_ratio = median([t.rps / p.rps for t, p in zip(runs[traced], runs[plugin], strict=True)])
    spans = receiver.count
    print(
        f"tracing on vs off, same round: {traced_ratio:.2f}x the plugin's requests/s "
        f"(target >= 0.95: {verdict(traced_ratio >= 0.95)}); the receiver got {spans:,} spans "
        f"({spans / max(1, len(runs[traced])):,.0f} a run)\n"
    )
    if args.traces:
        return 0
    ratio = median(plugin_wall) / median(vf_wall)
    print("wall time of the whole command (start-up, loading, run, results), median:\n")
    print_table(
        ["command", "wall s", "rounds", "vs vf-eval", "target", "verdict"],
        [
            ["vf-eval file-qa -c 64", f"{median(vf_wall):.1f}",
             " ".join(f"{v:.1f}" for v in vf_wall), "1.00", "", ""],
            ["pytest evals (plugin)", f"{median(plugin_wall):.1f}",
             " ".join(f"{v:.1f}" for v in plugin_wall), f"{ratio:.2f}", "<= 1.00",
             verdict(ratio <= 1.0)],
        ],
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

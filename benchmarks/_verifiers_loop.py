"""The plugin's verifiers layer alone: ``verifiers_classic.run_examples`` with no pytest around it.

``python -m benchmarks._verifiers_loop --data F --base-url URL --concurrency N --out J
[--client direct|sdk|httpx]`` runs every row of a file-qa JSONL once and writes JSON with each
example's completion time and the CPU used between the first and the last. The other clients
are alternatives the adapter does not use, to compare against in the same run: ``sdk`` sends
through ``AsyncOpenAI`` on openai's aiohttp transport (no ``DirectOpenAI``), ``httpx`` is
verifiers' own ``ClientConfig`` client (httpx's pool).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from benchmarks._common import MAX_TOKENS, MODEL_NAME, SYSTEM_PROMPT
from pytest_modal_eval.client import verifiers_classic
from pytest_modal_eval.config.schema import EvalConfig
from pytest_modal_eval.serving.endpoint import Endpoint


def _verifiers_default_client(endpoint: Endpoint, **options: Any) -> Any:
    """The adapter's client before it built its own: verifiers' ClientConfig (httpx pool)."""
    import verifiers as vf
    from verifiers.clients import resolve_client

    connections = options["max_connections"]
    return resolve_client(
        vf.ClientConfig(
            api_base_url=endpoint.base_url,
            api_key_var=endpoint.api_key_env or "PYTEST_MODAL_EVAL_NO_KEY",
            timeout=options["request_timeout"],
            max_retries=options["max_retries"],
            extra_headers=dict(endpoint.headers),
            max_connections=connections,
            max_keepalive_connections=connections,
        )
    )


def _sdk_client(endpoint: Endpoint, **options: Any) -> Any:
    """The adapter's client before DirectOpenAI: verifiers' client on the bare AsyncOpenAI."""
    client = _direct_client(endpoint, **options)
    client._client = client.client._sdk
    return client


_direct_client = verifiers_classic.chat_client


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--client", choices=("direct", "sdk", "httpx"), default="direct")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.client == "httpx":
        verifiers_classic.chat_client = _verifiers_default_client
    elif args.client == "sdk":
        verifiers_classic.chat_client = _sdk_client
    env = verifiers_classic.load_environment(
        "file-qa", {"path": str(args.data), "system_prompt": SYSTEM_PROMPT}, args.data.parent
    )
    rows = verifiers_classic.dataset_rows(env, None)
    times: list[float] = []
    cpu = [0.0, 0.0]

    def on_example(example_id: int, outputs: list[dict[str, Any]]) -> None:
        times.append(time.perf_counter())
        cpu[1] = time.process_time()
        if len(times) == 1:
            cpu[0] = cpu[1]

    asyncio.run(
        verifiers_classic.run_examples(
            env,
            rows,
            endpoint=Endpoint(f"{args.base_url}/v1", MODEL_NAME),
            sampling_args={"temperature": 0.0, "top_p": 1.0, "max_tokens": MAX_TOKENS, "seed": 0},
            rollouts=1,
            max_concurrent_requests=args.concurrency,
            request_timeout=600,
            max_retries=3,
            on_example=on_example,
            prefetch=EvalConfig.model_validate({}).prefetch,  # as the plugin runs it by default
        )
    )
    args.out.write_text(json.dumps({"times": times, "cpu_window_s": cpu[1] - cpu[0]}))


if __name__ == "__main__":
    main()

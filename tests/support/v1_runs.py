"""Evaluating a loaded verifiers v1 environment directly (no pytest run around it)."""

from __future__ import annotations

import asyncio
from typing import Any

from pytest_modal_eval.serving.endpoint import Endpoint


def run_v1(
    env: Any,
    base_url: str,
    *,
    model: str = "test-model",
    sampling_args: dict[str, Any] | None = None,
    rollouts: int = 1,
    max_concurrent_requests: int = 1,
    request_timeout: float = 30,
    max_retries: int = 0,
) -> dict[int, list[dict[str, Any]]]:
    """Every example of ``env`` evaluated against ``base_url``: example id -> its rollouts'
    outputs, as ``run_examples`` hands them to its callback."""
    from pytest_modal_eval.client import verifiers_v1

    finished: dict[int, list[dict[str, Any]]] = {}
    asyncio.run(
        verifiers_v1.run_examples(
            env,
            verifiers_v1.dataset_rows(env, None),
            endpoint=Endpoint(base_url, model),
            sampling_args=sampling_args or {},
            rollouts=rollouts,
            max_concurrent_requests=max_concurrent_requests,
            request_timeout=request_timeout,
            max_retries=max_retries,
            on_example=lambda i, outputs: finished.__setitem__(i, outputs),
        )
    )
    return finished

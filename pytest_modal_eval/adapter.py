"""The one place that talks to ``verifiers`` (pinned to 0.3.1, classic API).

A later move to verifiers' v1 API should only touch this module. What the rest of the
plugin sees: :func:`load_environment`, :func:`eval_rows`, and :func:`run_examples`, which
runs groups of rollouts with a bound on *requests* in flight and hands each finished
example to a callback as soon as it completes (nothing is accumulated here).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Environments shipped with the plugin, resolved without a separate installation.
BUNDLED = {"file-qa": "pytest_modal_eval.envs.file_qa"}

#: How to install the environments the shipped benchmarks use (Prime environment hub).
INSTALL_HINT = (
    "install it into the environment pytest runs in, from the Prime environment hub: "
    "`prime env install primeintellect/{env_id}` or `uv pip install {env_id} "
    "--extra-index-url https://hub.primeintellect.ai/primeintellect/simple/` "
    "(any package that makes the module `{module}` importable works)"
)


class EnvironmentError_(Exception):
    """An environment that cannot be loaded; the message says what to do."""


@dataclass(frozen=True)
class Endpoint:
    """Where the evaluation sends requests."""

    base_url: str
    model: str
    api_key_env: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


def module_name(env_id: str) -> str:
    return env_id.replace("-", "_")


def missing_environment(env_id: str) -> str | None:
    """Why ``env_id`` cannot be loaded here (not installed), or None; imports nothing."""
    if env_id in BUNDLED:
        return None
    name = module_name(env_id)
    if importlib.util.find_spec(name) is None:
        return f"environment {env_id!r} is not installed: " + INSTALL_HINT.format(
            env_id=env_id, module=name
        )
    return None


def load_environment(env_id: str, env_args: dict[str, Any], base_dir: Path) -> Any:
    """Load a verifiers environment by id, with errors that say how to fix them."""
    import verifiers as vf

    _quiet_datasets()
    args = dict(env_args)
    if env_id in BUNDLED:
        # Our own environment resolves data paths against the benchmark's directory.
        args.setdefault("base_dir", str(base_dir))
        module = importlib.import_module(BUNDLED[env_id])
        return _call_loader(env_id, module.load_environment, args)
    problem = missing_environment(env_id)
    if problem:
        raise EnvironmentError_(problem)
    return _call_loader(env_id, lambda **kw: vf.load_environment(env_id, **kw), args)


def _call_loader(env_id: str, loader: Callable[..., Any], args: dict[str, Any]) -> Any:
    try:
        return loader(**args)
    except TypeError as exc:
        raise EnvironmentError_(f"environment {env_id!r} rejected env_args: {exc}") from None
    except ValueError as exc:  # FileQAError and environments' own argument checks
        raise EnvironmentError_(str(exc)) from None


def eval_rows(env: Any, num_examples: int | None) -> list[dict[str, Any]]:
    """The evaluation dataset as plain rows (``example_id``, ``prompt``, ``answer``, ...)."""
    dataset = env.get_eval_dataset()
    if dataset is None:
        raise EnvironmentError_("the environment has no evaluation dataset")
    if num_examples is not None:
        dataset = dataset.select(range(min(num_examples, len(dataset))))
    return list(dataset.to_list())


ExampleCallback = Callable[[int, list[dict[str, Any]]], None]


async def run_examples(
    env: Any,
    rows: Iterable[dict[str, Any]],
    *,
    endpoint: Endpoint,
    sampling_args: dict[str, Any],
    rollouts: int,
    max_concurrent_requests: int,
    request_timeout: float,
    max_retries: int,
    on_example: ExampleCallback,
    should_stop: Callable[[], str | None] = lambda: None,
    extra_headers: dict[str, str] | None = None,
) -> None:
    """Run ``rollouts`` rollouts of each row; call ``on_example`` as each example finishes.

    verifiers' own ``max_concurrent`` counts groups, not requests; here a group holds
    ``rollouts`` requests, so ceil(limit / rollouts) groups run at once. Rows are pulled
    lazily so memory stays flat however large the dataset. ``should_stop`` is polled after
    each example; a non-None return cancels the rest (e.g. the endpoint is down) and is
    raised as :class:`RunAborted`.
    """
    import verifiers as vf
    from verifiers.clients import resolve_client

    client_config = vf.ClientConfig(
        api_base_url=endpoint.base_url,
        api_key_var=endpoint.api_key_env or "PYTEST_MODAL_EVAL_NO_KEY",
        timeout=request_timeout,
        max_retries=max_retries,
        extra_headers={**dict(endpoint.headers), **(extra_headers or {})},
        max_connections=max(64, max_concurrent_requests * 2),
        max_keepalive_connections=max(64, max_concurrent_requests * 2),
    )
    client = resolve_client(client_config)
    slots = max(1, math.ceil(max_concurrent_requests / rollouts))
    row_iter = iter(rows)
    pending: set[asyncio.Task[tuple[int, list[dict[str, Any]]]]] = set()

    async def run_one(row: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
        outputs = await env.run_group(
            [dict(row) for _ in range(rollouts)], client, endpoint.model, sampling_args
        )
        return int(row["example_id"]), [dict(output) for output in outputs]

    def fill() -> None:
        while len(pending) < slots:
            row = next(row_iter, None)
            if row is None:
                return
            pending.add(asyncio.ensure_future(run_one(row)))

    try:
        fill()
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                pending.discard(task)
                example_id, outputs = task.result()
                on_example(example_id, outputs)
            reason = should_stop()
            if reason is not None:
                raise RunAborted(reason)
            fill()
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await _close(client)


class RunAborted(Exception):
    """The run was stopped early; finished examples are already recorded."""


async def _close(client: Any) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        result = close()
        if isinstance(result, Awaitable):
            await result


def _quiet_datasets() -> None:
    # datasets prints a progress bar for every map(); it would interleave with pytest's output.
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()

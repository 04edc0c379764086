"""verifiers' v1 API (0.4.x): the implementation :mod:`.verifiers_adapter` picks there.

An environment id names a v1 *taskset*: an installed package (``owner/name@version`` ->
module ``name`` with ``-`` -> ``_``) exporting a ``vf.Taskset`` subclass in ``__all__``; its
``env_args`` are the taskset config's fields. ``file-qa`` is the plugin's own
(:mod:`pytest_modal_eval.envs.file_qa_v1`).

Each rollout is one episode of the environment's own ``Env``
(:mod:`.verifiers_v1_env`: its seats, harness and runtime as ``vf-eval`` resolves them, the
benchmark's ``agent`` section over them), with the plugin attached where it must be:

- an interception server on 127.0.0.1 (:class:`PluginInterception`) whose model client is the
  plugin's :class:`~pytest_modal_eval.client.direct_client.DirectOpenAI`, so the in-flight cap,
  the answer journal, per-rollout seeds, retries, timeouts and proxy settings are the same as
  with the classic API (streamed turns included);
- the taskset's shared tool servers (MCP) started once per run here, a task's own started per
  rollout by verifiers;
- judge models (``task.judges``) called through the plugin's openai client, at the endpoint
  and model the benchmark names (:mod:`.verifiers_v1_judges`);
- a seat that pins its own endpoint sends its calls there through a plugin client of its own
  (:mod:`.verifiers_v1_seats`), checked before the benchmark's model server is started;
- nothing is uploaded (results go to the plugin's checkpoint, as with the classic API).

The bundled tasksets (``file-qa``, ``lookup-qa``) are played by ``vf.Agent`` directly with
the plugin's in-process harness ``pytest-modal-eval-chat`` (:mod:`.verifiers_v1_harness`) in
the ``subprocess`` runtime. What cannot run here is refused when the benchmark loads, saying
why and what to set (:func:`load_environment`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.clients import ModelContext

from pytest_modal_eval.client.answer_journal import AnswerJournal
from pytest_modal_eval.client.direct_client import DirectOpenAI, open_direct_client
from pytest_modal_eval.client.observe import current_rollout
from pytest_modal_eval.client.verifiers_v1_env import serving
from pytest_modal_eval.client.verifiers_v1_harness import HARNESS_ID, run_client
from pytest_modal_eval.client.verifiers_v1_interception import (
    PluginClient,
    PluginInterception,
    Rollout,
)
from pytest_modal_eval.client.verifiers_v1_judges import plugin_judge_clients
from pytest_modal_eval.client.verifiers_v1_load import (
    V1Environment,
    check_judge_endpoints,
    judges,
    load_environment,
    missing_environment,
    secret_variables,
)
from pytest_modal_eval.client.verifiers_v1_outputs import episode_outputs, rollout_output
from pytest_modal_eval.client.verifiers_v1_rows import dataset_rows
from pytest_modal_eval.client.verifiers_v1_seats import SeatClients
from pytest_modal_eval.client.verifiers_v1_tools import (
    shared_tools,
    tool_servers_import_like_this_process,
)
from pytest_modal_eval.client.workers import Intake, run_workers
from pytest_modal_eval.exceptions import RunAborted
from pytest_modal_eval.serving.endpoint import Endpoint

#: What :mod:`.verifiers_adapter` calls (see its ``VerifiersAPI``).
__all__ = [
    "check_judge_endpoints",
    "dataset_rows",
    "import_framework",
    "load_environment",
    "missing_environment",
    "run_examples",
    "secret_variables",
]

ExampleCallback = Callable[[int, list[dict[str, Any]]], None]


def import_framework() -> None:
    """Nothing more: ``verifiers.v1`` was imported with this module."""


async def run_examples(
    env: V1Environment,
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
    prefetch: int = 0,
    journal: AnswerJournal | None = None,
    rollout_indexes: Callable[[int], Sequence[int]] | None = None,
    max_turns: int | None = None,
    intake: Intake | None = None,
) -> None:
    """See :meth:`pytest_modal_eval.client.verifiers_adapter.VerifiersAPI.run_examples`."""
    api_key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    direct = open_direct_client(
        endpoint.base_url,
        api_key=api_key,
        headers={**dict(endpoint.headers), **(extra_headers or {})},
        request_timeout=request_timeout,
        max_retries=max_retries,
        max_connections=max(64, max_concurrent_requests * 2),
        max_in_flight=max_concurrent_requests,
        journal=journal,
        intake=intake,
    )
    client = PluginClient(direct)
    opened: list[DirectOpenAI] = []

    def seat_client(base_url: str, api_key: str | None, headers: dict[str, str]) -> PluginClient:
        """The client of an endpoint a seat pins: the run's settings, its own key."""
        seat_direct = open_direct_client(
            base_url,
            api_key=api_key,
            headers=headers,
            request_timeout=request_timeout,
            max_retries=max_retries,
            max_connections=max(64, max_concurrent_requests * 2),
            max_in_flight=max_concurrent_requests,
            journal=journal,
            intake=intake,
        )
        opened.append(seat_direct)
        return PluginClient(seat_direct, client.rollouts)

    agent_config = vf.AgentConfig(
        harness={"id": HARNESS_ID},
        runtime=vf.SubprocessConfig(),
        model=endpoint.model,
        # Never contacted: every request goes through ``client``. A key variable of our own
        # keeps verifiers from reading the Prime CLI's configuration for its default one.
        client=vf.EvalClientConfig(
            base_url=endpoint.base_url, api_key_var="PYTEST_MODAL_EVAL_NO_KEY"
        ),
        sampling=vf.SamplingConfig.model_validate(sampling_args),
        # Refuses the turn after max_turns; the rollout ends with stop_condition "max_turns".
        max_turns=max_turns,
    )
    slots = max(1, math.ceil(max_concurrent_requests / rollouts)) * (1 + prefetch)
    pending = iter(rows)

    try:
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(
                plugin_judge_clients(
                    judges(env.taskset), request_timeout=request_timeout, max_retries=max_retries
                )
            )
            stack.enter_context(tool_servers_import_like_this_process(env))
            await stack.enter_async_context(run_client())
            shared = await stack.enter_async_context(shared_tools(env))
            seats = SeatClients(agent_config.client, seat_client)
            interception = await stack.enter_async_context(
                PluginInterception(client, shared, seats)
            )
            if env.played is None:
                agent = vf.Agent(agent_config, interception=interception)
                stack.push_async_callback(agent.harness.aclose)
            else:
                await stack.enter_async_context(serving(env.played.env, interception, shared))
            context = ModelContext(
                model=endpoint.model,
                client=agent_config.client,
                sampling=agent_config.sampling,
            )

            async def run_one(example_id: int, task: Any, rollout: Rollout) -> list[dict[str, Any]]:
                minted_ids: list[str] = []

                def minted(trace: vf.Trace) -> None:
                    client.rollouts[trace.id] = rollout
                    minted_ids.append(trace.id)

                try:
                    # Its harness's tool calls are this rollout's (for an observer: traces).
                    current_rollout.set((example_id, rollout.index))
                    if env.played is None:
                        trace = await agent.run(task, tools=shared, on_trace=minted)
                        return [rollout_output(example_id, task, trace, rollout, max_turns)]
                    episode = await env.played.env.run_episode(task, context, on_trace=minted)
                    return episode_outputs(example_id, task, episode, env.seats, rollout, max_turns)
                finally:
                    for trace_id in minted_ids:
                        client.rollouts.pop(trace_id, None)

            async def worker() -> None:
                for row in pending:
                    example_id = int(row["example_id"])
                    if intake is not None and not intake.take(example_id):
                        return
                    task = env.tasks[example_id]
                    indexes = rollout_indexes(example_id) if rollout_indexes else range(rollouts)
                    group = [Rollout(example_id, i, []) for i in list(indexes)[:rollouts]]
                    episodes = await asyncio.gather(*(run_one(example_id, task, r) for r in group))
                    on_example(example_id, [output for seats in episodes for output in seats])
                    if intake is not None:
                        intake.finished(example_id)
                    reason = should_stop()
                    if reason is not None:
                        raise RunAborted(reason)

            await run_workers(worker, slots)
    finally:
        for seat_direct in opened:
            await seat_direct.close()
        await direct.close()

"""verifiers v1 in tests: an environment evaluated directly (no pytest run around it),
verifiers' own ``vf-eval``, and the head of the test tasksets."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.serving.endpoint import Endpoint

if TYPE_CHECKING:
    from tests.conftest import FakeServer

#: The head of a test taskset module: tasks asking for a sum, rewarded for a boxed answer
#: (``sums(config, n, offset)`` yields ``n`` of them; ``config.follow_up`` adds a second
#: question a scripted user asks).
SUM_TASKS = """
import re
import verifiers.v1 as vf
from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig


def boxed(text):
    found = re.findall(r"\\\\boxed\\{([^}]*)\\}", text or "")
    return found[-1] if found else None


class SumData(vf.TaskData):
    answer: str = ""
    follow_up: str = ""
    follow_up_answer: str = ""


class SumTask(vf.Task[SumData]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        expected = self.data.follow_up_answer or self.data.answer
        return 1.0 if boxed(trace.last_reply) == expected else 0.0


def sums(config, n, offset):
    for i in range(n):
        a, b = offset + 7 * i, i + 2
        yield SumTask(
            SumData(
                prompt=f"What is {a} + {b}?",
                answer=str(a + b),
                follow_up=f"What is {a + b} + 5?",
                follow_up_answer=str(a + b + 5) if config.follow_up else "",
            ),
            config.task,
        )
"""


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


def vf_eval(
    modules: Path, args: list[str], out: Path, environ: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The episodes verifiers' own ``vf-eval`` records for ``args`` (taskset id, options),
    run with ``modules`` importable, nothing uploaded and its output in ``out``."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from verifiers.v1.cli.eval.main import main; main()",
            *args,
            "--no-push",
            "--no-rich",
            "-o",
            str(out),
        ],
        env={**os.environ, **(environ or {}), "PYTHONPATH": str(modules)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (traces,) = out.glob("*/traces.jsonl")
    return [json.loads(line) for line in traces.read_text().splitlines()]


def chat_counts(server: FakeServer) -> dict[str, int]:
    """The chat requests ``server`` got, per model (``chat_requests:<model>``)."""
    stats = server.stats()
    return {k: v for k, v in stats.items() if k.startswith("chat_requests:") and v}


def vf_eval_args(
    taskset: str, base_url: str, seats: list[str], harness: str | None = "null"
) -> list[str]:
    """``vf-eval``'s options for ``taskset`` played by ``test-model`` at ``base_url``, each of
    ``seats`` in the ``subprocess`` runtime with ``harness`` (``None``: the one the environment
    declares)."""
    args = [
        taskset,
        "-m",
        "test-model",
        "--client.base-url",
        base_url,
        "--client.api-key-var",
        "PYTEST_MODAL_EVAL_NO_KEY",
        "-c",
        "4",
    ]
    for seat in seats:
        args += [f"--env.{seat}.runtime.type", "subprocess"]
        if harness is not None:
            args += [f"--env.{seat}.harness.id", harness]
    return args

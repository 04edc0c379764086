"""Fixtures for users' own Python evaluation tests, against the session's deployment.

With several ``--model``, a test that uses ``eval_endpoint`` runs once per model: the worker
session's ``pytest_generate_tests`` parametrizes it (``session/worker.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_modal_eval.serving.endpoint import Endpoint


@pytest.fixture(scope="session")
def eval_endpoint(
    pytestconfig: pytest.Config, request: pytest.FixtureRequest
) -> Callable[..., Endpoint]:
    """Return ``get(benchmark=None) -> Endpoint`` for the session's ``--model``; with several
    ``--model``, the test runs once per model and ``get`` returns that model's endpoint.

    The endpoint is the one the benchmark items use: the same deployment for the same server
    profile (backend, model, infra, vllm, chat template), started on first use. ``benchmark``
    is a benchmark YAML whose profile to use; by default the packaged defaults. Example::

        def test_greeting(eval_endpoint):
            endpoint = eval_endpoint("evals/gsm8k.yaml")
            client = openai.OpenAI(base_url=endpoint.base_url, api_key="unused",
                                   default_headers=dict(endpoint.headers))
            reply = client.chat.completions.create(model=endpoint.model, messages=[...])
    """
    from pytest_modal_eval.collect.context import CONTEXT_KEY, endpoint_source
    from pytest_modal_eval.collect.server_plan import PLAN_KEY
    from pytest_modal_eval.config.loader import Benchmark, load_benchmark
    from pytest_modal_eval.config.schema import BenchmarkConfig
    from pytest_modal_eval.runs.identity import pin_revision
    from pytest_modal_eval.serving.endpoint import ServerRequest
    from pytest_modal_eval.session.worker import WORKER_PLUGIN, WorkerSession

    session = pytestconfig.stash[CONTEXT_KEY]
    worker = pytestconfig.pluginmanager.get_plugin(WORKER_PLUGIN)
    assert isinstance(worker, WorkerSession)  # registered in every process by pytest_configure
    # This test's model when parametrized per model (several --model), else the only one.
    model: str | None = getattr(request, "param", None) or session.settings.model

    def get(benchmark: str | Path | None = None) -> Endpoint:
        settings = session.settings
        if not model:
            pytest.fail("eval_endpoint needs --model ORG/NAME", pytrace=False)
        if benchmark is None:
            defaults = BenchmarkConfig.model_validate({"env_id": "custom"})
            bench = Benchmark(Path("defaults.yaml"), defaults)
        else:
            bench = load_benchmark(Path(benchmark), list(settings.overrides))
        wanted = ServerRequest.for_benchmark(settings, bench, model)
        # At the commit the benchmark items pin a Hub model to, so that both get one server.
        wanted = pin_revision(wanted, worker.identities.of(wanted))
        # The running test holds the server until its teardown; on --backend local a test
        # cannot hold two profiles' servers at once.
        info = endpoint_source(pytestconfig).endpoint_for(
            wanted, pytestconfig.stash[PLAN_KEY].current
        )
        return info.endpoint

    return get

"""pytest-modal-eval: LLM evaluations as pytest tests.

The public API, for ``conftest.py`` hooks and scripts. Names are imported on first use, so
``import pytest_modal_eval`` (which every pytest start does through the plugin) stays cheap.

- Reading results: :func:`iter_runs` (every run under an output directory) and
  :class:`RunPaths` (one run's files and its status).
- What hooks hand out: :class:`RunOutcome` and :class:`Verdict`
  (``pytest_modal_eval_benchmark_finished``), :class:`Endpoint` (the ``eval_endpoint`` fixture).
- Benchmarks: :func:`load_benchmark`, :class:`Benchmark`, :class:`BenchmarkConfig`.
- Errors: :class:`ModalEvalError` and its subclasses in :mod:`pytest_modal_eval.exceptions`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_modal_eval.config.loader import Benchmark, load_benchmark
    from pytest_modal_eval.config.schema import BenchmarkConfig
    from pytest_modal_eval.exceptions import ModalEvalError
    from pytest_modal_eval.gate.verdict import Verdict
    from pytest_modal_eval.runs.locate import iter_runs
    from pytest_modal_eval.runs.outcome import RunOutcome
    from pytest_modal_eval.runs.paths import RunPaths, RunStatus
    from pytest_modal_eval.serving.endpoint import Endpoint

_WHERE = {
    "Benchmark": "pytest_modal_eval.config.loader",
    "load_benchmark": "pytest_modal_eval.config.loader",
    "BenchmarkConfig": "pytest_modal_eval.config.schema",
    "ModalEvalError": "pytest_modal_eval.exceptions",
    "Verdict": "pytest_modal_eval.gate.verdict",
    "RunOutcome": "pytest_modal_eval.runs.outcome",
    "RunPaths": "pytest_modal_eval.runs.paths",
    "RunStatus": "pytest_modal_eval.runs.paths",
    "iter_runs": "pytest_modal_eval.runs.locate",
    "Endpoint": "pytest_modal_eval.serving.endpoint",
}

__all__ = [
    "Benchmark",
    "BenchmarkConfig",
    "Endpoint",
    "ModalEvalError",
    "RunOutcome",
    "RunPaths",
    "RunStatus",
    "Verdict",
    "iter_runs",
    "load_benchmark",
]
assert sorted(__all__) == sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'pytest_modal_eval' has no attribute {name!r}")

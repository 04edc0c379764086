"""Collection: a benchmark YAML becomes a module-like collector holding one test function.

The item is a real ``pytest.Function`` (the shape ``_pytest/doctest.py`` uses) so that it
can request fixtures: ``subtests`` for one subtest per example, and syrupy's ``snapshot``
for stored baselines.
"""

from __future__ import annotations

import fnmatch
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_modal_eval.collect.session import SESSION_KEY
from pytest_modal_eval.exceptions import EvalProblem
from pytest_modal_eval.report.junit import BENCHMARK_PROPERTY

if TYPE_CHECKING:
    from _pytest._code.code import ExceptionInfo, TerminalRepr

    from pytest_modal_eval.config.loader import Benchmark


class ItemRunner(Protocol):
    """Does a benchmark item's work (:class:`pytest_modal_eval.collect.item_run.BenchmarkRunner`).

    Items reach it through :data:`RUNNER_KEY`, so collection does not import the evaluation.
    """

    def prepare(self, item: BenchmarkItem) -> None:
        """The item's setup: checks, the run it continues, then its endpoint."""

    def evaluate(self, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
        """The call: every example as a subtest, then the gate."""

    def release(self, item: BenchmarkItem) -> None:
        """The teardown: drops what setup prepared, if the call did not take it."""


RUNNER_KEY = pytest.StashKey[ItemRunner]()


def is_benchmark_file(path: Path, config: pytest.Config, explicit: bool) -> bool:
    """Only YAML files matching ``modal_eval_files`` (or named on the command line) are ours."""
    if path.suffix not in (".yaml", ".yml"):
        return False
    if explicit:
        return True
    try:
        relative = path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return False
    patterns = config.getini("modal_eval_files")
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns)


class BenchmarkFile(pytest.Module):
    """A benchmark YAML as a module-like collector (no Python is imported)."""

    def _getobj(self) -> types.ModuleType:
        return types.ModuleType(self.path.stem)

    def collect(self) -> list[pytest.Item]:
        from pytest_modal_eval.config.loader import load_benchmark

        session = self.config.stash[SESSION_KEY]
        benchmark = load_benchmark(self.path, list(session.settings.overrides))
        for tag in ("eval", *benchmark.config.tags):
            _register_marker(self.config, tag)
        item = BenchmarkItem.from_parent(
            self, name=benchmark.name, callobj=_evaluate, benchmark=benchmark
        )
        item.add_marker("eval")
        for tag in benchmark.config.tags:
            item.add_marker(tag)
        return [item]

    def repr_failure(self, excinfo: ExceptionInfo[BaseException]) -> str | TerminalRepr:  # type: ignore[override]
        from pytest_modal_eval.exceptions import BenchmarkError

        if isinstance(excinfo.value, BenchmarkError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


def _register_marker(config: pytest.Config, name: str) -> None:
    # Tags are only known at collection; registering them keeps --strict-markers happy
    # and lists them in `pytest --markers`.
    known = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    if name not in known:
        description = "benchmark items" if name == "eval" else "benchmarks tagged in their YAML"
        config.addinivalue_line("markers", f"{name}: {description} (pytest-modal-eval)")


def _evaluate(request: pytest.FixtureRequest, subtests: Any, snapshot: Any) -> None:
    item = request.node
    assert isinstance(item, BenchmarkItem)
    item.runner.evaluate(item, subtests, snapshot)


class BenchmarkItem(pytest.Function):
    """One benchmark: its examples are subtests, its verdict is the gate."""

    def __init__(self, *, benchmark: Benchmark, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.benchmark = benchmark

    @property
    def runner(self) -> ItemRunner:
        return self.config.stash[RUNNER_KEY]

    def setup(self) -> None:
        # First, so that even a setup error is reported as this benchmark's row.
        if (BENCHMARK_PROPERTY, self.benchmark.name) not in self.user_properties:
            self.user_properties.append((BENCHMARK_PROPERTY, self.benchmark.name))
        super().setup()
        # Errors here are *errors* (not skips): a gate must never go green by not running.
        self.runner.prepare(self)

    def teardown(self) -> None:
        # What setup prepared for a call that never came (--setup-only, a failure in another
        # fixture) is not kept for the rest of the session.
        self.runner.release(self)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, f"benchmark {self.benchmark.name} ({self.benchmark.config.env_id})"

    def repr_failure(self, excinfo: ExceptionInfo[BaseException]) -> str | TerminalRepr:  # type: ignore[override]
        if isinstance(excinfo.value, EvalProblem):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def _repr_failure_py(  # type: ignore[override]
        self, excinfo: ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        # pytest formats setup errors through this method, not repr_failure.
        if isinstance(excinfo.value, EvalProblem):
            return str(excinfo.value)
        return super()._repr_failure_py(excinfo, style)

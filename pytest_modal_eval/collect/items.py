"""Collection: a benchmark YAML becomes a module-like collector holding one test function.

The item is a real ``pytest.Function`` (the shape ``_pytest/doctest.py`` uses) so that it
can request fixtures: ``subtests`` for one subtest per example, and syrupy's ``snapshot``
for stored baselines.
"""

from __future__ import annotations

import fnmatch
import types
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_modal_eval.collect.context import CONTEXT_KEY
from pytest_modal_eval.exceptions import EvalProblem, SecretWarning
from pytest_modal_eval.model_names import model_label
from pytest_modal_eval.report.junit import BENCHMARK_PROPERTY, MODEL_PROPERTY
from pytest_modal_eval.serving.endpoint import ServerRequest
from pytest_modal_eval.terminal_text import escape

if TYPE_CHECKING:
    from _pytest._code.code import ExceptionInfo, TerminalRepr

    from pytest_modal_eval.collect.precheck import Loaded
    from pytest_modal_eval.config.loader import Benchmark
    from pytest_modal_eval.config.options import Settings


class ItemRunner(Protocol):
    """Does a benchmark item's work (``plugin.DeferredRunner``, calling :mod:`.item_run`).

    Items reach it through :data:`RUNNER_KEY`, so collection does not import the evaluation.
    """

    def prepare(self, item: BenchmarkItem) -> None:
        """The item's setup: checks, the run it continues, then its endpoint."""

    def evaluate(self, item: BenchmarkItem, subtests: Any, snapshot: Any) -> None:
        """The call: every example as a subtest, then the gate."""

    def release(self, item: BenchmarkItem) -> None:
        """The teardown: drops what setup prepared, if the call did not take it."""


RUNNER_KEY = pytest.StashKey[ItemRunner]()
#: On a benchmark item collected with ``--collect-only``: what loading its environment found.
LOADED_KEY = pytest.StashKey["Loaded"]()
#: The environments loaded by this collection (``collect/precheck.py``'s cache).
LOAD_CACHE_KEY = pytest.StashKey[dict[str, Any]]()


def is_benchmark_file(path: Path, config: pytest.Config, explicit: bool) -> bool:
    """Only YAML files matching ``modal_eval_files`` (or named on the command line) are ours."""
    if path.suffix not in (".yaml", ".yml"):
        return False
    if explicit:
        return True
    return matches_benchmark_patterns(path, config.rootpath, config.getini("modal_eval_files"))


def matches_benchmark_patterns(path: Path, rootdir: Path, patterns: Sequence[str]) -> bool:
    """A YAML file whose path relative to the rootdir matches one of ``modal_eval_files``."""
    if path.suffix not in (".yaml", ".yml"):
        return False
    try:
        relative = path.relative_to(rootdir).as_posix()
    except ValueError:
        return False
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns)


class BenchmarkFile(pytest.Module):
    """A benchmark YAML as a module-like collector (no Python is imported)."""

    def _getobj(self) -> types.ModuleType:
        return types.ModuleType(self.path.stem)

    def collect(self) -> list[pytest.Item]:
        from pytest_modal_eval.config.loader import load_benchmark

        session = self.config.stash[CONTEXT_KEY]
        benchmark = load_benchmark(self.path, list(session.settings.overrides))
        session.redactor.learn_env_args(benchmark.config.env_args)
        # Once per secret: those of the environment (learned at configure) with the first
        # benchmark, then each benchmark's own; pytest shows them in its warnings summary.
        for notice in session.redactor.take_notices():
            warnings.warn_explicit(SecretWarning(notice), SecretWarning, str(self.path), 0)
        loaded = self._check(benchmark, session.settings)
        for tag in ("eval", *benchmark.config.tags):
            _register_marker(self.config, tag)
        models = session.settings.models
        items: list[pytest.Item] = []
        names = item_names(benchmark.name, models)
        for model, name in zip(models or (None,), names, strict=True):
            item = BenchmarkItem.from_parent(
                self,
                name=name,
                callobj=_evaluate,
                benchmark=benchmark,
                model=model,
                server_request=ServerRequest.for_benchmark(session.settings, benchmark, model),
                reference=models[0] if model is not None and model != models[0] else None,
            )
            item.add_marker("eval")
            for tag in benchmark.config.tags:
                item.add_marker(tag)
            if item.reference is not None:
                item.reference_nodeid = items[0].nodeid
            if loaded is not None:
                item.stash[LOADED_KEY] = loaded
            items.append(item)
        return items

    def _check(self, benchmark: Benchmark, settings: Settings) -> Loaded | None:
        """What can be checked without a request (collect/precheck.py), before any server
        starts: a problem is this file's collection error. Under ``--collect-only`` the
        environment is loaded too (a full check, as asked for); what it found is returned."""
        from pytest_modal_eval.collect.precheck import (
            load_problems,
            problems_message,
            quick_problems,
        )
        from pytest_modal_eval.config.backends import backend
        from pytest_modal_eval.exceptions import BenchmarkError

        local = settings.models if backend(settings.backend).starts_server else ()
        problems = quick_problems(benchmark, local)
        loaded = None
        if not problems and self.config.option.collectonly and not settings.collect_quick:
            cache = self.config.stash.setdefault(LOAD_CACHE_KEY, {})
            problems, loaded = load_problems(benchmark, cache)
        if problems:
            raise BenchmarkError(problems_message(self.path, problems))
        return loaded

    def repr_failure(self, excinfo: ExceptionInfo[BaseException]) -> str | TerminalRepr:  # type: ignore[override]
        from pytest_modal_eval.exceptions import BenchmarkError

        if isinstance(excinfo.value, BenchmarkError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


def item_names(benchmark: str, models: tuple[str, ...]) -> list[str]:
    """Item names of a benchmark: its name alone for one model (or none), else
    ``<benchmark>--<model>`` per model, in ``--model`` order.

    Model ids become ``-k``-friendly words: ``/`` turns into ``--`` and anything but letters,
    digits, ``.``, ``_`` and ``-`` into ``-`` (no ``[`` or ``::``, which pytest's ``--lf``
    cannot match); a local directory is named by its last part.
    """
    if len(models) <= 1:
        return [benchmark]
    labels = [model_label(model) for model in models]
    for label in set(labels):
        same = [m for m, other in zip(models, labels, strict=True) if other == label]
        if len(same) > 1:
            raise pytest.UsageError(
                f"--model {same[0]} and --model {same[1]} would both be named {label!r} in "
                "test ids; give one of them another name (a symlink to a directory works)"
            )
    return [f"{benchmark}--{label}" for label in labels]


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

    def __init__(
        self,
        *,
        benchmark: Benchmark,
        server_request: ServerRequest,
        model: str | None = None,
        reference: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.benchmark = benchmark
        self.model = model  # None: no --model given (the item errors in setup)
        # The server its model is served by (or the --base-url endpoint that serves it), built
        # once at collection: what the server plan groups by and what setup asks an endpoint of.
        self.server_request = server_request
        # The first --model, when this item evaluates another one: compared against it.
        self.reference = reference
        self.reference_nodeid: str | None = None

    @property
    def baseline_name(self) -> str:
        """Its stored baseline's name (gate.baseline.BASELINE_NAME_ATTR): the benchmark's, for
        every model, so a baseline is found however many --model the session has."""
        return self.benchmark.name

    @property
    def runner(self) -> ItemRunner:
        return self.config.stash[RUNNER_KEY]

    def setup(self) -> None:
        # First, so that even a setup error is reported as this benchmark's row.
        if (BENCHMARK_PROPERTY, self.benchmark.name) not in self.user_properties:
            self.user_properties.append((BENCHMARK_PROPERTY, self.benchmark.name))
            self.user_properties.append((MODEL_PROPERTY, self.model or "-"))
        super().setup()
        # Errors here are *errors* (not skips): a gate must never go green by not running.
        self.runner.prepare(self)

    def teardown(self) -> None:
        # What setup prepared for a call that never came (--setup-only, a failure in another
        # fixture) is not kept for the rest of the session.
        self.runner.release(self)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        model = f", model {self.model}" if self.name != self.benchmark.name else ""
        return (
            self.path,
            0,
            f"benchmark {self.benchmark.name} ({self.benchmark.config.env_id}){model}",
        )

    def repr_failure(self, excinfo: ExceptionInfo[BaseException]) -> str | TerminalRepr:  # type: ignore[override]
        if isinstance(excinfo.value, EvalProblem):
            return escape(str(excinfo.value), newlines=True)
        return super().repr_failure(excinfo)

    def _repr_failure_py(  # type: ignore[override]
        self, excinfo: ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        # pytest formats setup errors through this method, not repr_failure.
        if isinstance(excinfo.value, EvalProblem):
            return escape(str(excinfo.value), newlines=True)
        return super()._repr_failure_py(excinfo, style)

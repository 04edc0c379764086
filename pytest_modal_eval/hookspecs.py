"""Hooks other plugins and conftest.py files can implement."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_modal_eval_finished(item: pytest.Item, outcome: Any, verdict: Any) -> None:
    """Called on the process that ran a benchmark, after its gate was judged.

    ``outcome`` is a :class:`pytest_modal_eval.RunOutcome` (run directory, summary
    statistics, errored examples), ``verdict`` a :class:`pytest_modal_eval.Verdict`.
    Use it to publish results, e.g. in ``conftest.py``::

        def pytest_modal_eval_finished(item, outcome, verdict):
            if outcome.summary is not None:
                print(f"{item.name}: {outcome.summary.mean:.3f} -> {outcome.run_dir}")
    """

"""This repository's own hooks for `pytest evals/`: each benchmark's result on the CI job page.

In GitHub Actions, every benchmark appends one line — verdict, score with its interval, run
directory — to the job summary (the file named by ``$GITHUB_STEP_SUMMARY``), so a pull
request's checks page shows the scores without opening the artifacts. Elsewhere that variable
is unset and the hook does nothing. It is also the working example of the plugin's hook
(``pytest_modal_eval/hookspecs.py``); copy it into your project's ``conftest.py`` to do the same.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_modal_eval import RunOutcome, Verdict


# optionalhook: this file is also loaded by runs that disable the plugin (-p no:modal_eval).
@pytest.hookimpl(optionalhook=True)
def pytest_modal_eval_finished(item: pytest.Item, outcome: RunOutcome, verdict: Verdict) -> None:
    """Runs after each benchmark's gate, on the process that ran it (a worker under ``-n``)."""
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary_file:
        return
    from pytest_modal_eval.stats.format import describe_score

    # verdict.label: PASS, or FAIL with what failed it (FAIL: baseline)
    line = (
        f"- **{item.name}** {verdict.label}; {describe_score(outcome)}; run `{outcome.run_dir}`\n"
    )
    # One write in append mode per line: lines from several xdist workers do not interleave.
    with open(summary_file, "a", encoding="utf-8") as out:
        out.write(line)

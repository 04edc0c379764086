"""The HTML report in a real browser: made by a real run, read as a user reads it.

The run is the bundled file-qa environment against ``tests/support/openai_server.py`` (a real
HTTP server on 127.0.0.1); the browser is a headless Chromium (see ``tests/browser.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.browser import browser, page  # noqa: F401  (fixtures)
from tests.conftest import BenchmarkProject, read_jsonl


def _real_run(
    project: BenchmarkProject, *extra: str
) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    """40 examples, about 60% answered right: a gate of 0.9 fails, some examples are missed."""
    project.add("arith", n=40, gate="gate: {min_avg_reward: 0.9}")
    project.server.configure(accuracy=0.6, salt="report")
    # In a subprocess: Playwright keeps an event loop running in this thread.
    result = project.run_subprocess(*extra)
    assert result.ret == 1, result.stdout.str()
    (run_dir,) = project.run_dirs("arith")
    metadata = json.loads((run_dir / "metadata.json").read_text())
    return run_dir, metadata, read_jsonl(run_dir / "results.jsonl")


def _number(cell: Any, attribute: str = "data-value") -> float:
    return float(cell.get_attribute(attribute))


def test_report_of_a_real_run(project: BenchmarkProject, page: Any) -> None:  # noqa: F811
    _, metadata, records = _real_run(project)
    report = project.pytester.path / "outputs" / "evals" / "report.html"
    assert report.exists()
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-ready='1']")

    row = page.locator("#overview tr[data-bench]")
    assert row.count() == 1
    mean = row.locator("td[data-field=mean]")
    # The figures are metadata.json's, to the last digit, and as printed.
    assert _number(mean) == metadata["avg_reward"]
    assert _number(mean, "data-stderr") == metadata["stderr"]
    assert mean.inner_text() == f"{metadata['avg_reward']:.3f} ± {metadata['stderr']:.3f}"
    ci = row.locator("td[data-field=ci]")
    assert [_number(ci, "data-low"), _number(ci, "data-high")] == metadata["ci"]
    assert row.locator("svg.interval rect.ci").count() == 1  # the interval is drawn
    assert int(row.locator("td[data-field=errors]").inner_text()) == metadata["errors"]
    assert row.locator("td[data-field=n]").inner_text() == "40 \u00d7 1"
    assert row.locator("td[data-field=gate]").inner_text() == "≥ 0.9"
    assert row.locator("td[data-field=verdict]").inner_text() == "FAIL"
    assert row.locator("td[data-field=model]").inner_text() == metadata["model"]

    examples = page.locator("details.examples")
    assert examples.locator(".count").inner_text() == "40 examples"
    missed = [r for r in records if r["reward"] < 0.5]
    assert 0 < len(missed) < len(records)
    examples.locator("[data-filter=missed]").click()
    assert examples.locator(".count").inner_text() == f"{len(missed)} of 40 examples"
    shown = examples.locator("tbody tr.row")
    assert shown.count() == len(missed)
    assert sorted(shown.evaluate_all("rows => rows.map(r => r.dataset.id)")) == sorted(
        str(r["example_id"]) for r in missed
    )

    # Open one missed example: its whole prompt, completion and answer unfold.
    first = missed[0]
    examples.locator(f"tr.row[data-id='{first['example_id']}'] button.open").click()
    detail = examples.locator("tr.detail")
    assert detail.count() == 1
    text = detail.inner_text()
    assert first["prompt"][-1]["content"] in text
    assert first["completion"][-1]["content"] in text
    assert f"answer\n{first['answer']}" in text.replace("ANSWER", "answer")

    # Search narrows the current filter; clearing it brings the rows back.
    examples.locator("[data-filter=all]").click()
    question = records[7]["prompt"][-1]["content"]
    examples.locator("input[type=search]").fill(question)
    page.wait_for_function(
        "() => document.querySelector('details.examples .count').textContent === '1 of 40 examples'"
    )
    assert examples.locator("tbody tr.row").get_attribute("data-id") == "7"


def test_report_command_builds_the_same_page(
    project: BenchmarkProject,
    page: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    run_dir, metadata, records = _real_run(project, "--eval-report=none")
    assert not (project.pytester.path / "outputs" / "evals" / "report.html").exists()
    out = tmp_path / "stored.html"
    result = CliRunner().invoke(main, ["report", str(run_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    mean = page.locator("#overview td[data-field=mean]")
    assert _number(mean) == metadata["avg_reward"]
    assert page.locator("details.examples .count").inner_text() == f"{len(records)} examples"
    # A stored run knows its gate from run_config.json; the verdict is the session's only.
    assert page.locator("#overview td[data-field=gate]").inner_text() == "≥ 0.9"


def test_report_command_explains_a_directory_without_runs(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    result = CliRunner().invoke(main, ["report", str(tmp_path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code != 0
    assert str(tmp_path) in result.output
    assert "metadata.json" in result.output

"""The HTML report in a real browser: made by a real run, read as a user reads it.

The run is the bundled file-qa environment against ``tests/support/openai_server.py`` (a real
HTTP server on 127.0.0.1); the browser is a headless Chromium (see ``tests/browser.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

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
    assert row.locator("td[data-field=verdict]").inner_text() == "FAIL: threshold"
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
    # A stored run knows its gate and verdict (with what failed it) from its files.
    assert page.locator("#overview td[data-field=gate]").inner_text() == "≥ 0.9"
    assert page.locator("#overview td[data-field=verdict]").inner_text() == "FAIL: threshold"


def test_report_command_explains_a_directory_without_runs(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    result = CliRunner().invoke(main, ["report", str(tmp_path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code != 0
    assert str(tmp_path) in result.output
    assert "metadata.json" in result.output


MODELS = ("test-model", "model-b", "model-c")


def _three_models(project: BenchmarkProject, *extra: str) -> dict[str, Path]:
    """One benchmark, three models (the first the reference) that get different examples
    right -> each model's run directory."""
    project.add("arith", n=40, gate="gate: {min_avg_reward: 0.1}")
    project.server.configure(
        accuracy=0.8,
        salt="ref",
        models={"model-b": {"accuracy": 0.5, "salt": "b"}, "model-c": {"accuracy": 0.9}},
    )
    models = [arg for model in MODELS[1:] for arg in ("--model", model)]
    result = project.run_subprocess(*models, "--junitxml=report.xml", *extra)
    assert result.ret == 0, result.stdout.str()
    runs = {}
    for model in MODELS:
        benchmark_dir = project.pytester.path / "outputs" / "evals" / f"arith--{model}"
        (run_dir,) = [path for path in benchmark_dir.iterdir() if path.is_dir()]
        runs[model] = run_dir
    return runs


def _means(run_dir: Path) -> dict[str, float]:
    return {str(r["example_id"]): float(r["reward"]) for r in read_jsonl(run_dir / "results.jsonl")}


def _check_comparison_view(page: Any, runs: dict[str, Path]) -> None:  # noqa: F811
    from playwright.sync_api import expect  # the fixtures skip these tests without playwright

    # The overview: the reference first and marked, then the models compared with it.
    models = page.locator("#overview tr[data-bench] td[data-field=model]")
    assert models.all_inner_texts() == ["test-model reference", "model-b", "model-c"]
    view = page.locator("#comparison .group[data-benchmark=arith]")
    rows = view.locator("table.side-by-side tbody tr")
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.role)") == [
        "reference", "challenger", "challenger",
    ]  # fmt: skip
    reference = _means(runs["test-model"])
    for n, model in enumerate(MODELS[1:], start=1):
        figures = json.loads((runs[model] / "metadata.json").read_text())["vs_reference"]
        row = rows.nth(n)
        assert row.locator("td[data-field=model]").inner_text() == model
        # metadata.json's figures, as the page shows them.
        assert _number(row.locator("td[data-field=diff]")) == figures["diff"]
        assert row.locator("td[data-field=diff]").inner_text() == f"{figures['diff']:+.3f}"
        ci = row.locator("td[data-field=diff_ci]")
        assert [_number(ci, "data-low"), _number(ci, "data-high")] == [
            figures["diff_ci_low"], figures["diff_ci_high"],
        ]  # fmt: skip
        # Its level, as the terminal and `compare` print it (90% with alpha 0.05), never
        # the rewards' 95%.
        assert ci.inner_text().endswith(f" ({100 * figures['diff_ci_level']:g}%)")
        assert _number(row.locator("td[data-field=p_value]")) == figures["p_value"]
        # Whether the test finds the model worse: `compare` says "FAIL: significant drop"
        # for the same runs exactly when this says yes.
        assert row.locator("td[data-field=regressed]").inner_text() == (
            "yes" if figures["regressed"] else "no"
        )
        assert row.locator("td[data-field=test]").inner_text() == figures["test"]
        assert int(row.locator("td[data-field=lost]").inner_text()) == len(
            figures["solved_to_missed"]
        )
        # The examples where the two disagree, then each direction of flips.
        mine = _means(runs[model])
        differ = sorted(i for i in mine if mine[i] != reference[i])
        table = view.locator(
            f"details.disagreements[data-challenger='{row.get_attribute('data-bench')}']"
        )
        if not table.evaluate("d => d.open"):
            table.locator("summary").click()
        # A <details> fires "toggle" in a task after the click: the table fills in then.
        expect(table.locator(".count")).to_have_text(f"{len(differ)} examples")
        shown = table.locator("tbody tr.row")
        assert sorted(shown.evaluate_all("rows => rows.map(r => r.dataset.id)")) == differ
        for name, key in (("lost", "solved_to_missed"), ("gained", "missed_to_solved")):
            table.locator(f"[data-filter={name}]").click()
            ids = shown.evaluate_all("rows => rows.map(r => r.dataset.id)")
            assert sorted(ids) == sorted(figures[key]), name
        table.locator("[data-filter=all]").click()
        # An example unfolds to both answers.
        first = differ[0]
        table.locator(f"tr.row[data-id='{first}'] button.open").click()
        text = table.locator("tr.detail").inner_text()
        answers = {
            model: next(
                r["completion"][-1]["content"]
                for r in read_jsonl(path / "results.jsonl")
                if str(r["example_id"]) == first
            )
            for model, path in (("test-model", runs["test-model"]), (model, runs[model]))
        }
        assert all(answer in text for answer in answers.values()), text
        # Each model's parsed answer (file-qa's \boxed{}), beside the expected one.
        entry = table.locator(f"tr.row[data-id='{first}']")
        parsed = {
            model: next(
                r["parsed_answer"]
                for r in read_jsonl(path / "results.jsonl")
                if str(r["example_id"]) == first
            )
            for model, path in (("test-model", runs["test-model"]), (model, runs[model]))
        }
        assert entry.locator("td.parsed.reference").inner_text() == parsed["test-model"]
        assert entry.locator("td.parsed.challenger").inner_text() == parsed[model]
        expected = next(
            r["answer"]
            for r in read_jsonl(runs[model] / "results.jsonl")
            if str(r["example_id"]) == first
        )
        assert entry.locator("td.answer").inner_text() == expected
        assert expected in parsed.values()  # they disagree: one of them is right


def test_comparison_of_three_models(project: BenchmarkProject, page: Any, tmp_path: Path) -> None:  # noqa: F811
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    runs = _three_models(project)
    page.goto((project.pytester.path / "outputs" / "evals" / "report.html").as_uri())
    page.wait_for_selector("body[data-ready='1']")
    _check_comparison_view(page, runs)
    if shot := os.environ.get("MODAL_EVAL_REPORT_SCREENSHOT"):
        page.screenshot(path=shot, full_page=True)

    # The stored runs' report shows the same view.
    out = tmp_path / "stored.html"
    result = CliRunner().invoke(
        main, ["report", str(project.pytester.path / "outputs" / "evals"), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    _check_comparison_view(page, runs)

    # The last column is each model's own gate, not the comparison's: a model significantly
    # worse than the reference passes a gate that has no vs_reference section.
    headers = page.locator("#comparison table.side-by-side thead th").all_inner_texts()
    assert headers[-1] == "gate verdict" and "significantly worse" in headers
    # `compare` on the stored runs judges each model as the page does.
    for model in MODELS[1:]:
        regressed = json.loads((runs[model] / "metadata.json").read_text())["vs_reference"][
            "regressed"
        ]
        result = CliRunner().invoke(main, ["compare", str(runs["test-model"]), str(runs[model])])
        assert result.exit_code == (1 if regressed else 0), result.output

    # Given one model's run only, the report reads the reference's run its comparison names.
    alone = tmp_path / "alone.html"
    result = CliRunner().invoke(main, ["report", str(runs["model-b"]), "-o", str(alone)])
    assert result.exit_code == 0, result.output
    page.goto(alone.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    models = page.locator("#overview tr[data-bench] td[data-field=model]")
    assert models.all_inner_texts() == ["test-model reference", "model-b"]
    table = page.locator("details.disagreements")
    reference, mine = _means(runs["test-model"]), _means(runs["model-b"])
    differ = sum(1 for i in mine if mine[i] != reference[i])
    assert table.locator(".count").inner_text() == f"{differ} examples"


def test_prompt_column_shows_the_question(project: BenchmarkProject, page: Any) -> None:  # noqa: F811
    system = "You are a careful assistant. " * 20  # the same long start on every row
    path = project.add("arith", n=5)
    path.write_text(
        path.read_text().replace(
            "path: data/arith.jsonl", f"path: data/arith.jsonl\n  system_prompt: {system!r}"
        )
    )
    result = project.run_subprocess()
    assert result.ret == 0, result.stdout.str()
    (run_dir,) = project.run_dirs("arith")
    records = read_jsonl(run_dir / "results.jsonl")
    assert records[0]["prompt"][0]["role"] == "system"
    page.goto((project.pytester.path / "outputs" / "evals" / "report.html").as_uri())
    page.wait_for_selector("body[data-ready='1']")
    examples = page.locator("details.examples")
    row = examples.locator("tr.row[data-id='2']")
    question = records[2]["prompt"][-1]["content"]
    assert row.locator("td.text").first.inner_text() == question
    row.locator("button.open").click()  # the whole prompt on expansion
    detail = examples.locator("tr.detail").inner_text()
    assert system.strip() in detail and question in detail


#: A long reasoning with markup in it, whose answer is only at its end (beyond what a table
#: cell or the page's first 1,000 characters of a text show).
HOSTILE_REASONING = (
    '<script>window.injected = 1</script><img src=x onerror="window.injected = 1"> '
    + "Let me think about it step by step.\n" * 120
)


def test_the_report_shows_what_decides_the_reward(project: BenchmarkProject, page: Any) -> None:  # noqa: F811
    """Each example's parsed answer beside the expected one, the end of a long completion in
    its row and the whole of it on demand, model text shown as text; an early-stopped run's
    overview counts the examples evaluated."""
    project.add("arith", n=6)
    right = HOSTILE_REASONING + "The answer is \\boxed{13}."  # "What is 10 + 3?"
    wrong = HOSTILE_REASONING + "So it is \\boxed{14}, I think."  # "What is 11 + 5?" is 16
    project.add("stopped", n=200, gate="gate: {min_avg_reward: 0.3, early_stop: true}")
    project.server.configure(replies={"What is 10 + 3?": right, "What is 11 + 4?": wrong})
    result = project.run_subprocess("--override", "eval.max_concurrent=8")
    assert result.ret == 0, result.stdout.str()
    (run_dir,) = project.run_dirs("arith")
    records = {r["example_id"]: r for r in read_jsonl(run_dir / "results.jsonl")}
    assert (records[0]["parsed_answer"], records[1]["parsed_answer"]) == ("13", "14")
    (stopped_dir,) = project.run_dirs("stopped")
    early = json.loads((stopped_dir / "metadata.json").read_text())["early_stop"]
    assert early["decided"] and early["evaluated"] < 200

    page.goto((project.pytester.path / "outputs" / "evals" / "report.html").as_uri())
    page.wait_for_selector("body[data-ready='1']")
    overview = page.locator("#overview tr[data-bench]")
    names = overview.locator("td[data-field=benchmark]").all_inner_texts()
    counts = dict(zip(names, overview.locator("td[data-field=n]").all_inner_texts(), strict=True))
    assert counts == {"arith": "6 \u00d7 1", "stopped": f"{early['evaluated']} of 200 \u00d7 1"}

    examples = page.locator("details.examples[open]")
    headers = examples.locator("thead th").all_inner_texts()
    assert headers[3:6] == ["completion (its end)", "parsed answer", "expected"]
    for example_id, parsed, expected in ((0, "13", "13"), (1, "14", "15"), (2, "17", "17")):
        row = examples.locator(f"tr.row[data-id='{example_id}']")
        assert row.locator("td.parsed").inner_text() == parsed
        assert row.locator("td.answer").inner_text() == expected
    # The row shows the completion's end, kept in sight when the cell is too narrow.
    cell = examples.locator("tr.row[data-id='1'] td.completion")
    assert cell.inner_text().endswith("So it is \\boxed{14}, I think.")
    box = cell.bounding_box()
    end = cell.locator("span").evaluate(
        "span => { const r = document.createRange(); r.selectNodeContents(span);"
        " const rects = r.getClientRects(); return rects[rects.length - 1].right; }"
    )
    assert box["x"] < end <= box["x"] + box["width"] + 0.5  # the last character is visible
    # Unfolded: the whole completion, scrolled to its end; the markup in it is text.
    examples.locator("tr.row[data-id='1'] button.open").click()
    detail = examples.locator("tr.detail")
    completion = detail.locator("pre.end")
    # Longer than the page keeps: its first and last 1,000 characters, and where the rest is.
    text = completion.inner_text()
    assert text.startswith("assistant: " + wrong[:500]) and text.endswith(wrong[-900:])
    assert "characters left out here: results.jsonl line 2] …" in text
    assert completion.evaluate("pre => pre.scrollHeight > pre.clientHeight")
    assert completion.evaluate("pre => pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 1")
    assert "parsed answer\n14" in detail.inner_text().replace("PARSED ANSWER", "parsed answer")
    assert page.locator("tr.detail script, tr.detail img, tbody img").count() == 0
    assert page.evaluate("() => window.injected") is None
    # Unfolded again: folded.
    examples.locator("tr.row[data-id='1'] button.open").click()
    assert examples.locator("tr.detail").count() == 0


def test_an_interrupted_session_writes_a_partial_report(
    project: BenchmarkProject,
    page: Any,  # noqa: F811
) -> None:
    """A real Ctrl-C in the middle of a run: the session still writes its report, which shows
    the examples the checkpoint kept, names the run as interrupted with its kept count, gives
    the figures over those examples only and no verdict; the run finished by the same command
    replaces it with a whole report."""
    import re

    from tests.test_resume import interrupt_a_third_in

    n = 120
    project.add(
        "alpha",
        n=n,
        extra_yaml="eval: {max_concurrent: 4, max_retries: 0}\n",
        gate="gate: {min_avg_reward: 0.1}",
    )
    project.server.configure(delay=0.05, accuracy=0.6, salt="interrupted")
    checkpoint, text = interrupt_a_third_in(project, "alpha", n)
    said = re.search(rf"alpha \(test-model\): (\d+)/{n} examples kept in run (\S+)", text)
    assert said is not None, text[-2000:]
    kept, run_id = int(said[1]), said[2]
    assert run_id == checkpoint.parent.name and n // 3 <= kept < n
    report = project.pytester.path / "outputs" / "evals" / "report.html"
    assert report.exists(), text[-2000:]
    where = "evaluation report (partial: 1 run interrupted, unfinished): "
    assert re.search(rf"{re.escape(where)}\S*report\.html", text), text[-2000:]
    assert not (checkpoint.parent / "metadata.json").exists()  # the run is still unfinished

    rewards: dict[int, float] = {}
    for line in checkpoint.read_text().splitlines():
        record = json.loads(line)
        assert record["error"] is None
        rewards.setdefault(record["example_id"], record["reward"])
    assert len(rewards) == kept
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    assert page.title() == "Evaluation report (partial)"
    note = page.locator("#partial").inner_text()
    assert f"alpha (test-model) {kept}/{n} examples kept, interrupted" in note
    assert "no gate was decided" in note
    row = page.locator("#overview tr[data-bench]")
    assert row.count() == 1 and row.get_attribute("class") == "unfinished"
    assert row.locator("td[data-field=verdict]").inner_text() == "INTERRUPTED"
    assert row.locator("td[data-field=n]").inner_text() == f"{kept} of {n} kept \u00d7 1"
    # The figures are those of the kept examples: their mean, not a whole run's.
    mean = row.locator("td[data-field=mean]")
    assert _number(mean) == pytest.approx(sum(rewards.values()) / kept)
    section = page.locator("section.bench [data-field=unfinished]").inner_text()
    assert f"Ctrl-C interrupted the session with {kept} of {n} examples kept" in section
    examples = page.locator("details.examples")
    assert examples.locator(".count").inner_text() == f"{kept} examples"
    shown = examples.locator("tbody tr.row").evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert shown == [str(i) for i in sorted(rewards)[:100]]  # the first page, in id order
    first = min(rewards)
    examples.locator(f"tr.row[data-id='{first}'] button.open").click()
    assert "checkpoint.jsonl line" in examples.locator("tr.detail").inner_text()

    # The same command finishes the run; its report is a whole one again.
    finished = project.run_subprocess()
    assert finished.ret == 0, finished.stdout.str()
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    assert page.title() == "Evaluation report"
    assert page.locator("#partial").count() == 0
    row = page.locator("#overview tr[data-bench]")
    assert row.locator("td[data-field=verdict]").inner_text() == "PASS"
    assert row.locator("td[data-field=n]").inner_text() == f"{n} \u00d7 1"


def test_seat_table_and_attempts(page: Any, tmp_path: Path) -> None:  # noqa: F811
    """A run with two seats, one played three times per rollout, as a verifiers 0.4 run
    records it (tests/test_seat_attempts.py makes such a run for real): the page's seat table
    shows each seat's figures and attempts from metadata.json, and an example's row unfolds to
    each play's reward."""
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    run_dir = tmp_path / "duel--m" / "20261128-090000-000-abcdef12"
    run_dir.mkdir(parents=True)
    (run_dir / "run_config.json").write_text(json.dumps({"benchmark": "duel", "model_id": "m"}))
    plays = {0: [1.0, 0.0, 0.0], 1: [1.0, 1.0, 0.0]}
    records = []
    for i, rewards in plays.items():
        prompt = [{"role": "user", "content": f"question {i}"}]
        attempts = [
            {"reward": r, "metrics": {}, "stop_condition": None, "error": None} for r in rewards
        ]
        records += [
            {"example_id": i, "rollout": 0, "agent": "proposer", "prompt": prompt, "reward": 0.5,
             "error": None, "attempts": []},
            {"example_id": i, "rollout": 0, "agent": "solver", "prompt": prompt,
             "reward": sum(rewards) / 3, "error": None, "attempts": attempts},
        ]  # fmt: skip
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    solver = {
        "avg_reward": 0.5, "stderr": 0.167, "ci": [0.2, 0.8], "n_evaluated": 2,
        "attempts": {"per_rollout": [3, 3], "plays": 6},
    }  # fmt: skip
    proposer = {"avg_reward": 0.5, "stderr": 0.0, "ci": [0.5, 0.5], "n_evaluated": 2}
    metadata = {
        "benchmark": "duel", "model": "m", "run_id": run_dir.name, "num_examples": 2,
        "rollouts_per_example": 1, "avg_reward": 0.5, "stderr": 0.167, "ci": [0.2, 0.8],
        "n_evaluated": 2, "errors": 0, "seat": "solver",
        "seats": {"proposer": proposer, "solver": solver}, "attempts": solver["attempts"],
    }  # fmt: skip
    (run_dir / "metadata.json").write_text(json.dumps(metadata))
    out = tmp_path / "seats.html"
    result = CliRunner().invoke(main, ["report", str(run_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready='1']")

    seats = page.locator("table.seats tbody tr")
    assert seats.evaluate_all("rows => rows.map(r => r.dataset.seat)") == ["proposer", "solver"]
    row = page.locator("table.seats tr[data-seat=solver]")
    assert row.get_attribute("class") == "headline"
    assert row.locator("td[data-field=seat]").inner_text() == "solver headline"
    assert _number(row.locator("td[data-field=mean]")) == solver["avg_reward"]
    attempts = row.locator("td[data-field=attempts]")
    assert json.loads(attempts.get_attribute("data-value")) == solver["attempts"]
    assert attempts.inner_text() == "3 attempts per rollout (6 plays), reward the mean over them"
    other = page.locator("table.seats tr[data-seat=proposer] td[data-field=attempts]")
    assert other.inner_text() == "1 per rollout"
    # Shown in their table, not again as raw JSON under "More of metadata.json".
    assert page.locator("details.extra").count() == 0

    examples = page.locator("details.examples")
    examples.locator("tr.row[data-id='0'] button.open").click()
    detail = examples.locator("tr.detail").inner_text()
    assert "attempts: 1.000, 0.000, 0.000" in detail

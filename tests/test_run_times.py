"""A run's evaluation time and server time (``runs/times.py``): one meaning in metadata.json,
JUnit, the summary, ``runs``, ``show`` and the HTML report; summed over the sessions that
evaluated the run, and kept by a session that only reports it."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from pytest_modal_eval.cli import main
from pytest_modal_eval.report.page import read_run
from tests.conftest import BenchmarkProject

DELAY_S = 0.3  # every answer of the fake server waits this long


def session(project: BenchmarkProject, *extra: str) -> tuple[dict[str, str], str]:
    """Run the benchmark; its JUnit properties and the summary's row."""
    result = project.run("--junitxml=report.xml", "-p", "no:randomly", *extra)
    result.assert_outcomes(passed=1)
    tree = ET.parse(project.pytester.path / "report.xml")
    props = {str(p.get("name")): p.get("value", "") for p in tree.iter("property")}
    lines = result.stdout.lines
    header = next(i for i, line in enumerate(lines) if line.startswith("benchmark "))
    assert "eval time" in lines[header]
    return props, lines[header + 1]


def metadata(run_dir: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((run_dir / "metadata.json").read_text())
    return data


def test_evaluation_time_adds_up_over_sessions_and_survives_reuse(
    project: BenchmarkProject,
) -> None:
    project.server.configure(delay=DELAY_S)
    project.add("alpha", n=4, extra_yaml="eval: {max_retries: 0, max_concurrent: 1}\n")
    # Two examples, then all four (the same run goes on), then nothing left to evaluate.
    session(project, "--override", "eval.num_examples=2")
    [run_dir] = project.run_dirs("alpha")
    t1 = float(metadata(run_dir)["time_ms"])  # type: ignore[arg-type]
    assert t1 >= 2 * DELAY_S * 1000
    second, _ = session(project)
    t2 = float(metadata(run_dir)["time_ms"])  # type: ignore[arg-type]
    assert t2 >= t1 + 2 * DELAY_S * 1000  # this session's two examples added to the first's
    third, row = session(project)
    assert project.run_dirs("alpha") == [run_dir]
    assert metadata(run_dir)["time_ms"] == t2  # only reported: the recorded time stays

    # One figure everywhere: JUnit, the summary's "eval time", runs, show, the HTML report.
    for props in (second, third):
        assert float(props["eval_s"]) == round(t2 / 1000, 1)
    assert f"{round(t2 / 1000, 1):.1f}s" in row.split()
    [listing] = json.loads(
        CliRunner().invoke(main, ["runs", "--json", "--eval-output-dir", "outputs/evals"]).stdout
    )
    assert listing["eval_s"] == t2 / 1000
    # The tables print it as the summary does (to a tenth: 1.5s is not "2s" in one place and
    # "1.5s" in another, a 0.4s run not "0s").
    eval_text = f"{t2 / 1000:.1f}s"
    listed = CliRunner().invoke(main, ["runs", "--eval-output-dir", "outputs/evals"]).stdout
    assert eval_text in listed.splitlines()[1].split()
    shown = CliRunner().invoke(main, ["show", str(run_dir)]).stdout
    assert f"time      eval {eval_text}, server " in shown
    assert read_run(run_dir, "alpha").time_s == t2 / 1000


def test_an_interrupted_run_lists_the_evaluation_time_it_recorded(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=3)
    session(project)
    [run_dir] = project.run_dirs("alpha")
    recorded = float(metadata(run_dir)["time_ms"]) / 1000  # type: ignore[arg-type]
    meta = json.loads((run_dir / "checkpoint_meta.json").read_text())
    assert meta["eval_s"] == round(recorded, 3)
    (run_dir / "metadata.json").unlink()  # as after a Ctrl-C: only the checkpoint is there
    [listing] = json.loads(
        CliRunner().invoke(main, ["runs", "--json", "--eval-output-dir", "outputs/evals"]).stdout
    )
    assert listing["state"].startswith("incomplete")
    assert listing["eval_s"] == round(recorded, 3)


def test_a_session_that_only_reports_a_run_says_its_server_time_is_the_runs(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=2)
    first = project.run("-p", "no:randomly")
    first.assert_outcomes(passed=1)
    [run_dir] = project.run_dirs("alpha")
    serving = metadata(run_dir)["serving"]
    assert isinstance(serving, dict)
    times = f"start-up {serving['server_startup_s']:.1f}s, {serving['server_s']:.1f}s in use"
    first.stdout.fnmatch_lines([f"alpha (test-model): server: {times}"])
    again = project.run("-p", "no:randomly")
    again.assert_outcomes(passed=1)
    # Nothing evaluated, no server used: the figures are the run's record, and say so.
    again.stdout.fnmatch_lines(
        [f"alpha (test-model): server: none this session; the run recorded {times}"]
    )

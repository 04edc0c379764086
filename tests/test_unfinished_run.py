"""An unfinished run read from its checkpoint (runs/unfinished.py): folded as resume folds it
and summarised by the code that summarises a finished run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.report.page import ReportError, read_run
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.unfinished import read_unfinished
from pytest_modal_eval.stats.summary import summarize


def _record(example_id: int, reward: float, rollout: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "example_id": example_id,
        "rollout": rollout,
        "prompt": [{"role": "user", "content": f"question {example_id}"}],
        "completion": [{"role": "assistant", "content": f"answer {example_id}"}],
        "answer": str(example_id),
        "reward": reward,
        "error": None,
        **extra,
    }


def _run(tmp_path: Path, records: list[dict[str, Any]], **config: Any) -> RunPaths:
    run_dir = tmp_path / "alpha--m" / "20261128-080000-000-abcdef12"
    run_dir.mkdir(parents=True)
    (run_dir / "run_config.json").write_text(
        json.dumps(
            {"benchmark": "alpha", "model_id": "m", "env_id": "file-qa"}
            | {"rollouts": 2, "num_examples": 10, **config}
        )
    )
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (run_dir / "checkpoint.jsonl").write_text(lines + '{"example_id": 9, "rew')  # torn tail
    return RunPaths(run_dir)


def test_an_unfinished_run_keeps_its_finished_examples_and_their_figures(tmp_path: Path) -> None:
    failed = {"error": "ServerError", "message": "HTTP 500"}
    paths = _run(
        tmp_path,
        [
            _record(3, 1.0), _record(3, 0.0, rollout=1),
            _record(1, 1.0), _record(1, 0.0, rollout=1, error=failed),
            _record(1, 1.0, rollout=1),  # the retry finished the errored rollout
            _record(1, 0.0, rollout=1),  # a duplicate: the first finished record wins
            _record(5, 0.0, error=failed),  # errored, not retried yet
            _record(7, 1.0),  # in flight: its second rollout is still to come
        ],
    )  # fmt: skip
    run = read_unfinished(paths)
    assert (run.kept, run.total) == (2, 10)
    expected = summarize({"1": [1.0, 1.0], "3": [1.0, 0.0]})
    meta = run.metadata
    assert meta["avg_reward"] == pytest.approx(expected.mean) == pytest.approx(0.75)
    assert meta["ci"] == [pytest.approx(expected.ci_low), pytest.approx(expected.ci_high)]
    assert meta["n_evaluated"] == 2 and meta["unfinished"] == {"kept": 2, "total": 10}
    assert (meta["errors"], meta["errored_example_ids"]) == (1, [5])
    # Kept and errored examples, in id order; the one in flight is not shown.
    assert [(r["example_id"], r["rollout"], r["reward"]) for _, r in run.records] == [
        (1, 0, 1.0), (1, 1, 1.0), (3, 0, 1.0), (3, 1, 0.0), (5, 0, 0.0),
    ]  # fmt: skip
    assert [line for line, r in run.records if r["example_id"] == 1] == [3, 5]

    # The report refuses it unless asked for an unfinished run, then marks it.
    with pytest.raises(ReportError, match=r"no metadata\.json; the run has not finished"):
        read_run(paths.dir, "b0")
    section = read_run(paths.dir, "b0", unfinished=True)
    assert section.unfinished == {"kept": 2, "total": 10, "interrupted": False}
    assert section.verdict is None and section.records_file == "checkpoint.jsonl"
    assert [row[0] for row in section.rows] == ["1", "3", "5"]
    assert [row[1] for row in section.rows] == [1.0, 0.5, None]
    assert section.rows[2][5] is not None  # the errored example shows its error


def test_an_unfinished_game_has_each_seat_s_figures(tmp_path: Path) -> None:
    seats = [
        _record(i, payoff, agent=seat)
        for i, (a, b) in enumerate([(2.0, -2.0), (1.0, -1.0), (-1.0, 1.0)])
        for seat, payoff in (("first", a), ("second", b))
    ]
    paths = _run(tmp_path, seats, rollouts=1, config={"agent": {"seat": "second"}})
    meta = read_unfinished(paths).metadata
    assert meta["seat"] == "second"
    assert meta["avg_reward"] == pytest.approx(-2 / 3)
    assert meta["seats"]["first"]["avg_reward"] == pytest.approx(2 / 3)
    assert meta["seats"]["second"]["n_evaluated"] == 3


def test_the_report_command_shows_a_named_unfinished_run_as_partial(tmp_path: Path) -> None:
    """A run named itself is reported whatever its state, marked unfinished; a directory of
    runs still stands for its finished ones."""
    from click.testing import CliRunner

    from pytest_modal_eval.cli import main

    paths = _run(tmp_path, [_record(2, 1.0), _record(2, 0.0, rollout=1)])
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(paths.dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "(1 run, 1 examples, 1 unfinished: a partial report)" in result.output
    page = out.read_text()
    assert "<title>Evaluation report (partial)</title>" in page
    assert "INTERRUPTED" not in page and "Ctrl-C" not in page  # no session's Ctrl-C here
    assert "alpha (m) 1/10 examples kept." in page and ">UNFINISHED</span>" in page

    above = CliRunner().invoke(main, ["report", str(paths.dir.parent), "-o", str(out)])
    assert above.exit_code == 1 and "no finished run here" in above.output

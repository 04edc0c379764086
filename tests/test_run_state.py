"""RunState: how checkpoint records fold into what a run knows about each selected example."""

from __future__ import annotations

import json
import tracemalloc
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_modal_eval.runs import store
from pytest_modal_eval.runs.state import RunState
from pytest_modal_eval.runs.store import Checkpoint


def _record(example_id: int, rollout: int, reward: float = 1.0, **extra: Any) -> dict[str, Any]:
    return {"example_id": example_id, "rollout": rollout, "reward": reward, "error": None, **extra}


def _error(example_id: int, rollout: int, message: str) -> dict[str, Any]:
    return {"example_id": example_id, "rollout": rollout, "error": {"error": message}}


def test_first_finished_record_wins_and_errors_until_then(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path)
    lines = [
        _error(10, 0, "Timeout"),
        _error(10, 0, "ConnectionError"),  # the newest error is the one reported
        _record(11, 0, 0.25),
        _record(11, 1, 0.75, is_truncated=True),
        _record(11, 1, 0.0),  # a duplicate written again after a kill: the first one counts
        _error(11, 0, "late error"),  # an error after a finished record changes nothing
        _record(99, 0, 1.0),  # an example outside the selection
        _record(12, 5, 1.0),  # a rollout beyond the configured count
    ]
    checkpoint.path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    state = RunState.from_checkpoint(checkpoint, [10, 11, 12], rollouts=2)

    assert state.finished(11) and not state.finished(10) and not state.finished(12)
    assert state.rewards(11) == [0.25, 0.75]
    assert state.truncated(11) == 1
    assert state.missing(10) == [0, 1] and state.missing(12) == [0, 1]
    assert state.error(10) == "ConnectionError" and state.error(11) is None
    assert state.error(12) is None
    assert state.finished_rollouts == 2
    assert state.completed_ids() == [11]


def test_finishing_after_an_error_clears_it() -> None:
    state = RunState([3], rollouts=1)
    state.add([_error(3, 0, "Timeout")])
    assert state.any_error() == "Timeout" and state.missing(3) == [0]
    state.add([_record(3, 0, 1.0)])
    assert state.any_error() is None and state.finished(3) and state.missing(3) == []


def test_metric_means_cover_finished_examples_and_skip_non_numbers() -> None:
    state = RunState([0, 1, 2], rollouts=2)
    state.add(
        [
            _record(0, 0, metrics={"correct": 1.0, "note": "text"}),
            _record(0, 1, metrics={"correct": 0.0}),
            _record(1, 0, metrics={"correct": 1.0, "length": 20}),
            _record(1, 1, metrics={"correct": 1.0}),
            _record(2, 0, metrics={"correct": 0.0}),  # example 2 is unfinished
        ]
    )
    assert state.metric_means([0, 1]) == {
        "correct": pytest.approx(0.75),
        "length": pytest.approx(20.0),
    }


def test_summary_of_finished_unfinished_and_duplicated_examples() -> None:
    state = RunState(array("q", [5, 6, 5, 8, 9]), rollouts=2)
    state.add(
        [
            _record(5, 0, 0.5, is_truncated=True, metrics={"correct": 1.0}),
            _record(5, 1, 1.0, metrics={"correct": 0.0}),
            _record(8, 0, 0.25, metrics={"correct": 1.0}),
            _record(8, 1, 0.0),  # no metric: left out of its mean
            _record(6, 0, 1.0),  # example 6 misses a rollout
            _error(9, 1, "Timeout"),
        ]
    )
    end = state.summary()
    # Rewards: each finished example once, in selection order.
    assert dict(end.rewards) == {"5": [0.5, 1.0], "8": [0.25, 0.0]}
    assert end.errored == {6: "not evaluated", 9: "Timeout"}
    # Per selected entry, as the rollouts are: example 5 is selected twice.
    assert end.truncated_rollouts == 2
    assert end.metric_means == {"correct": pytest.approx(3 / 5)}  # 1, 0 twice; 1 once
    assert state.metric_means([5, 5, 8]) == end.metric_means


def test_summary_when_every_example_finished() -> None:
    state = RunState(range(4), rollouts=2)
    state.add(
        _record(i, r, 0.5 * r, is_truncated=(i, r) == (2, 1), metrics={"m": float(i)} if r else {})
        for i in range(4)
        for r in range(2)
    )
    end = state.summary()
    assert dict(end.rewards) == {str(i): [0.0, 0.5] for i in range(4)}
    assert end.errored == {} and end.truncated_rollouts == 1
    assert end.metric_means == {"m": 1.5} == state.metric_means(range(4))
    assert end.rewards.means().tolist() == [0.25] * 4


def test_summary_of_nothing_finished() -> None:
    state = RunState(range(3), rollouts=1)
    end = state.summary()
    assert len(end.rewards) == 0 and end.truncated_rollouts == 0 and end.metric_means == {}
    assert end.errored == {0: "not evaluated", 1: "not evaluated", 2: "not evaluated"}


def test_duplicate_ids_share_one_state() -> None:
    state = RunState([5, 6, 5], rollouts=1)
    state.add([_record(5, 0, 0.5)])
    assert state.finished(5) and state.rewards(5) == [0.5]
    assert state.missing(6) == [0]
    assert state.completed_ids() == [5]


def test_an_example_is_finished_only_with_every_rollout() -> None:
    state = RunState([0, 1], rollouts=3)
    state.add([_record(0, 2, 0.5), _record(0, 0, 1.0)])
    assert not state.finished(0) and state.missing(0) == [1]
    assert state.completed_ids() == []
    state.add([_record(0, 1, 0.0)])
    assert state.finished(0) and state.rewards(0) == [1.0, 0.0, 0.5]
    assert state.completed_ids() == [0] and state.finished_rollouts == 3


def test_non_contiguous_ids() -> None:
    state = RunState(array("q", [1000, 7, 42]), rollouts=1)
    state.add([_record(42, 0, 0.5), _record(1000, 0, 1.0)])
    assert state.completed_ids() == [42, 1000]
    assert state.missing(7) == [0]


def test_memory_is_a_few_bytes_per_rollout() -> None:
    n = 50_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        state = RunState(range(n), rollouts=1)
        state.add(_record(i, 0, 1.0, metrics={"correct": 1.0}) for i in range(n))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert state.finished_rollouts == n
    # flag + reward + truncation + one metric column: 18 bytes; a dict per example was ~660.
    assert held / n < 40, f"{held / n:.0f} bytes per example"


@pytest.mark.parametrize("count", [0, 1, 5, 17])
def test_meta_line_is_what_json_dumps_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    monkeypatch.setattr(store, "ID_CHUNK", 4)  # several pieces, one ending mid-chunk
    ids = np.arange(count, dtype=np.int64) * 1000 - 3
    value = {"run_id": "r", "completed_example_ids": ids, "where": Path("x"), "n": None}
    store.write_json_line_atomic(tmp_path / "meta.json", value)
    expected = json.dumps({**value, "completed_example_ids": ids.tolist(), "where": "x"})
    assert (tmp_path / "meta.json").read_text() == expected + "\n"
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_meta_line_never_holds_every_id_as_an_int(tmp_path: Path) -> None:
    state = RunState(range(100_000), rollouts=1)
    state.add(_record(i, 0) for i in range(100_000))
    ids = state.completed_id_array()
    assert ids.tolist() == state.completed_ids() == list(range(100_000))
    tracemalloc.start()
    try:
        store.write_json_line_atomic(tmp_path / "meta.json", {"ids": ids})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # A list of the ids and its JSON text: ~4.5 MB; one piece at a time: well under 1 MB.
    assert peak < 1_000_000, f"{peak / 1e6:.1f} MB"
    assert json.loads((tmp_path / "meta.json").read_text()) == {"ids": list(range(100_000))}


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    store.write_json_atomic(path, {"n": 1})
    with pytest.raises(RuntimeError), store.replaced_atomically(path) as out:
        out.write('{"n": 2')
        raise RuntimeError("interrupted half-way")
    assert json.loads(path.read_text()) == {"n": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_several_seats_each_have_their_rollouts_and_an_example_needs_all(tmp_path: Path) -> None:
    """With several seats a record is keyed by (example, seat, rollout): an example is
    finished once every seat's every rollout is; a rollout any seat misses is missing; each
    seat has its own rewards, metrics and summary; results.jsonl holds one record per seat per
    rollout, a rollout's seats side by side."""
    seats = ["first", "second"]
    checkpoint = Checkpoint(tmp_path)
    lines = [
        _record(0, 0, 1.0, agent="first", metrics={"m": 1.0}),
        _record(0, 0, -2.0, agent="second", metrics={"m": 0.0}),
        _record(0, 1, 0.0, agent="second"),
        _record(0, 1, 1.0, agent="first"),
        _record(1, 0, 2.0, agent="second"),  # first seat of (1, 0) lost: a cut checkpoint
        _record(1, 1, 1.0, agent="first"),
        _record(1, 1, 0.5, agent="second"),
        _record(1, 0, 9.0, agent="third"),  # a seat the environment does not have
        _record(1, 0, 9.0),  # no seat: not one of this run's records
    ]
    checkpoint.path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    state = RunState.from_checkpoint(checkpoint, [0, 1], 2, seats, "second")

    assert state.finished(0) and not state.finished(1)
    assert state.missing(0) == [] and state.missing(1) == [0]
    assert state.rewards(0) == [-2.0, 0.0]  # the headline seat's
    assert state.rewards(0, "first") == [1.0, 1.0]
    assert state.metric_means([0]) == {"m": 0.0}
    assert state.finished_rollouts == 7
    first, second = state.summary("first"), state.summary()
    assert first.rewards.rewards.tolist() == [[1.0, 1.0]]
    assert second.rewards.rewards.tolist() == [[-2.0, 0.0]]
    assert first.metric_means == {"m": 1.0} and second.errored == {1: "not evaluated"}

    state.add([_record(1, 0, 0.0, agent="first"), _record(1, 0, 7.0, agent="second")])
    assert state.finished(1) and state.rewards(1) == [2.0, 0.5]  # the first finished wins
    assert state.summary().rewards.rewards.tolist() == [[-2.0, 0.0], [2.0, 0.5]]

    with checkpoint.path.open("a") as handle:
        handle.write(json.dumps(_record(1, 0, 0.0, agent="first")) + "\n")
    results = tmp_path / "results.jsonl"
    assert store.write_results(checkpoint, results, [0, 1], 2, seats) == 8
    written = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["example_id"], r["rollout"], r["agent"]) for r in written] == [
        (i, r, seat) for i in (0, 1) for r in (0, 1) for seat in seats
    ]
    assert [r["reward"] for r in written if r["agent"] == "second"] == [-2.0, 0.0, 2.0, 0.5]


def test_one_seat_keys_records_by_rollout_whatever_their_agent(tmp_path: Path) -> None:
    """An environment with one seat: its records (agent "agent", or null) are keyed by rollout
    alone, as runs written before seats had records of their own."""
    state = RunState([0], 1, ["agent"])
    state.add([_record(0, 0, 0.5, agent="agent")])
    assert state.finished(0) and state.rewards(0) == [0.5]
    checkpoint = Checkpoint(tmp_path)
    checkpoint.path.write_text(json.dumps(_record(0, 0, 0.5)) + "\n")
    assert store.write_results(checkpoint, tmp_path / "r.jsonl", [0], 1, ["agent"]) == 1


def test_run_ids_sort_by_start_time_within_one_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs started in the same second (a session that only reuses finished runs takes a
    few milliseconds) sort by start time, whatever their random part: the newest run is the
    last one, which is the run baselines and ``show`` pick."""
    from datetime import UTC, datetime

    times = iter(
        [
            datetime(2026, 11, 28, 8, 1, 16, 900_000, UTC),
            datetime(2026, 11, 28, 8, 1, 16, 950_000, UTC),
        ]
    )
    randoms = iter(["ffffff", "000000"])

    class Clock:
        @staticmethod
        def now(tz: Any) -> datetime:
            return next(times)

    monkeypatch.setattr(store, "datetime", Clock)
    monkeypatch.setattr(store.secrets, "token_hex", lambda n: next(randoms))
    first, second = store.new_run_id(), store.new_run_id()
    assert first == "20261128-080116-900fffff"
    assert second == "20261128-080116-95000000"
    assert sorted([second, first]) == [first, second]

"""Each rollout of an example samples with its own seed, ``sampling.seed + rollout``."""

from __future__ import annotations

import json
import signal
import time

import pytest

from pytest_modal_eval.client.rollout_seeds import (
    ROLLOUT_COLUMN,
    GroupRollouts,
    match_rollouts,
    match_seat_rollouts,
    seeded,
)
from tests.conftest import BenchmarkProject, read_jsonl
from tests.test_resume import start_pytest

N = 6


def test_each_rollout_of_a_group_keeps_its_own_index() -> None:
    first, second, third = object(), object(), object()
    group = GroupRollouts([1, 3])
    assert group.index_of(first) == 1
    assert group.index_of(second) == 3
    assert group.index_of(first) == 1  # a later turn of the first rollout
    assert group.index_of(third) is None  # a state beyond the group's rollouts


def test_the_seed_is_offset_by_the_rollout_index() -> None:
    args = {"temperature": 0.6, "seed": 10}
    assert seeded(args, 3)["seed"] == 13
    assert seeded(args, 0) is args and seeded(args, None) is args  # rollout 0: as configured
    assert args["seed"] == 10  # the shared arguments are not modified
    for unseeded in ({"temperature": 0.6}, {"seed": None}, {"seed": True}):
        assert seeded(unseeded, 2) is unseeded


@pytest.mark.parametrize(
    ("claimed", "missing", "expected"),
    [
        ([0, 1, 2], [0, 1, 2], [0, 1, 2]),
        ([2, 0, 1], [0, 1, 2], [2, 0, 1]),  # asked in another order than the outputs come
        ([None, 3], [1, 3], [1, 3]),  # one never asked the model: it takes what is left
        ([3, 3], [1, 3], [3, 1]),  # a repeated claim counts once
        ([0, None], [2, 5], [2, 5]),  # a claim outside the missing rollouts is ignored
        ([None, None, None], [4, 7], [4, 7]),  # more outputs than rollouts: the rest dropped
    ],
)
def test_outputs_are_matched_to_the_rollouts_their_seeds_came_from(
    claimed: list[int | None], missing: list[int], expected: list[int]
) -> None:
    assert match_rollouts(claimed, missing) == expected


def test_each_seat_of_an_episode_is_matched_to_the_same_rollout() -> None:
    """Several seats: one output per seat per rollout, each seat's matched on its own (one
    list for all would give the second seat's outputs the rollouts left over)."""
    outputs = [
        {"agent": seat, ROLLOUT_COLUMN: rollout} for rollout in (3, 1) for seat in ("a", "b")
    ]
    matched = match_seat_rollouts(outputs, [1, 3])
    assert sorted((o["agent"], r) for o, r in matched) == [("a", 1), ("a", 3), ("b", 1), ("b", 3)]
    assert all(o[ROLLOUT_COLUMN] == r for o, r in matched)


@pytest.mark.parametrize(
    ("sampling", "rollouts", "expected"),
    [
        ("{temperature: 0.6, seed: 7}", 4, [7, 8, 9, 10]),
        ("{temperature: 0.6}", 3, [0, 1, 2]),  # the default seed is 0
        ("{temperature: 0.6, seed: null}", 3, [None, None, None]),
        ("{temperature: 0.6, seed: 7}", 1, [7]),
    ],
)
def test_the_server_sees_one_seed_per_rollout(
    project: BenchmarkProject, sampling: str, rollouts: int, expected: list[int | None]
) -> None:
    project.add("alpha", n=N, extra_yaml=f"sampling: {sampling}\neval: {{rollouts: {rollouts}}}\n")
    project.run().assert_outcomes(passed=1)
    seeds = project.server.stats()["seeds_by_question"]
    assert len(seeds) == N
    for sent in seeds.values():
        assert sorted(sent, key=lambda seed: -1 if seed is None else seed) == expected


def test_each_record_is_the_rollout_its_seed_belongs_to_also_after_a_resume(
    project: BenchmarkProject,
) -> None:
    """The server answers right exactly when the seed is even: with seed 0, rollouts 0 and 2
    of every example are right and 1 and 3 wrong -- in the records of a run killed midway and
    resumed, whatever order the rollouts asked in."""
    n = 40
    project.add(
        "alpha",
        n=n,
        extra_yaml="sampling: {temperature: 0.6, seed: 0}\n"
        "eval: {rollouts: 4, max_concurrent: 4}\n",
        gate="gate: {min_avg_reward: 0.0}",
    )
    project.server.configure(right_when_seed_even=True, delay=0.02)
    process = start_pytest(project)
    deadline = time.monotonic() + 60
    while project.server.stats().get("completed_requests", 0) < 2 * n:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    project.server.configure(delay=0.0)
    project.run().assert_outcomes(passed=1)
    [run_dir] = project.run_dirs("alpha")
    records = read_jsonl(run_dir / "results.jsonl")
    assert sorted((r["example_id"], r["rollout"]) for r in records) == [
        (i, r) for i in range(n) for r in range(4)
    ]
    assert all(r["reward"] == float(r["rollout"] % 2 == 0) for r in records), [
        (r["example_id"], r["rollout"], r["reward"]) for r in records
    ]
    assert json.loads((run_dir / "metadata.json").read_text())["avg_reward"] == 0.5

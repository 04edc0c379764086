"""Each rollout of an example samples with its own seed, ``sampling.seed + rollout``."""

from __future__ import annotations

import pytest

from pytest_modal_eval.rollout_seeds import GroupSeeds, current_group, seeded
from tests.conftest import BenchmarkProject

N = 6


def test_each_rollout_of_a_group_keeps_its_own_offset() -> None:
    first, second, third = object(), object(), object()
    token = current_group.set(GroupSeeds([1, 3]))
    try:
        args = {"temperature": 0.6, "seed": 10}
        assert seeded(args, first)["seed"] == 11
        assert seeded(args, second)["seed"] == 13
        assert seeded(args, first)["seed"] == 11  # a later turn of the first rollout
        assert seeded(args, third) is args  # more rollouts than indexes: the seed as set
        assert args["seed"] == 10  # the shared arguments are not modified
        for unseeded in ({"temperature": 0.6}, {"seed": None}, {"seed": True}):
            assert seeded(unseeded, first) is unseeded
        assert seeded(args, None) is args
    finally:
        current_group.reset(token)
    assert seeded({"seed": 10}, first) == {"seed": 10}  # outside a group


def test_rollout_zero_sends_the_configured_seed_unchanged() -> None:
    token = current_group.set(GroupSeeds(range(1)))
    try:
        args = {"seed": 0}
        assert seeded(args, object()) is args
    finally:
        current_group.reset(token)


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

"""The betting confidence sequence: known properties, checked on small populations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pytest_modal_eval.runs.early_stop import (
    REFERENCE,
    EarlyStop,
    PairedGate,
    PendingPaired,
    send_order,
)
from pytest_modal_eval.stats.confidence_sequence import BettingCS, paired_difference


def _feed(values: np.ndarray, alpha: float = 0.1, population: int | None = None) -> BettingCS:
    cs = BettingCS(alpha, population)
    for value in values:
        cs.update(float(value))
    return cs


def test_closes_on_the_exact_mean_when_the_whole_population_is_seen() -> None:
    values = np.random.default_rng(1).random(300)
    cs = _feed(values, population=300)
    assert cs.lower == pytest.approx(values.mean()) and cs.upper == pytest.approx(values.mean())


def test_intervals_only_narrow_and_contain_the_mean_along_the_way() -> None:
    rng = np.random.default_rng(2)
    values = (rng.random(500) < 0.3).astype(float)
    cs = BettingCS(0.1, 500)
    widths = []
    for value in values:
        cs.update(float(value))
        assert cs.lower <= values.mean() <= cs.upper
        widths.append(cs.upper - cs.lower)
    assert all(b <= a for a, b in itertools.pairwise(widths))
    assert widths[99] < 0.5 and widths[-1] == 0.0


def test_mirror_invariance_x_to_one_minus_x() -> None:
    values = np.random.default_rng(3).random(200)
    cs, mirrored = _feed(values, population=1000), _feed(1 - values, population=1000)
    assert cs.lower == pytest.approx(1 - mirrored.upper, abs=1e-3)
    assert cs.upper == pytest.approx(1 - mirrored.lower, abs=1e-3)


def test_a_smaller_alpha_gives_a_wider_interval() -> None:
    values = np.random.default_rng(4).random(200)
    narrow, wide = _feed(values, 0.2), _feed(values, 0.01)
    assert wide.lower <= narrow.lower and wide.upper >= narrow.upper
    assert wide.upper - wide.lower > narrow.upper - narrow.lower


def test_without_replacement_is_narrower_than_with() -> None:
    values = np.random.default_rng(5).random(400)
    finite, infinite = _feed(values, population=500), _feed(values)
    assert finite.upper - finite.lower < infinite.upper - infinite.lower


def test_coverage_at_every_look_by_simulation() -> None:
    """Misses at any look, over 100 shuffles of one skewed population: at most alpha (with
    a binomial margin); a 90% fixed-n interval re-checked at every look misses far more
    often."""
    rng = np.random.default_rng(6)
    population = (rng.random(200) < 0.15).astype(float)
    mean, misses, naive_misses = population.mean(), 0, 0
    for _ in range(100):
        order = rng.permutation(population)
        cs, missed = BettingCS(0.1, len(order)), False
        for value in order:
            cs.update(float(value))
            missed |= not cs.lower <= mean <= cs.upper
        misses += missed
        running = np.cumsum(order) / np.arange(1, len(order) + 1)
        se = np.sqrt(np.maximum(running * (1 - running), 1e-9) / np.arange(1, len(order) + 1))
        naive_misses += bool(np.any(np.abs(running - mean)[9:] > 1.645 * se[9:]))
    assert misses / 100 <= 0.1 + 0.05
    assert naive_misses / 100 > 0.3


def test_above_and_below_are_exact_at_a_threshold_off_the_grid() -> None:
    threshold = 0.61234  # not a multiple of the grid's 1/2000
    cs = BettingCS(0.1, 1000, [threshold])
    assert threshold in cs.grid
    assert not cs.above(threshold) and not cs.below(threshold)
    for _ in range(40):
        cs.update(1.0)
    assert cs.above(threshold) and not cs.below(threshold) and cs.lower >= threshold
    low = BettingCS(0.1, 1000, [threshold])
    for _ in range(40):
        low.update(0.0)
    assert low.below(threshold) and not low.above(threshold) and low.upper <= threshold


def test_rejects_values_outside_the_unit_interval() -> None:
    cs = BettingCS(0.1, 10)
    with pytest.raises(ValueError, match=r"got 1\.5"):
        cs.update(1.5)
    for _ in range(10):
        cs.update(0.5)
    with pytest.raises(ValueError, match="all 10 values"):
        cs.update(0.5)


def test_paired_difference_maps_back_to_the_difference_scale() -> None:
    rng = np.random.default_rng(7)
    run, base = rng.random(300), rng.random(300)
    cs = BettingCS(0.1, 300)
    for r, b in zip(run, base, strict=True):
        cs.update(paired_difference(float(r), float(b)))
    low, high = cs.difference_bounds()
    assert low == pytest.approx((run - base).mean()) == pytest.approx(high)


def test_send_order_is_a_permutation_fixed_by_the_run_key() -> None:
    order = send_order(100, "ab" * 32)
    assert sorted(order) == list(range(100)) and order != list(range(100))
    assert send_order(100, "ab" * 32) == order and send_order(100, "cd" * 32) != order


def test_examples_that_finish_out_of_turn_wait_for_theirs() -> None:
    early = EarlyStop([2, 0, 1], [10, 11, 12], {"avg_reward": 0.5}, 0.05)
    # Turns: example 12 (position 2), then 10, then 11.
    early.finished(10, {"avg_reward": 1.0})  # turn 1: waits for example 12 (turn 0)
    assert early.taken == 0
    early.finished(12, {"avg_reward": 1.0})
    assert early.taken == 2
    early.finished(11, None)  # errored: leaves the population
    assert early.sequences["avg_reward"].population == 2


def test_a_value_outside_zero_one_turns_early_stop_off_with_a_reason() -> None:
    early = EarlyStop([0, 1], [0, 1], {"avg_reward": 0.5}, 0.05)
    early.finished(0, {"avg_reward": 2.0})
    assert not early.decided and early.off is not None and "outside [0, 1]" in early.off


def _pending_and_known(
    reference: dict[str, float], arrives_after: int
) -> tuple[PendingPaired, PairedGate, list[int]]:
    """A reference comparison waiting for ``reference`` until ``arrives_after`` examples have
    finished, the same comparison known from the start, and how often each was polled."""
    finished = [0]

    def poll() -> dict[str, float] | None:
        return reference if finished[0] >= arrives_after else None

    fields = (REFERENCE, "the reference model r", 0.0, 0.05, "gate.vs_reference.max_drop")
    pending = PendingPaired(*fields, poll=poll, waiting="the reference model r is running")
    return pending, PairedGate(fields[0], fields[1], reference, *fields[2:]), finished


@pytest.mark.parametrize("arrives_after", [0, 30, 150])
def test_a_comparison_taken_up_mid_run_is_the_one_known_from_the_start(arrives_after: int) -> None:
    """The reference's means arrive after some examples (its run on another xdist worker): its
    sequence takes the examples already taken, in order, and is the sequence the run would
    have had with them known from the start; until then nothing is decided."""
    rng = np.random.default_rng(arrives_after)
    n = 300
    reference = {str(i): float(rng.random() < 0.9) for i in range(n)}
    run = [float(rng.random() < 0.4) for _ in range(n)]  # far worse: decided early
    pending, known, finished = _pending_and_known(reference, arrives_after)
    late = EarlyStop(list(range(n)), list(range(n)), {"avg_reward": 0.1}, 0.05, [pending])
    early = EarlyStop(list(range(n)), list(range(n)), {"avg_reward": 0.1}, 0.05, [known])
    for i in range(n):
        late.finished(i, {"avg_reward": run[i]})
        early.finished(i, {"avg_reward": run[i]})
        finished[0] += 1
        if late.pending:
            assert not late.decided
            continue
        cs, same = late.paired_sequences[REFERENCE], early.paired_sequences[REFERENCE]
        assert (cs.lower, cs.upper) == (same.lower, same.upper), i
        if late.decided:
            break
    assert late.decision is not None and late.decision.regressed(REFERENCE) is True
    assert early.decision is not None
    assert late.decision.after == max(early.decision.after, arrives_after)
    if early.decision.after >= arrives_after:
        assert late.decision == early.decision


def test_a_comparison_still_waiting_at_the_end_says_why_the_run_was_not_decided() -> None:
    pending, _, _ = _pending_and_known({"0": 1.0}, arrives_after=10**9)
    early = EarlyStop([0, 1], [0, 1], {"avg_reward": 0.1}, 0.05, [pending])
    early.finished(0, {"avg_reward": 1.0})
    early.finished(1, {"avg_reward": 1.0})
    assert not early.decided
    assert early.undecided() == "the reference model r is running; the run went on to the end"


def test_a_reference_that_leaves_no_results_is_not_waited_for() -> None:
    """Its comparison is not made (the gate fails for want of it): the minimum decides."""
    fields = (REFERENCE, "the reference model r", 0.0, 0.05, "gate.vs_reference.max_drop")
    pending = PendingPaired(*fields, poll=lambda: "it crashed", waiting="running")
    n = 200
    early = EarlyStop(list(range(n)), list(range(n)), {"avg_reward": 0.1}, 0.05, [pending])
    for i in range(n):
        early.finished(i, {"avg_reward": 1.0})
        if early.decided:
            break
    assert early.decision is not None and early.decision.passed and early.decision.paired == ()
    assert early.decision.after < n


def _stops(kind: str, n: int, mean: float, runs: int, seed: int) -> tuple[list[int], np.ndarray]:
    """Examples the gate's sequences took at their decision in ``runs`` shuffled benchmarks,
    and the values in the order each was taken."""
    rng = np.random.default_rng(seed)
    taken, seen = [], np.empty((runs, n))
    for row in range(runs):
        if kind == "binary":
            values = (rng.random(n) < mean).astype(float)
        else:  # judge-like: most examples near 0.9 or near 0.05
            values = np.where(rng.random(n) < (mean - 0.05) / 0.85, 0.9, 0.05)
            values += rng.uniform(-0.04, 0.04, n)
        order = [int(p) for p in rng.permutation(n)]
        seen[row] = values[order]
        early = EarlyStop(order, list(range(n)), {"avg_reward": 0.6}, 0.05)
        for position in order:
            early.finished(position, {"avg_reward": float(values[position])})
            if early.decided:
                break
        taken.append(early.taken)
    return taken, seen


@pytest.mark.parametrize(("kind", "distance"), [("binary", -0.05), ("judge", 0.1)])
def test_stops_no_later_than_hedged_betting_with_agrapa_bets(kind: str, distance: float) -> None:
    """Median and 90th percentile of the examples taken before the decision, on the same
    shuffles, against Waudby-Smith & Ramdas' hedged capital with aGRAPA bets (written apart,
    tests/support/hedged_betting.py) with and without replacement; the full grid is
    benchmarks/early_stop.py."""
    from tests.support.hedged_betting import stopping_times

    taken, seen = _stops(kind, 400, 0.6 + distance, 24, seed=int(100 * distance) + len(kind))
    mine = np.median(taken), np.quantile(taken, 0.9)
    for without_replacement in (True, False):
        theirs, _ = stopping_times(seen, 0.6, 0.1, without_replacement=without_replacement)
        reference = np.median(theirs), np.quantile(theirs, 0.9)
        assert mine[0] <= reference[0] and mine[1] <= reference[1], (without_replacement, mine)


def test_a_decided_sequence_reports_ends_on_its_side_of_the_threshold() -> None:
    """A FAIL rules out the threshold and every candidate above it, so the upper end reported
    lies strictly below it (a grid point at the threshold is not an end); a PASS's lower end
    is at or above it. The ends lie within the grid's outward bounds and are the points where
    the replayed capitals cross the barrier."""
    rng = np.random.default_rng(12)
    fails = passes = 0
    for _ in range(40):
        for mean in (0.5, 0.7):
            cs = BettingCS(0.1, 300, [0.6])
            for value in (rng.random(300) < mean).astype(float):
                cs.update(float(value))
                if cs.below(0.6) or cs.above(0.6):
                    break
            low, high = cs.bounds()
            assert cs.lower <= low <= high <= cs.upper
            if cs.below(0.6) and cs.n < 300:
                fails += 1
                assert high < 0.6 and cs.excluded([high])[0] and not cs.excluded([low + 1e-6])[0]
            elif cs.above(0.6) and cs.n < 300:
                passes += 1
                assert low >= 0.6 and cs.excluded([low])[0]
    assert fails > 20 and passes > 20
    # The replay is the sequence itself: the same candidates are ruled out.
    assert np.array_equal(cs.excluded(cs.grid), cs._excluded)


def test_early_verdicts_are_written_with_bounds_on_their_side() -> None:
    """Early FAILs and PASSes at a minimum of 0.6: the failure reason's sequence lies below
    0.6 as written (the upper end of a FAIL is never written 0.600), the note's at or above
    it for a PASS; as are the JUnit properties."""
    import re

    from pytest_modal_eval.report.junit import _bounds
    from pytest_modal_eval.runs.early_stop import describe, failure_reasons

    rng = np.random.default_rng(5)
    decided = {True: 0, False: 0}
    for run in range(120):
        values = (rng.random(200) < (0.5 if run % 2 else 0.7)).astype(float)
        early = EarlyStop(list(range(200)), list(range(200)), {"avg_reward": 0.6}, 0.05)
        for i in range(200):
            early.finished(i, {"avg_reward": float(values[i])})
            if early.decision is not None:
                break
        decision = early.decision
        if decision is None or decision.after == 200:
            continue
        decided[decision.passed] += 1
        text = describe(decision, decision.after)
        if not decision.passed:
            text = failure_reasons(decision, {"avg_reward": 0.6})[0]
        low, high = map(float, re.findall(r"\[(\d\.\d+), (\d\.\d+)\]", text)[0])
        (_, junit_low), (_, junit_high) = _bounds("q", *decision.intervals["avg_reward"], 0.6)
        if decision.passed:
            assert low >= 0.6 and junit_low >= 0.6, text
        else:
            assert high < 0.6 and junit_high < 0.6, text
    assert min(decided.values()) >= 30, decided

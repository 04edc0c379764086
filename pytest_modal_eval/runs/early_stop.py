"""``gate.early_stop``: send examples in a seeded random order and stop once the gate is decided.

Each gated quantity -- the mean reward against ``gate.min_avg_reward``, each metric against its
``gate.min_metrics`` minimum -- has a confidence sequence over the benchmark's examples
(:class:`~pytest_modal_eval.stats.confidence_sequence.BettingCS`, the finite-population version:
the benchmark is the whole population). The gate is decided when one quantity's sequence lies
entirely below its minimum (FAIL) or every one lies entirely at or above (PASS); then no more
examples are sent and those in flight finish.

Why the early verdict rarely differs from the full run's: a PASS is wrong only if some full-run
mean is below its minimum while its sequence's lower bound cleared that minimum at some look, a
FAIL only if an upper bound fell under a full-run mean at or above its minimum. Whatever the
truth, only one of the two can happen to each quantity. Each side of each of the ``K`` gated
quantities' sequences misses at any look with probability at most ``gate.alpha / K`` (the
sequences are two-sided at ``1 - 2 alpha / K``), so a wrong early verdict has probability at
most ``gate.alpha``.

The sequences are for values in [0, 1], and need their range before the first look: the mean
reward is rescaled from ``gate.reward_range`` ([0, 1] unless declared; the schema refuses a
minimum outside it), metrics are taken to lie in [0, 1]. A value seen outside its range breaks
that assumption: the sequences stop deciding, a decision they took is taken back, and the run
goes on to the end.

The guarantee needs the values to arrive in random order, so the sequences take examples in the
order of the seeded permutation (:func:`send_order`), not in the order answers come back (a fast
answer is often a short one, and short answers are not a random sample): an example that
finishes ahead of its turn waits until every example before it in the permutation has. An
example that could not be evaluated leaves the population, as it leaves the full run's mean.

Paired comparisons (:class:`PairedGate`: the stored baseline, the reference model) are decided
the same way, on the per-example difference ``run - other`` (mapped onto [0, 1] by
:func:`~pytest_modal_eval.stats.confidence_sequence.paired_difference`) over the examples both
score: "no regression" once the difference's sequence lies at or above ``-max_drop``,
"regressed" once it lies entirely below. The full run calls a comparison regressed when its one
sided test against the margin ``-max_drop`` is significant: a test of the models,
the examples a sample of what they meet, not a statement about this exact set. So the
difference's sequence is the one *with* replacement (it does not close on this set's exact
difference at the last example, which would call any difference below ``-max_drop`` a
regression however small), and one that separates the difference from ``-max_drop`` on a share
of the examples makes the full run's test significant too (benchmarks/early_stop.py measures
how often the two disagree). The ``K`` quantities are the gate's minimums and the comparisons;
each comparison's sides are at its own alpha / ``K``. The run stops once the minimums are
decided (one below: FAIL; all above: PASS) and every comparison is decided too.

A comparison whose other side is not known when the run starts (:class:`PendingPaired`: the
reference model's run, still going on another xdist worker) counts among the ``K`` from the
start and keeps the gate open until its per-example means arrive; then its sequence takes the
examples already taken, in the order they were taken. A sequence is a function of the values in
their order, not of when it is computed, so it is the one the run would have had with the means
known from the start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_modal_eval.stats.confidence_sequence import BettingCS, paired_difference
from pytest_modal_eval.stats.format import fmt_interval

if TYPE_CHECKING:
    from pytest_modal_eval.config.schema import GateConfig

#: The name of the mean reward among the gated quantities (metrics go by their own names).
REWARD = "avg_reward"
#: The names of the paired comparisons among the gated quantities.
BASELINE = "vs_baseline"
REFERENCE = "vs_reference"


@dataclass(frozen=True)
class PairedGate:
    """A paired comparison the gate makes after the run, to be decided early: the other side's
    per-example mean rewards (by example id) and what counts as a regression."""

    name: str  # BASELINE or REFERENCE
    label: str  # what it is compared with, for messages ("the stored baseline evals/...")
    means: Mapping[str, float]
    max_drop: float
    alpha: float
    field: str  # the setting of max_drop, for messages
    # The run's baseline key (answer_key.comparable_fields) the comparison needs: a baseline
    # made under another configuration is not compared with. None: no such condition.
    config_hash: str | None = None


@dataclass(frozen=True)
class PendingPaired:
    """A paired comparison whose other side's per-example means are not known when the run
    starts: ``poll`` returns them once they are there, a reason when they never will be (the
    comparison is not made, and not waited for), else None. ``waiting`` says what it waits
    for, for the record of a run that ends with it still open."""

    name: str
    label: str
    max_drop: float
    alpha: float
    field: str
    poll: Callable[[], Mapping[str, float] | str | None]
    waiting: str
    config_hash: str | None = None  # as PairedGate's: no condition on the run's key

    def known(self, means: Mapping[str, float]) -> PairedGate:
        return PairedGate(self.name, self.label, means, self.max_drop, self.alpha, self.field)


@dataclass(frozen=True)
class PairedDecision:
    """How a paired comparison was decided: ``interval`` is on the difference scale."""

    name: str
    label: str
    field: str
    max_drop: float
    regressed: bool
    interval: tuple[float, float]
    level: float


def send_order(n: int, run_key: str) -> list[int]:
    """Positions ``0..n-1`` in the random order fixed by ``run_key`` (the run's answer hash):
    every resume and re-run of the same run sends the same order."""
    seed = int(run_key[:16], 16) if run_key else 0
    return [int(p) for p in np.random.default_rng(seed).permutation(n)]


def gated_thresholds(
    min_avg_reward: float | None, min_metrics: Mapping[str, float]
) -> dict[str, float]:
    """The gate's minimums by quantity name: what the sequences decide."""
    gated = dict(min_metrics)
    if min_avg_reward is not None:
        gated[REWARD] = min_avg_reward
    return gated


@dataclass(frozen=True)
class Decision:
    """The gate decided before the end."""

    passed: bool
    after: int  # examples the sequences had taken when it was decided
    total: int  # examples selected
    intervals: dict[str, tuple[float, float]]  # quantity -> the deciding interval
    deciding: str  # the quantity whose interval decided a FAIL, or "all" for a PASS
    level: float  # two-sided coverage of each minimum's sequence
    failed: tuple[str, ...] = ()  # the minimums whose sequences lie entirely below them
    paired: tuple[PairedDecision, ...] = ()  # the paired comparisons, each decided
    # quantity -> what its interval is decided against: its minimum, or a comparison's
    # -max_drop (on the rewards' scale); the side each end is written on (stats.format).
    thresholds: dict[str, float] = field(default_factory=dict)

    def regressed(self, name: str) -> bool | None:
        """Whether comparison ``name`` was decided as a regression (None: not decided here)."""
        return next((p.regressed for p in self.paired if p.name == name), None)

    def describe(self) -> str:
        return f"decided after {self.after:,} of {self.total:,} examples (early stop)"


class EarlyStop:
    """The sequences of one run, fed as examples finish (on the event loop's thread)."""

    def __init__(
        self,
        order: Sequence[int],
        example_ids: Sequence[int],
        thresholds: Mapping[str, float],
        alpha: float,
        paired: Sequence[PairedGate | PendingPaired] = (),
        reward_range: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        k = len(thresholds) + len(paired)
        if not k:
            raise ValueError("early stop needs a gated quantity")
        self.thresholds = dict(thresholds)
        self.reward_range = reward_range
        # The sequences are for values in [0, 1]: the mean reward is rescaled from its range.
        self._scaled = {n: self._scale(n, t) for n, t in self.thresholds.items()}
        outside = [n for n, t in self._scaled.items() if not 0.0 <= t <= 1.0]
        if outside:
            raise ValueError(f"the minimum of {outside[0]} is outside its range")
        self.order = order
        self.total = len(order)
        # Each side at alpha / K: two-sided at 1 - 2 alpha / K (see the module docstring).
        self.level = 1.0 - 2.0 * alpha / k
        self.sequences = {
            name: BettingCS(1.0 - self.level, len(order), [t]) for name, t in self._scaled.items()
        }
        self.paired = [p for p in paired if isinstance(p, PairedGate)]
        self.pending = [p for p in paired if isinstance(p, PendingPaired)]
        # (example id, its mean reward) of each example taken, in order, while a comparison
        # waits for its other side: its sequence takes them when that arrives.
        self._rewards: list[tuple[str, float | None]] | None = [] if self.pending else None
        self.paired_levels = {p.name: 1.0 - 2.0 * p.alpha / k for p in paired}
        # With replacement (an infinite population): the comparison is a test of the models,
        # the examples a sample of what they meet, not the exact difference on this set.
        self.paired_sequences = {
            p.name: BettingCS(1.0 - self.paired_levels[p.name], None, [self._paired_threshold(p)])
            for p in paired
        }
        self._ids = [int(example_ids[p]) for p in order]
        self._turn_of = {example_id: turn for turn, example_id in enumerate(self._ids)}
        self._waiting: dict[int, Mapping[str, float] | None] = {}
        self._ahead_at_decision = 0
        self._next = 0
        self.taken = 0
        self.decision: Decision | None = None
        self.off: str | None = None  # why the sequences stopped deciding, if they did
        # A decision a value outside its assumed range took back (the run goes on to the end).
        self.undone: Decision | None = None

    @property
    def _width(self) -> float:
        return self.reward_range[1] - self.reward_range[0]

    def _scale(self, name: str, value: float) -> float:
        """``value`` of quantity ``name`` on the sequences' [0, 1] scale."""
        return (value - self.reward_range[0]) / self._width if name == REWARD else value

    def _unscale(self, name: str, value: float) -> float:
        return self.reward_range[0] + value * self._width if name == REWARD else value

    def _bounds(self, name: str) -> tuple[float, float]:
        """The range quantity ``name``'s values are assumed to lie in."""
        return self.reward_range if name == REWARD else (0.0, 1.0)

    def _paired_threshold(self, p: PairedGate | PendingPaired) -> float:
        """``-max_drop`` on the [0, 1] scale of the paired differences."""
        return paired_difference(-p.max_drop / self._width, 0.0)

    def _outside(self, name: str, value: float | None) -> bool:
        low, high = self._bounds(name)
        return value is None or math.isnan(value) or not low <= value <= high

    def _turn_off(self, what: str, value: float | None, name: str) -> None:
        """A value outside its assumed range: the sequences no longer hold, so nothing they
        decided stands and the run goes on to the end."""
        low, high = self._bounds(name)
        setting = "gate.reward_range" if name == REWARD else "a metric's range"
        shown = "missing" if value is None else f"{value:g}"
        self.off = (
            f"{what} is {shown}, outside [{low:g}, {high:g}], the range early stop assumes "
            f"({setting}): its confidence sequences do not hold"
        )
        if self.decision is not None:
            self.undone, self.decision = self.decision, None
            self.off += (
                f"; the gate they decided after {self.undone.after:,} examples is taken back"
            )
        self.off += "; the run goes on to the end"

    def finished(self, example_id: int, values: Mapping[str, float] | None) -> None:
        """One example is done: its per-example values by quantity (None: it errored)."""
        turn = self._turn_of.get(example_id)
        # An example taken already (an error replayed from the checkpoint, evaluated again
        # now) keeps the place it had: the sequence is a function of the values in order.
        if turn is None or turn < self._next or self.off is not None:
            return
        if self.pending:
            self._poll()
        self._waiting[turn] = values
        while self._next in self._waiting and self.off is None:
            self._take(self._ids[self._next], self._waiting.pop(self._next))
            self._next += 1

    def _take(self, example_id: int, values: Mapping[str, float] | None) -> None:
        key = str(example_id)
        if values is None:
            for cs in self.sequences.values():
                cs.leave()
            return
        differences = {}
        for p in self.paired:
            if key not in p.means:
                continue
            difference = self._difference(p, key, values.get(REWARD))
            if difference is None:
                return
            differences[p.name] = difference
        for name in self.thresholds:
            value = values.get(name)
            if self._outside(name, value):
                self._turn_off(f"{name} of example {key}", value, name)
                return
        for name, cs in self.sequences.items():
            cs.update(self._scale(name, values[name]))
        for name, difference in differences.items():
            self.paired_sequences[name].update(difference)
        if self._rewards is not None:
            self._rewards.append((key, values.get(REWARD)))
        self.taken += 1
        if self.decision is None:
            self.decision = self._decide()
            if self.decision is not None:
                # Those still waiting were answered ahead of the decision, not decided on
                # (they are taken after it, to check their values: see finished).
                self._ahead_at_decision = len(self._waiting)

    def _difference(self, p: PairedGate, key: str, mine: float | None) -> float | None:
        """Example ``key``'s difference on the [0, 1] scale, or None (and early stop off) when
        a side's mean reward is outside the rewards' range."""
        theirs = p.means[key]
        for side, value in (("this run's", mine), (f"{p.label}'s", theirs)):
            if self._outside(REWARD, value):
                self._turn_off(f"{side} mean reward of example {key}", value, REWARD)
                return None
        assert mine is not None
        return paired_difference(self._scale(REWARD, mine), self._scale(REWARD, theirs))

    def _poll(self) -> None:
        """Take up each waiting comparison whose other side has arrived: its sequence takes the
        examples taken so far, in order; one that will not arrive is not made."""
        for pending in list(self.pending):
            found = pending.poll()
            if found is None:
                continue
            self.pending.remove(pending)
            if isinstance(found, str):  # no comparison is made: nothing to wait for
                del self.paired_sequences[pending.name]
                continue
            gate = pending.known(found)
            self.paired.append(gate)
            for key, mine in self._rewards or ():
                if key in gate.means:
                    difference = self._difference(gate, key, mine)
                    if difference is None:
                        return
                    self.paired_sequences[gate.name].update(difference)
        if not self.pending:
            self._rewards = None
        if self.decision is None and self.taken:
            self.decision = self._decide()

    def undecided(self) -> str | None:
        """Why the sequences did not decide, when it is not just that they did not in time."""
        if self.off is not None or not self.pending:
            return self.off
        waiting = "; ".join(p.waiting for p in self.pending)
        return f"{waiting}; the run went on to the end"

    def _decide(self) -> Decision | None:
        if self.pending:
            return None  # a comparison is open until its other side arrives
        below = sorted(n for n, cs in self.sequences.items() if cs.below(self._scaled[n]))
        if not below and not all(cs.above(self._scaled[n]) for n, cs in self.sequences.items()):
            return None
        paired: list[PairedDecision] = []
        for p in self.paired:
            cs = self.paired_sequences[p.name]
            threshold = self._paired_threshold(p)
            if cs.above(threshold):
                regressed = False
            elif cs.below(threshold):
                regressed = True
            else:
                return None  # this comparison is still open
            level = self.paired_levels[p.name]
            low, high = cs.difference_bounds()
            bounds = _on_its_side(low * self._width, high * self._width, -p.max_drop, regressed)
            paired.append(
                PairedDecision(p.name, p.label, p.field, p.max_drop, regressed, bounds, level)
            )
        failed = [*below, *(p.name for p in paired if p.regressed)]
        intervals: dict[str, tuple[float, float]] = {}
        for name, cs in self.sequences.items():
            low, high = (self._unscale(name, end) for end in cs.bounds())
            if name in below or cs.above(self._scaled[name]):
                low, high = _on_its_side(low, high, self.thresholds[name], name in below)
            intervals[name] = (low, high)
        intervals.update({p.name: p.interval for p in paired})
        thresholds = {**self.thresholds, **{p.name: -p.max_drop for p in paired}}
        return Decision(
            not failed,
            self.taken,
            self.total,
            intervals,
            failed[0] if failed else "all",
            self.level,
            tuple(below),
            tuple(paired),
            thresholds,
        )

    @property
    def decided(self) -> bool:
        return self.decision is not None

    @property
    def ahead(self) -> int:
        """Examples finished ahead of their turn, waiting for the examples before them (once
        decided: those waiting when it was decided)."""
        return self._ahead_at_decision if self.decision is not None else len(self._waiting)


def _on_its_side(low: float, high: float, threshold: float, below: bool) -> tuple[float, float]:
    """A decided interval's ends kept on the side of ``threshold`` the sequence decided (the
    lower end at or above it, or the upper end below it) through the rounding of rescaling
    them onto the rewards' scale."""
    if below:
        return low, min(high, math.nextafter(threshold, -math.inf))
    return max(low, threshold), high


def record(
    decision: Decision | None, off: str | None, evaluated: int, in_flight: tuple[int, int] = (0, 0)
) -> dict[str, Any]:
    """What ``metadata.json`` says of early stopping. ``in_flight``: the examples sent but not
    yet taken by the sequences when the gate was decided, as (requests awaiting an answer,
    answers waiting for their turn); nothing is sent after the decision, so a run sends at
    most ``decided_after`` plus these."""
    if decision is None:
        return {"decided": False, "reason": off or "the gate was not decided before the end"}
    return {
        "decided": True,
        "verdict": "pass" if decision.passed else "fail",
        "decided_after": decision.after,
        "total_examples": decision.total,
        "evaluated": evaluated,
        "in_flight": in_flight[0],
        "answered_ahead": in_flight[1],
        "deciding": decision.deciding,
        "intervals": {n: list(bounds) for n, bounds in decision.intervals.items()},
        "level": decision.level,
        "comparisons": {
            p.name: {
                "with": p.label,
                "regressed": p.regressed,
                "diff_interval": list(p.interval),
                "level": p.level,
                "max_drop": p.max_drop,
            }
            for p in decision.paired
        },
        "method": "betting confidence sequence, sampling without replacement",
        "text": decision.describe(),
        "summary": describe(decision, evaluated),
    }


def example_values(
    names: Sequence[str], rewards: Sequence[float], metrics: Mapping[str, float]
) -> dict[str, float]:
    """One example's value of each gated quantity: its mean reward over its rollouts (always:
    the paired comparisons use it), its metrics' means, and pass@k (the unbiased per-example
    estimate) for ``pass@k`` names."""
    from pytest_modal_eval.stats.pass_k import parse_metric_name, per_example

    values: dict[str, float] = {REWARD: math.fsum(rewards) / len(rewards)}
    for name in names:
        k = parse_metric_name(name)
        if name == REWARD:
            values[name] = math.fsum(rewards) / len(rewards)
        elif k is not None and k <= len(rewards):
            values[name] = float(per_example([list(rewards)], k)[0])
        elif name in metrics:
            values[name] = metrics[name]
    return values


def describe(decision: Decision, evaluated: int) -> str:
    """The line the summary, JUnit and the report show for a run stopped early."""
    paired = {p.name: p for p in decision.paired}
    parts = []
    for name, (low, high) in decision.intervals.items():
        p = paired.get(name)
        threshold = decision.thresholds.get(name)
        if p is None:
            parts.append(f"{name} in {fmt_interval(low, high, threshold=threshold)}")
        else:
            found = "regressed" if p.regressed else "no regression"
            level = "" if p.level == decision.level else f" at {p.level:.1%}"
            shown = fmt_interval(low, high, threshold=threshold, signed=True)
            parts.append(f"difference from {p.label} in {shown}{level}: {found}")
    return (
        f"{decision.describe()}: {'PASS' if decision.passed else 'FAIL'} decided by "
        f"{decision.level:.1%} confidence sequences ({'; '.join(parts)}); the figures are over "
        f"a random subset of {evaluated:,} examples"
    )


def failure_reasons(decision: Decision, thresholds: Mapping[str, float]) -> list[str]:
    """Why the gate failed, for each sequence that decided a failure."""
    reasons = []
    for name in decision.failed:
        low, high = decision.intervals[name]
        field_name = "gate.min_avg_reward" if name == REWARD else f"gate.min_metrics.{name}"
        what = "mean reward" if name == REWARD else f"metric {name}"
        shown = fmt_interval(low, high, threshold=thresholds[name])
        reasons.append(
            f"{what} is below {field_name} {thresholds[name]:g}: its {decision.level:.1%} "
            f"confidence sequence {shown} lies entirely below it, {decision.describe()}"
        )
    for p in decision.paired:
        if p.regressed:
            shown = fmt_interval(*p.interval, threshold=-p.max_drop, signed=True)
            reasons.append(
                f"significant drop from {p.label}: the {p.level:.1%} confidence sequence of the "
                f"mean difference {shown} lies entirely below -{p.field} "
                f"{p.max_drop:g}, {decision.describe()}"
            )
    return reasons


def build(
    gate: GateConfig,
    example_ids: Sequence[int],
    run_key: str,
    paired: Sequence[PairedGate | PendingPaired],
    baseline_key: str,
    open_reason: str | None,
) -> tuple[EarlyStop | None, str | None]:
    """A run's sequences when ``gate.early_stop`` applies, else why it does not (None for
    both: early stop was not asked for). ``paired`` are the comparisons the gate will make
    (one needing another ``config_hash`` than the run's ``baseline_key`` will not be made);
    ``open_reason`` says why a comparison is open that no sequence can decide."""
    if not gate.early_stop:
        return None, None
    thresholds = gated_thresholds(gate.min_avg_reward, gate.min_metrics)
    if open_reason is not None:
        return None, f"{open_reason}; the run goes on to the end"
    made = [p for p in paired if p.config_hash in (None, baseline_key)]
    if not thresholds and not made:
        return None, (
            "nothing to decide early: the gate sets neither min_avg_reward nor min_metrics, "
            "and no comparison gates the run"
        )
    order = send_order(len(example_ids), run_key)
    early = EarlyStop(order, example_ids, thresholds, gate.alpha, made, gate.rewards_bounds)
    return early, None

"""An unfinished run (interrupted, killed, or still running) read from its checkpoint: what
``metadata.json`` would say of the examples it keeps, and its records in example order.

A finished run is read from its final files; an unfinished one has none (they are written when
every selected example has an outcome). Its checkpoint holds every rollout that finished or
errored, in the order they ended, with an errored rollout's later retry beside it. Here the
checkpoint is folded as resume folds it (the first finished record of a rollout wins; until
there is one, the newest error) and summarised by the code that summarises a run at its end
(:class:`~pytest_modal_eval.runs.state.RunState`,
:func:`~pytest_modal_eval.stats.summary.summarize`), so an interrupted run's figures are the
ones its finished examples would give in ``metadata.json``, over those examples only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.reader import CHECKPOINT_FIX, iter_records
from pytest_modal_eval.runs.seats import SeatPlan, seat_outcomes
from pytest_modal_eval.runs.state import RunState
from pytest_modal_eval.stats import summary as stats


@dataclass(frozen=True)
class UnfinishedRun:
    """An unfinished run's figures and records."""

    #: ``metadata.json``'s fields over the kept examples, with ``unfinished``: kept, total.
    metadata: dict[str, Any]
    #: (checkpoint line, record) of the examples shown: the kept ones and those that errored,
    #: by example id, then seat (the environment's order), then rollout.
    records: list[tuple[int, dict[str, Any]]]
    kept: int  # examples whose every rollout (of every seat) finished
    total: int | None  # examples selected, when the run recorded it


def read_unfinished(paths: RunPaths) -> UnfinishedRun:
    """The run at ``paths`` as far as its checkpoint goes (a torn last line is left out)."""
    config = paths.read_run_config() or {}
    progress = paths.read_checkpoint_meta() or {}
    rollouts = _int(progress.get("rollouts_per_example")) or _int(config.get("rollouts")) or 1
    chosen: dict[tuple[int, Any, int], tuple[int, dict[str, Any]]] = {}
    agents: dict[Any, None] = {}
    for line, record in iter_records(paths.checkpoint, torn_tail=True, fix=CHECKPOINT_FIX):
        key = (int(record["example_id"]), record.get("agent"), int(record.get("rollout") or 0))
        agents.setdefault(record.get("agent"))
        held = chosen.get(key)
        if held is None or held[1].get("error"):  # the first finished one wins
            chosen[key] = (line, record)
    seats = [a for a in agents if a is not None] if len(agents) > 1 else []
    named = _agent_seat(config)
    plan = SeatPlan(tuple(seats), named if named in seats else next(iter(seats), None))

    ids = sorted({key[0] for key in chosen})
    state = RunState(ids, rollouts, plan.seats, plan.headline)
    state.add(record for _, record in chosen.values())
    end = state.summary()
    kept = len(end.rewards)
    # An example with some rollouts still to come and none errored was in flight: not shown.
    errored = {i: e for i, e in end.errored.items() if state.error(i) is not None}
    summary = stats.summarize(end.rewards) if kept else None
    total = _int(progress.get("total_examples")) or _int(config.get("num_examples"))
    seconds = progress.get("eval_s")
    metadata: dict[str, Any] = {
        "env_id": config.get("env_id") or progress.get("env_id"),
        "benchmark": config.get("benchmark"),
        "model": config.get("model_id") or progress.get("model"),
        "run_id": paths.run_id,
        "num_examples": total,
        "rollouts_per_example": rollouts,
        "time_ms": round(float(seconds) * 1000, 1) if isinstance(seconds, (int, float)) else None,
        "avg_reward": summary.mean if summary else None,
        "avg_metrics": end.metric_means,
        "stderr": _finite(summary.stderr) if summary else None,
        "ci": [_finite(summary.ci_low), _finite(summary.ci_high)] if summary else None,
        "ci_level": summary.confidence if summary else None,
        "ci_method": summary.interval if summary else None,
        "n_evaluated": kept,
        "errors": len(errored),
        "errored_example_ids": sorted(errored),
        "truncated_rollouts": end.truncated_rollouts,
        **({"attempts": end.attempts} if end.attempts is not None else {}),
        "unfinished": {"kept": kept, "total": total},
    }
    if plan.seats:
        metadata["seat"] = plan.headline
        metadata["seats"] = {s: o.to_json() for s, o in seat_outcomes(state, plan).items()}
    shown = {int(i) for i in end.rewards.ids} | set(errored)
    order = {seat: n for n, seat in enumerate(agents)}
    records = [
        chosen[key]
        for key in sorted(chosen, key=lambda k: (k[0], order[k[1]], k[2]))
        if key[0] in shown
    ]
    return UnfinishedRun(metadata, records, kept, total)


def _agent_seat(config: Mapping[str, Any]) -> Any:
    """The headline seat the benchmark named (``agent.seat``), as run_config.json records it."""
    resolved = config.get("config")
    agent = resolved.get("agent") if isinstance(resolved, Mapping) else None
    return agent.get("seat") if isinstance(agent, Mapping) else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

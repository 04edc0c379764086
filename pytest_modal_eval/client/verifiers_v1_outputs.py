"""A finished v1 rollout, or an episode's seats, as the plugin records them (verifiers 0.3's
rollout-output shape: see :func:`pytest_modal_eval.runs.record.rollout_record`)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import verifiers.v1 as vf

from pytest_modal_eval.client.rollout_seeds import ROLLOUT_COLUMN, SLOT_WAIT_COLUMN
from pytest_modal_eval.client.verifiers_v1_interception import Rollout
from pytest_modal_eval.client.verifiers_v1_rows import prompt_messages

#: The stop condition verifiers records when the agent's ``max_turns`` refused a turn.
TURN_CAP_STOP = "max_turns"


def turn_cap_error(trace: vf.Trace, max_turns: int | None) -> dict[str, str]:
    """The error recorded for a rollout stopped by ``eval.max_turns``: not a finish the
    taskset decided, so not scored."""
    return {
        "error": "MaxTurnsReached",
        "message": f"the rollout was stopped after {trace.num_turns} model turns, "
        f"eval.max_turns ({max_turns}), before the model answered or the taskset's own stop "
        "conditions ended it; raise eval.max_turns, or give the taskset a @vf.stop that ends "
        "such rollouts (and scores them)",
    }


def prompt_length(
    messages: Sequence[Mapping[str, Any]], prompt: Sequence[Mapping[str, Any]]
) -> int:
    """Where the model's part of a rollout's messages begins: after the task's prompt, which
    may itself hold assistant turns (a few-shot conversation), found by role and content even
    when a harness put messages of its own before it; by role at the start when a harness
    reshaped the contents; else at the first assistant message."""

    def same(message: Mapping[str, Any], asked: Mapping[str, Any], content: bool) -> bool:
        return message.get("role") == asked.get("role") and (
            not content or message.get("content") == asked.get("content")
        )

    n = len(prompt)
    if n:
        for start in range(len(messages) - n + 1):
            window = messages[start : start + n]
            if all(same(m, q, True) for m, q in zip(window, prompt, strict=True)):
                return start + n
        if len(messages) >= n and all(
            same(m, q, False) for m, q in zip(messages[:n], prompt, strict=True)
        ):
            return n
    return next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))


def rollout_output(
    example_id: int,
    task: vf.Task[Any, Any, Any],
    trace: vf.Trace,
    rollout: Rollout,
    max_turns: int | None = None,
    own: vf.TaskData | None = None,
) -> dict[str, Any]:
    """A finished rollout in the shape the plugin records (verifiers 0.3's rollout output).

    ``own``: the task a seat of an episode played (its trace's ``task.data``), which may not be
    the episode's (a game hands each seat a question of its own): its ``answer`` and ``info``
    are the record's, and its prompt when it has one (a modeled user's seat has none)."""
    data = own if own is not None else task.data
    messages = (
        [m.model_dump(mode="json", exclude_none=True) for m in trace.branches[-1].messages]
        if trace.branches
        else []
    )
    prompt = prompt_messages(data if data.prompt is not None else task.data)
    first_reply = prompt_length(messages, prompt)
    error: dict[str, str] | None = None
    if not trace.ok and trace.last_error is not None:
        error = {"error": trace.last_error.type, "message": trace.last_error.message}
    elif trace.stop_condition == TURN_CAP_STOP:
        error = turn_cap_error(trace, max_turns)
    metrics: dict[str, Any] = {
        name: reward.score for name, reward in trace.rewards.items() if reward is not None
    }
    metrics.update({name: value for name, value in trace.metrics.items() if value is not None})
    timing = trace.timing
    ends = [span.end for span in (timing.agent, timing.finalize, timing.scoring) if span.end]
    usage = trace.usage
    return {
        "example_id": example_id,
        "prompt": messages[:first_reply] or prompt,
        "completion": messages[first_reply:],
        "answer": getattr(data, "answer", None),
        "info": getattr(data, "info", None),
        "reward": trace.reward,
        "metrics": metrics,
        "error": error,
        "timing": {
            "generation": {"duration": timing.agent.duration},
            "scoring": {"duration": timing.scoring.duration},
            "total": max(ends) - timing.start if ends else 0.0,
        },
        "is_truncated": any(call.finish_reason == "length" for call in trace.calls),
        "stop_condition": trace.stop_condition,
        "token_usage": usage.model_dump(mode="json") if usage is not None else None,
        ROLLOUT_COLUMN: rollout.index,
        SLOT_WAIT_COLUMN: sum(rollout.waits),
    }


def _trace_result(trace: vf.Trace) -> dict[str, Any]:
    """A trace's outcome: its reward, metrics, stop condition and error type."""
    return {
        "reward": trace.reward,
        "metrics": {n: r.score for n, r in trace.rewards.items() if r is not None}
        | {n: v for n, v in trace.metrics.items() if v is not None},
        "stop_condition": trace.stop_condition,
        "error": trace.last_error.type if not trace.ok and trace.last_error is not None else None,
    }


def _mean_result(results: list[dict[str, Any]]) -> tuple[float, dict[str, float]]:
    """The mean reward of ``results`` and the mean of each metric over those that have it."""
    reward = statistics.fmean(float(r["reward"] or 0.0) for r in results)
    names = dict.fromkeys(name for r in results for name in r["metrics"])
    metrics = {
        name: statistics.fmean(float(r["metrics"][name]) for r in results if name in r["metrics"])
        for name in names
    }
    return reward, metrics


def _play_attempts(output: dict[str, Any], traces: list[vf.Trace]) -> None:
    """A seat the episode played several times (best-of-n's attempts, a solver fanned out):
    its record's reward and metrics are the means over its traces, as ``vf-eval`` averages
    every trace, and ``attempts`` holds each trace's outcome. One attempt that errored errors
    the record, as one seat errors its episode."""
    results = [_trace_result(t) for t in traces]
    output["attempts"] = results
    output["reward"], output["metrics"] = _mean_result(results)
    failed = next((t for t in traces if not t.ok and t.last_error is not None), None)
    if failed is not None and output["error"] is None and failed.last_error is not None:
        output["error"] = {"error": failed.last_error.type, "message": failed.last_error.message}


def _seat_result(traces: list[vf.Trace]) -> dict[str, Any]:
    """Another seat's outcome beside a record: its trace's, or over several attempts the mean
    reward and metrics, the first error and each attempt's outcome under ``attempts``."""
    results = [_trace_result(t) for t in traces]
    if len(results) == 1:
        return results[0]
    reward, metrics = _mean_result(results)
    return {
        "reward": reward,
        "metrics": metrics,
        "stop_condition": results[-1]["stop_condition"],
        "error": next((r["error"] for r in results if r["error"]), None),
        "attempts": results,
    }


def episode_outputs(
    example_id: int,
    task: vf.Task[Any, Any, Any],
    episode: Any,
    seats: Sequence[str],
    rollout: Rollout,
    max_turns: int | None = None,
) -> list[dict[str, Any]]:
    """An episode of the environment's ``Env`` as one rollout record per seat: each seat's
    trace (``agent`` names the seat) and the task it played, with the other seats' results
    beside it under ``seats``. A seat the episode played several times is one record of the
    means over its plays, each play under ``attempts``.

    The seats of one episode are finished or errored together: an episode whose
    ``run()``/``finalize()`` raised, or one seat of which errored or never played, errors
    every seat's record, so a retried rollout replays the whole episode and the records of
    one rollout never mix two episodes (a game's payoffs belong together).
    """
    traces = list(episode.traces)
    outputs: list[dict[str, Any]] = []
    for seat in seats:
        named = [t for t in traces if t.agent is not None and t.agent.name == seat]
        # One seat takes the episode's traces whatever their names; of several, each seat
        # takes only the traces of its own name.
        if not named and len(seats) == 1:
            named = traces
        mine = named[-1] if named else None
        if mine is not None:
            output = rollout_output(example_id, task, mine, rollout, max_turns, mine.task.data)
        else:
            unplayed = vf.Trace(
                task=vf.TraceTask(type=type(task).__name__, data=task.data),
                agent=vf.AgentInfo(config=vf.AgentConfig(), name=seat),
            )
            output = rollout_output(example_id, task, unplayed, rollout, max_turns)
            output["error"] = {
                "error": "NoTrace",
                "message": f"the episode ran no agent in seat {seat!r}",
            }
        if len(named) > 1:
            _play_attempts(output, named)
        # The episode's own error says more than "no trace" when it failed before the seat
        # played (a task's setup, the Env's run()).
        if episode.errors and (output["error"] is None or mine is None):
            last = episode.errors[-1]
            output["error"] = {"error": last.type, "message": last.message}
        output["agent"] = seat
        others: dict[str, list[vf.Trace]] = {}
        for i, t in enumerate(traces):
            if not any(t is m for m in named):
                name = (t.agent.name if t.agent is not None else "") or str(i)
                others.setdefault(name, []).append(t)
        if others:
            output["seats"] = {name: _seat_result(played) for name, played in others.items()}
        outputs.append(output)
    failed = next((o for o in outputs if o["error"] is not None), None)
    if failed is not None:
        for output in outputs:
            if output["error"] is None:
                output["error"] = {
                    "error": "SeatError",
                    "message": f"seat {failed['agent']!r} of the same episode errored: "
                    f"{failed['error'].get('message') or failed['error'].get('error')}",
                }
    return outputs

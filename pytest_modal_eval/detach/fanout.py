"""A fanned-out session (``--detach-parallel``, ``--detach-shards``): one worker call per
benchmark item, or per shard of its examples; the wait for them; the merge of each sharded
benchmark's shards (:mod:`.shards`); and the deployments its workers shared on Modal.

A restarted controller does not start its workers again: their calls are recorded in the Dict
(``workers:<session>``) as they are started. The controller's last pass, the session's own
command over every run the workers finished, is :mod:`.container`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.detach.layout import OUTPUTS, shard_output
from pytest_modal_eval.detach.names import workers_key
from pytest_modal_eval.detach.request import (
    SHARE_OPTIONS,
    PlannedItem,
    SessionRequest,
    options_removed,
)
from pytest_modal_eval.detach.runner import Container, SessionStatus
from pytest_modal_eval.detach.spec import WORKER
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.runs.local_key import local_key

if TYPE_CHECKING:
    from pytest_modal_eval.serving.modal.apps import ModalApps

#: Seconds between looks at a fanned-out session's workers.
WORKER_POLL_S = 2.0


def worker_plan(request: SessionRequest) -> list[dict[str, Any]]:
    """The workers of a fanned-out session: one per item, or per shard of a sharded item."""
    plan = []
    for item in request.items:
        if item.shards <= 1:
            plan.append(_worker(request, item, None))
        else:
            plan += [_worker(request, item, (k, item.shards)) for k in range(1, item.shards + 1)]
    return plan


def _worker(
    request: SessionRequest, item: PlannedItem, shard: tuple[int, int] | None
) -> dict[str, Any]:
    options = options_removed(request.options, SHARE_OPTIONS)
    if request.serving_on_modal:  # the controller stops the deployment (see ServingApps)
        options.append("--keep-deployment")
    name = item.runs_dir
    output = str(OUTPUTS)
    lease = item.runs_dir
    if shard is not None:
        name = f"{item.runs_dir}--{shard[0]}-of-{shard[1]}"
        output = str(shard_output(item.runs_dir, shard))
        lease = name
        options += [f"--eval-shard={shard[0]}/{shard[1]}", "--no-early-stop"]
    return {
        "session": request.to_json(),
        "name": name,
        "args": [*options, item.nodeid],
        "output": output,
        "lease": lease,
    }


class ServingApps:
    """A fanned-out session's Modal deployments. Its workers share one deployment per server
    and leave it up (``--keep-deployment``: the first to end would stop it under the others);
    at the session's end the controller stops those that appeared while it ran, never one
    deployed before it (another session's, or one kept on purpose)."""

    def __init__(self, apps: ModalApps) -> None:
        self.apps = apps
        self.before = {record.name for record in apps.deployed() if record.ours}

    def stop_new(self, say: Callable[[str], None]) -> None:
        for record in self.apps.deployed():
            if record.ours and record.name not in self.before:
                try:
                    self.apps.stop(record.name)
                    say(f"stopped the deployment {record.name} this session started")
                except ServingError as exc:
                    say(f"could not stop {record.name}: {exc}")


def fan_out(box: Container, status: SessionStatus, last_pass: Callable[[], int]) -> int | None:
    """Start the session's workers (those not started yet), wait for them, merge the shards,
    then run ``last_pass`` (the session's command over the runs the workers finished) and
    return its exit status; None when a stop request ended the workers first."""
    request = box.request
    serving = None
    if request.serving_on_modal and not request.keep_deployment:
        from pytest_modal_eval.serving.modal.apps import ModalCliApps

        serving = ServingApps(ModalCliApps())
    try:
        _start_and_wait(box, status)
        if box.stopped:
            return None
        _merge_sharded(box)
        box.leases.take([i.runs_dir for i in request.items], request.lock_timeout_s)
        box.calls.reload()
        box.log.say("every worker is done: the session's summary, gates and report")
        return last_pass()
    finally:
        if serving is not None:
            serving.stop_new(box.log.say)


def _start_and_wait(box: Container, status: SessionStatus) -> None:
    request, calls = box.request, box.calls
    # The secret settings' stand-ins in an answer key are keyed by the output directory's key
    # (runs.local_key): made and committed before any worker starts, and copied into each
    # shard's output directory, every shard's run has the benchmark's own answer key.
    local_key(box.root / OUTPUTS)
    calls.commit()
    started: dict[str, str] = dict(calls.get(workers_key(request.session_id)) or {})
    for worker in worker_plan(request):
        if worker["name"] in started:
            continue
        started[worker["name"]] = calls.spawn(request.app_name, WORKER, worker)
        calls.put(workers_key(request.session_id), started)
        box.log.say(f"worker {worker['name']} started ({started[worker['name']]})")
    status.update(workers={name: {"call": call} for name, call in started.items()})
    outcomes = _wait_for_workers(box, started, status)
    for name, outcome in sorted(outcomes.items()):
        box.log.say(f"worker {name}: {outcome}")


def _wait_for_workers(
    box: Container, started: dict[str, str], status: SessionStatus
) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    told_stop = False
    while len(outcomes) < len(started):
        for name, call in started.items():
            if name in outcomes:
                continue
            outcome = box.calls.poll(call)
            if outcome.over:
                value = outcome.value if isinstance(outcome.value, dict) else {}
                outcomes[name] = box.redactor.text(
                    f"exit status {value.get('exit_code')}"
                    if outcome.state == "done"
                    else f"{outcome.state}: {outcome.error or 'no result'}"
                )
                status.update(
                    workers={
                        **status.data.get("workers", {}),
                        name: {"call": call, "outcome": outcomes[name]},
                    }
                )
        reason = box.check()
        if reason is not None and not told_stop:
            told_stop = True  # the workers read the same stop request
            box.log.say(f"ending the workers: {reason}")
        if len(outcomes) < len(started):
            box.calls.commit()  # the log, for followers
            time.sleep(WORKER_POLL_S)
    return outcomes


def _merge_sharded(box: Container) -> None:
    from pytest_modal_eval.detach.shards import merge_shards

    for item in box.request.items:
        if item.shards <= 1:
            continue
        box.leases.take([item.runs_dir], box.request.lock_timeout_s)
        box.calls.reload()
        outputs = [
            box.root / shard_output(item.runs_dir, (k, item.shards))
            for k in range(1, item.shards + 1)
        ]
        merged = merge_shards(
            outputs, item.runs_dir, box.root / OUTPUTS, box.root / "shards" / item.runs_dir
        )
        for line in merged:
            box.log.say(line)
        box.calls.commit()

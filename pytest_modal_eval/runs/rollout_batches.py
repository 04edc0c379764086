"""Sending the examples a run still misses to verifiers: in batches by the rollouts each
misses, in dataset order or early stop's order, with verifiers' log in the run's directory."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pytest_modal_eval.client import verifiers_adapter
from pytest_modal_eval.client.answer_journal import AnswerJournal
from pytest_modal_eval.client.observe import EvalObserver
from pytest_modal_eval.client.workers import Intake
from pytest_modal_eval.runs.interrupt import run_interruptibly
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.request import RunRequest
from pytest_modal_eval.serving.endpoint import EndpointInfo

#: How much longer the client waits than the proxy's per-request deadline.
PROXY_DEADLINE_MARGIN_S = 30.0


#: The loggers whose records go to the run's log: verifiers' own, and the plugin's runner of
#: the bundled environments (client/native.py), which logs failed rollouts as verifiers does.
ROLLOUT_LOGGERS = ("verifiers", "pytest_modal_eval.rollouts")


@contextlib.contextmanager
def verifiers_log_to(path: Path) -> Any:
    """Send verifiers' own log records to the run's log file, not pytest's captured output.

    verifiers logs every failed rollout at ERROR level; thousands of those would bury the
    gate's short failure message, and they belong with the run anyway.
    """
    loggers = [logging.getLogger(name) for name in ROLLOUT_LOGGERS]
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # verifiers may have attached its own console handler (setup_logging); swap them all.
    previous = [(logger.propagate, logger.handlers[:]) for logger in loggers]
    for logger in loggers:
        logger.handlers = [handler]
        logger.propagate = False
    # HTTP clients log every request at INFO: noise next to the progress lines.
    client_logs = [logging.getLogger(name) for name in ("httpx", "httpx2")]
    client_levels = [client.level for client in client_logs]
    for client in client_logs:
        client.setLevel(max(client.level, logging.WARNING))
    try:
        yield
    finally:
        for logger, (propagate, handlers) in zip(loggers, previous, strict=True):
            logger.propagate, logger.handlers = propagate, handlers
        handler.close()
        for client, level in zip(client_logs, client_levels, strict=True):
            client.setLevel(level)


def run_grouped(
    run_dir: Path,
    env: Any,
    rows: Iterable[dict[str, Any]],
    still_missing: Sequence[int],
    request: RunRequest,
    info: EndpointInfo,
    sampling: dict[str, Any],
    handle: Callable[[int, list[dict[str, Any]]], None],
    should_stop: Callable[[], str | None],
    journal: AnswerJournal,
    rollout_indexes: Callable[[int], Sequence[int]],
    *,
    order: Sequence[int] | None = None,
    intake: Intake | None = None,
) -> None:
    """Run the examples still missing rollouts, in dataset order or in ``order`` (positions);
    once the ``intake`` closes (its ``keep_sending`` says no), no further example starts, those
    that sent nothing are dropped, and those whose requests went out finish."""
    intake = intake or Intake()
    config = request.benchmark.config
    log_route = None
    request_timeout = config.eval.request_timeout
    if info.proxied:
        # Our proxy writes this request's line to the run's own proxy.log, and ends a request
        # at eval.request_timeout with a 504 the client does not retry; the client waits a
        # little longer, so that the proxy's answer (not a client timeout) ends the request.
        log_route = {
            "X-Modal-Eval-Log": str(RunPaths(run_dir.resolve()).logs / "proxy.log"),
            "X-Modal-Eval-Deadline": f"{request_timeout:g}",
        }
        request_timeout += PROXY_DEADLINE_MARGIN_S
    # Examples missing different numbers of rollouts run as separate batches, so each
    # verifiers group is exactly the rollouts still missing. Each batch streams the rows.
    interrupt = threading.Event()

    def stop_reason() -> str | None:
        return "interrupted (Ctrl-C)" if interrupt.is_set() else should_stop()

    for group in sorted({m for m in still_missing if m}, reverse=True):
        if intake.closed:
            break
        batch: Iterable[dict[str, Any]]
        if order is None:
            batch = (row for row, m in zip(rows, still_missing, strict=True) if m == group)
        else:
            batch = _in_order(rows, order, still_missing, group)
        if request.observer is not None:
            batch = _told(batch, request.observer, rollout_indexes, group, intake)
        run_interruptibly(
            verifiers_adapter.run_examples(
                env,
                batch,
                endpoint=info.endpoint,
                sampling_args=sampling,
                rollouts=group,
                max_concurrent_requests=config.eval.max_concurrent,
                request_timeout=request_timeout,
                max_retries=config.eval.max_retries,
                on_example=handle,
                should_stop=stop_reason,
                extra_headers=log_route,
                prefetch=config.eval.prefetch,
                journal=journal,
                rollout_indexes=rollout_indexes,
                max_turns=config.eval.max_turns,
                intake=intake,
            ),
            interrupt,
        )


def _in_order(
    rows: Any, order: Sequence[int], still_missing: Sequence[int], group: int
) -> Iterator[dict[str, Any]]:
    """The rows missing ``group`` rollouts, in ``order`` (the workers' intake decides when to
    stop taking them)."""
    for position in order:
        if still_missing[position] == group:
            row: dict[str, Any] = rows[position]
            yield row


def _told(
    rows: Iterable[dict[str, Any]],
    observer: EvalObserver,
    rollout_indexes: Callable[[int], Sequence[int]],
    group: int,
    intake: Intake,
) -> Iterator[dict[str, Any]]:
    """The rows, the observer told of each as the client takes it to start its rollouts (none
    once the intake is closed: an example it would refuse never shows as started)."""
    for row in rows:
        if not intake.open():
            return
        example_id = int(row["example_id"])
        observer.example_started(example_id, list(rollout_indexes(example_id))[:group])
        yield row

"""What a run is, known before any server: the benchmark, the model, where runs live, who
evaluates it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_modal_eval.client.observe import EvalObserver
from pytest_modal_eval.config.loader import Benchmark
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.runs.early_stop import PairedGate, PendingPaired
from pytest_modal_eval.runs.identity import (
    ModelIdentity,
)
from pytest_modal_eval.runs.writer_lock import WriterSpec


@dataclass(frozen=True)
class RunRequest:
    """What a run is, known before any server: the benchmark, the model, where runs live."""

    benchmark: Benchmark
    model: str
    output_dir: Path
    index_key: str
    cache: Any  # pytest.Cache | None
    fresh: bool = False
    server: dict[str, Any] = field(default_factory=dict)  # the server profile asked for
    # The answer key's endpoint identity (the URL of a --base-url endpoint; None for servers
    # we start).
    endpoint_identity: str | None = None
    # For a server we start, which decides the chat template part of the key: whether it would
    # apply a finished run's recorded template. None: the key is known without a server.
    applies_template: Callable[[Any], bool] | None = None
    # ini overrides of the Modal GPU price table (USD per GPU-hour), for the cost estimate.
    gpu_prices: dict[str, float] = field(default_factory=dict)
    # Which weights answer (runs.identity); None: not asked, the key says nothing of them.
    identity: ModelIdentity | None = None
    # The session's secrets: nothing the run writes holds one (an error a server echoed a key
    # in is recorded without it).
    redactor: Redactor = field(default_factory=Redactor)
    # Why the gate cannot be decided early although gate.early_stop asks for it: a baseline or
    # reference comparison is still to be made that no sequence can decide. None: nothing open.
    comparison_open: str | None = None
    # The paired comparisons gate.early_stop decides with the gate (collect.early_comparisons),
    # some perhaps waiting for their other side (the reference model's run on another worker).
    paired: tuple[PairedGate | PendingPaired, ...] = ()
    # Who evaluates, for the run's lock (runs.writer_lock); None: this process, no waiting line.
    writer: WriterSpec | None = None
    # Who watches the run as it goes (the session's traces); None: nobody, nothing is told.
    observer: EvalObserver | None = None
    # --eval-shard (K, N): only the K-th of N contiguous shards of the selected examples.
    shard: tuple[int, int] | None = None
    # In a detached container: its CPU cores and memory (MiB), for the run's cost record.
    container: tuple[float, int] | None = None


def shard_slice(total: int, shard: tuple[int, int]) -> slice:
    """The examples (positions among ``total`` selected) of shard ``(K, N)``: the K-th of N
    contiguous, nearly equal parts, the same whichever machine asks."""
    k, n = shard
    return slice((k - 1) * total // n, k * total // n)

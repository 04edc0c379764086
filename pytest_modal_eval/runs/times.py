"""A run's two times, with one meaning each wherever they are shown.

- **Evaluation time** (``eval_s``; ``time_ms`` in ``metadata.json``, verifiers' name for it):
  the time spent evaluating the run's examples, from the first request to the last example
  scored, summed over every pytest session that evaluated some of them. Loading the
  environment, waiting for a server and judging the results are not in it.
- **Server time** (``server_startup_s``, ``server_s``): the start-up of the server the run
  waited for, and that start-up plus the time the run evaluated on the server, summed over the
  same sessions; on Modal, GPU-hours and cost derive from it (``serving/costs.py``).
- **Container time** (``container_s``; in ``metadata.json``'s ``serving.container``): in a
  detached session's CPU container, the time the run held it (its server wait and its
  evaluation), summed over the same sessions; its CPU core-hours derive from it.

A session that continues a run adds its share to what the run recorded; a session that only
reports a finished run (nothing to evaluate, no server) keeps what was recorded. The running
totals live in ``checkpoint_meta.json``, which outlives an interruption; ``metadata.json``
holds them once the run finishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_modal_eval.runs.paths import RunPaths


@dataclass(frozen=True)
class RecordedTimes:
    """What a run recorded before this session: evaluation and server seconds."""

    eval_s: float = 0.0
    server_startup_s: float = 0.0
    server_s: float = 0.0
    # metadata.json's serving record as written (checkpoint_meta.json's, before it finished)
    serving: dict[str, Any] | None = None
    container_s: float = 0.0
    # The detached container's (CPU cores, memory MiB) the recorded time was spent in.
    container_size: tuple[float, int] = (0.0, 0)

    @classmethod
    def read(cls, paths: RunPaths) -> RecordedTimes:
        """The run's totals: from ``metadata.json`` when it finished, else from
        ``checkpoint_meta.json`` (an interrupted run); zero for a new run."""
        metadata = paths.read_metadata()
        if metadata is not None:
            serving = metadata.get("serving")
            serving = serving if isinstance(serving, dict) else None
            time_ms = metadata.get("time_ms")
            container = (serving or {}).get("container")
            container = container if isinstance(container, dict) else {}
            return cls(
                eval_s=float(time_ms) / 1000 if isinstance(time_ms, (int, float)) else 0.0,
                server_startup_s=_seconds((serving or {}).get("server_startup_s")),
                server_s=_seconds((serving or {}).get("server_s")),
                serving=serving,
                container_s=_seconds(container.get("container_s")),
                container_size=_size([container.get("cpu"), container.get("memory_mib")]),
            )
        meta = paths.read_checkpoint_meta() or {}
        serving = meta.get("serving")
        return cls(
            serving=serving if isinstance(serving, dict) else None,
            eval_s=_seconds(meta.get("eval_s")),
            server_startup_s=_seconds(meta.get("server_startup_s")),
            server_s=_seconds(meta.get("server_s")),
            container_s=_seconds(meta.get("container_s")),
            container_size=_size(meta.get("container_size")),
        )


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _size(value: Any) -> tuple[float, int]:
    """A container's (CPU cores, memory MiB) as recorded; zeros when not."""
    if isinstance(value, list) and len(value) == 2:
        return _seconds(value[0]), int(_seconds(value[1]))
    return 0.0, 0

"""A sharded benchmark's shards merged into one run: the run a single container would have
written, so the session's last pass summarises, gates and reports it from one checkpoint.

Shard K of N evaluates the K-th contiguous part of the benchmark's selected examples
(``--eval-shard K/N``, ``runs/request.shard_slice``) in an output directory of its own, whose
run has the benchmark's own answer key (the examples keep their ids). The merge appends each
shard's checkpoint records to the run of the same answer key in the Volume's ``outputs/`` (a
new run when there is none); a record it holds already is not appended twice, so merging again
(a restarted controller) changes nothing. The statistics are then those of the merged records,
computed once by ``stats/summary.py``, never an average of the shards' means.

The run's recorded times (evaluation, server, container; GPU-hours) become its own from before
the first merge plus every shard's, kept in ``shards/<benchmark>--<model>/merged-<key>.json``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.runs.locate import runs_in
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.store import new_run_id, write_json_atomic, write_json_line_atomic
from pytest_modal_eval.runs.times import RecordedTimes

#: Figures of a serving record that add up over shards (the others are the same in each).
_SUMMED = ("server_startup_s", "server_s", "gpu_hours", "est_cost_usd")
_SUMMED_CONTAINER = ("container_s", "cpu_core_hours", "memory_gib_hours")


def merge_shards(shard_outputs: list[Path], runs_dir: str, outputs: Path, book: Path) -> list[str]:
    """Merge the runs under each of ``shard_outputs``' ``runs_dir`` into ``outputs/runs_dir``;
    a line for each run merged."""
    groups: dict[str, list[RunPaths]] = {}
    for output in shard_outputs:
        for run in runs_in(output / runs_dir):
            try:
                answer_hash = str((run.read_run_config() or {}).get("answer_hash") or "")
            except RunFileError:
                continue  # a damaged shard run is evaluated again by the last pass
            groups.setdefault(answer_hash, []).append(run)
    lines = []
    for answer_hash, runs in sorted(groups.items()):
        target = _target(outputs / runs_dir, answer_hash, runs)
        added = _append_records(target, runs)
        _write_meta(target, runs, book / f"merged-{answer_hash}.json")
        if added:
            target.discard_final_files()
        lines.append(
            f"merged {len(runs)} shard run(s) of {runs_dir} into run {target.run_id} "
            f"({added} new records)"
        )
    return lines


def _target(folder: Path, answer_hash: str, runs: list[RunPaths]) -> RunPaths:
    """The run of ``answer_hash`` in ``folder``, or a new one configured as the shards are."""
    for run in runs_in(folder):
        try:
            if (run.read_run_config() or {}).get("answer_hash") == answer_hash:
                return run
        except RunFileError:
            continue
    configs = [run.read_run_config() or {} for run in runs]
    run_id = new_run_id()
    target = RunPaths(folder / run_id)
    target.logs.mkdir(parents=True, exist_ok=True)
    config = dict(configs[0])
    config.update(
        run_id=run_id,
        checkpoint_dir=str(target.dir),
        num_examples=sum(int(c.get("num_examples") or 0) for c in configs),
        started_at=min(str(c.get("started_at") or "") for c in configs) or None,
    )
    write_json_atomic(target.run_config, config)
    return target


def _lines(path: Path) -> list[bytes]:
    """A checkpoint's whole lines (a torn last line is left out)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines(keepends=True)


def _append_records(target: RunPaths, runs: list[RunPaths]) -> int:
    held = {hashlib.sha1(line).digest() for line in _lines(target.checkpoint)}
    new: list[bytes] = []
    for run in runs:
        for line in _lines(run.checkpoint):
            digest = hashlib.sha1(line).digest()
            if digest not in held and line.strip():
                held.add(digest)
                new.append(line)
    if new:
        if target.checkpoint.exists():  # cut a torn last line, as a resumed run does
            data = target.checkpoint.read_bytes()
            if data and not data.endswith(b"\n"):
                target.checkpoint.write_bytes(data[: data.rfind(b"\n") + 1])
        with target.checkpoint.open("ab") as out:
            out.writelines(new)
    return len(new)


def _write_meta(target: RunPaths, runs: list[RunPaths], book: Path) -> None:
    """The merged run's progress and times: its own before the first merge, plus the shards'."""
    if book.exists():
        base = json.loads(book.read_text(encoding="utf-8"))
    else:
        base = _times(RecordedTimes.read(target))
        book.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(book, base)
    shards = [RecordedTimes.read(run) for run in runs]
    metas = [run.read_checkpoint_meta() or {} for run in runs]
    own = target.read_checkpoint_meta() or {}
    completed = sorted(
        {i for meta in [own, *metas] for i in meta.get("completed_example_ids") or ()}
    )
    total = sum(int(m.get("total_examples") or 0) for m in metas)
    meta: dict[str, Any] = {
        **(metas[0] if metas else {}),
        "run_id": target.run_id,
        "completed_example_ids": completed,
        "total_examples": max(total, int(own.get("total_examples") or 0)),
        "completed_rollouts": sum(int(m.get("completed_rollouts") or 0) for m in metas),
        "eval_s": round(base["eval_s"] + sum(t.eval_s for t in shards), 3),
        "server_startup_s": round(
            base["server_startup_s"] + sum(t.server_startup_s for t in shards), 3
        ),
        "server_s": round(base["server_s"] + sum(t.server_s for t in shards), 3),
        "serving": _summed([base.get("serving"), *(t.serving for t in shards)]),
    }
    container_s = base["container_s"] + sum(t.container_s for t in shards)
    if container_s:
        meta["container_s"] = round(container_s, 3)
        meta["container_size"] = list(
            next((t.container_size for t in shards if t.container_s), (0.0, 0))
        )
    write_json_line_atomic(target.checkpoint_meta, meta)


def _times(times: RecordedTimes) -> dict[str, Any]:
    return {
        "eval_s": times.eval_s,
        "server_startup_s": times.server_startup_s,
        "server_s": times.server_s,
        "container_s": times.container_s,
        "serving": times.serving,
    }


def _summed(records: list[Any]) -> dict[str, Any] | None:
    """Serving records added up: times, GPU-hours, cost, container time."""
    found = [r for r in records if isinstance(r, dict)]
    if not found:
        return None
    total: dict[str, Any] = dict(found[-1])
    for key in _SUMMED:
        values = [r[key] for r in found if isinstance(r.get(key), (int, float))]
        if values:
            total[key] = round(sum(values), 4)
    containers = [r["container"] for r in found if isinstance(r.get("container"), dict)]
    if containers:
        container = dict(containers[-1])
        for key in _SUMMED_CONTAINER:
            values = [c[key] for c in containers if isinstance(c.get(key), (int, float))]
            container[key] = round(sum(values), 4)
        total["container"] = container
    return total

"""Which run directory a benchmark continues: the answer-changing key and its index.

The index lives in pytest's cache provider (``config.cache``) under ``modal_eval/runs/...``,
one key per (benchmark item, model), written only by the process that runs that item, so
xdist workers never write the same key. It is written when a run *starts*, so a run killed
with SIGKILL is still found. With ``-p no:cacheprovider`` the output directory is scanned
for a run with the same key instead. ``--cache-clear`` or ``--eval-fresh`` start afresh.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.redact import mask_args, mask_mapping
from pytest_modal_eval.runs.locate import runs_in
from pytest_modal_eval.runs.paths import RunPaths

if TYPE_CHECKING:
    import pytest

CACHE_PREFIX = "modal_eval/runs"


def answer_fields(
    *,
    model: str,
    env_id: str,
    env_args: dict[str, Any],
    dataset_fingerprint: str,
    sampling: dict[str, Any],
    rollouts: int,
    chat_template: dict[str, str] | str | None,
    vllm: dict[str, Any],
    endpoint_identity: str | None,
    weights: dict[str, Any] | None = None,
    agent: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything that can change an answer, and nothing that cannot (GPU, timeouts, concurrency).

    ``num_examples`` is deliberately absent: examples are keyed by id, so a run over the
    first 100 examples is continued, not repeated, by a later run over all of them.
    ``weights`` is the identity of what answers beyond its name (``runs.identity``): the
    content digest of a local directory, the Hub commit, or what a ``--base-url`` endpoint says
    it serves; None when it could not be checked.
    """
    fields = {
        "model": model,
        "weights": weights,
        "endpoint": endpoint_identity,
        "env_id": env_id,
        "env_args": mask_mapping(env_args),
        "dataset": dataset_fingerprint,
        "sampling": sampling,
        "rollouts": rollouts,
        "chat_template": chat_template,
        "vllm": {
            **{k: vllm.get(k) for k in ("revision", "max_model_len", "dtype")},
            "extra_args": mask_args(extra) if (extra := vllm.get("extra_args")) else extra,
        },
    }
    if rollouts > 1 and sampling.get("seed") is not None:
        # Runs made when every rollout sent the same seed are not continued with distinct ones.
        fields["rollout_seeds"] = "seed + rollout index"
    if agent:
        # The harness and runtime that play the environment (the benchmark's agent section).
        fields["agent"] = agent
    return fields


def comparable_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The answer key without the identity of the model (its name, weights, Hub revision and
    endpoint): what two runs compared with each other (a baseline, another model) must share."""
    vllm = fields.get("vllm")
    return {
        **fields,
        "model": None,
        "endpoint": None,
        "weights": None,
        "vllm": {**vllm, "revision": None} if isinstance(vllm, dict) else vllm,
    }


def canonical_hash(value: Any, length: int = 16) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def fingerprint_rows(rows: Iterable[dict[str, Any]]) -> str:
    """Hash of the dataset as the model sees it (prompt, answer, info), order included."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(
            json.dumps(
                [row.get("example_id"), row.get("prompt"), row.get("answer"), row.get("info")],
                sort_keys=True,
                default=str,
            ).encode()
        )
    return digest.hexdigest()[:16]


def differing_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted names of the fields that differ between two answer-field records."""
    names: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            names += [f"{key}.{sub}" for sub in differing_fields(a, b)]
        elif a != b:
            names.append(key)
    return names


@dataclass(frozen=True)
class PriorRun:
    run_dir: Path
    run_id: str
    fields: dict[str, Any]
    complete: bool


class RunIndex:
    """Lookup and record of runs for one benchmark item and model."""

    def __init__(self, cache: pytest.Cache | None, item_key: str, benchmark_dir: Path) -> None:
        self.cache = cache
        self.key = f"{CACHE_PREFIX}/{item_key}"
        self.benchmark_dir = benchmark_dir  # {output}/{benchmark}--{org}--{model}

    def _entries(self) -> dict[str, dict[str, Any]]:
        value = None if self.cache is None else self.cache.get(self.key, None)
        if not isinstance(value, dict):
            # No cache provider, or no entry under this item's key (the cache was cleared, or
            # the item is named differently now, e.g. `bench--model` once several --model are
            # given): the run directories themselves are the index, so no finished work is lost.
            return self._scan()
        return dict(value.get("runs", {}))

    def _scan(self) -> dict[str, dict[str, Any]]:
        # No cache provider: the run directories themselves are the index.
        found: dict[str, dict[str, Any]] = {}
        for paths in runs_in(self.benchmark_dir):
            config_path = paths.run_config
            try:
                run_config = paths.read_run_config() or {}
            except RunFileError:  # a damaged run is not one to continue
                continue
            found[run_config.get("answer_hash", "")] = {
                "run_dir": str(config_path.parent),
                "run_id": run_config.get("run_id", config_path.parent.name),
                "fields": run_config.get("answer_fields", {}),
                "updated": config_path.stat().st_mtime,
            }
        return found

    def find(self, answer_hash: str) -> PriorRun | None:
        entry = self._entries().get(answer_hash)
        if entry is None or not Path(entry["run_dir"]).is_dir():
            return None
        return _prior(entry)

    def newest_alike(
        self,
        fields: dict[str, Any],
        ignore: frozenset[str],
        same_template: Callable[[Any], bool] | None = None,
    ) -> PriorRun | None:
        """The newest run whose answer fields equal ``fields`` but for those in ``ignore``,
        and whose recorded chat template passes ``same_template`` (when given).

        Two parts of the key may be unknown before a server starts: the chat template, which
        a started server decides (vLLM on Modal reads it from the model it downloads), and the
        weights, when the Hub or the endpoint could not be asked. This finds, without them, the
        run a server started now would continue. Only the newest such run counts: an older one
        may have been made under a template or weights since replaced.
        """
        wanted = _without(fields, ignore)
        found = [
            entry
            for entry in self._entries().values()
            if _without(entry.get("fields", {}), ignore) == wanted
            and (same_template is None or same_template(entry["fields"].get("chat_template")))
            and Path(entry["run_dir"]).is_dir()
        ]
        if not found:
            return None
        entry = max(found, key=lambda entry: entry.get("updated", 0))
        return _prior(entry)

    def newest(self, exclude: str) -> PriorRun | None:
        """The most recently updated run but the one keyed ``exclude``."""
        candidates = [
            entry
            for h, entry in self._entries().items()
            if h != exclude and Path(entry["run_dir"]).is_dir()
        ]
        if not candidates:
            return None
        return _prior(max(candidates, key=lambda entry: entry.get("updated", 0)))

    def latest_incomplete(self, exclude: str) -> PriorRun | None:
        candidates = [
            (entry.get("updated", 0), h, entry)
            for h, entry in self._entries().items()
            if h != exclude
            and Path(entry["run_dir"]).is_dir()
            and not RunPaths(Path(entry["run_dir"])).complete()
        ]
        if not candidates:
            return None
        _, _, entry = max(candidates, key=lambda c: c[0])
        return PriorRun(Path(entry["run_dir"]), entry["run_id"], entry["fields"], False)

    def record(self, answer_hash: str, run: PriorRun, updated: float) -> None:
        if self.cache is None:
            return
        entries = self._entries()
        entries[answer_hash] = {
            "run_dir": str(run.run_dir),
            "run_id": run.run_id,
            "fields": run.fields,
            "updated": updated,
        }
        self.cache.set(self.key, {"runs": entries})


def _without(fields: dict[str, Any], ignore: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if key not in ignore}


def _prior(entry: dict[str, Any]) -> PriorRun:
    run_dir = Path(entry["run_dir"])
    return PriorRun(run_dir, entry["run_id"], entry["fields"], RunPaths(run_dir).complete())

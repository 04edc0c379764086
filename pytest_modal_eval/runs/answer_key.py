"""What can change an answer: the fields of a run's answer key, their hash, and how two keys
differ. A run is continued only under the same key (:mod:`.resume`); two runs are compared
only when their keys agree but for who answered (:func:`comparable_fields`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from pytest_modal_eval.redact import comparable_stand_ins, mask_args, mask_mapping


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
    secret_key: bytes,
) -> dict[str, Any]:
    """Everything that can change an answer, and nothing that cannot (GPU, timeouts, concurrency).

    Secret settings are stand-ins (``redact.keyed``) under ``secret_key``, the output
    directory's (``runs.local_key``).

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
        "env_args": mask_mapping(env_args, secret_key),
        "dataset": dataset_fingerprint,
        "sampling": sampling,
        "rollouts": rollouts,
        "chat_template": chat_template,
        "vllm": {
            **{k: vllm.get(k) for k in ("revision", "max_model_len", "dtype")},
            "extra_args": mask_args(extra, secret_key)
            if (extra := vllm.get("extra_args"))
            else extra,
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
    endpoint) and without the secrets' values (each stand-in is alike: runs made under another
    output directory's key compare): what two runs compared with each other (a baseline,
    another model) must share."""
    fields = comparable_stand_ins(fields)
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

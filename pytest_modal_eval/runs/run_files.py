"""What a run writes about itself: ``run_config.json``, ``metadata.json``, the checkpoint's
meta, the server logs linked into it, and the versions and commit it was made with."""

from __future__ import annotations

import math
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from pytest_modal_eval.client import verifiers_adapter
from pytest_modal_eval.exceptions import EnvironmentLoadError, RunFileError
from pytest_modal_eval.redact import mask_config, mask_profile
from pytest_modal_eval.runs.outcome import RunOutcome
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.request import RunRequest
from pytest_modal_eval.runs.state import RunState
from pytest_modal_eval.runs.store import (
    CHECKPOINT_VERSION,
)
from pytest_modal_eval.serving.endpoint import EndpointInfo


def link_server_logs(server_logs: Path | None, run_logs: Path) -> None:
    """Make the shared server's logs (vllm.log, modal_vllm.log, ...) visible from the run.

    Server logs are per pytest session: a run continued in a later session links the log of
    the server answering it now."""
    if server_logs is None or not server_logs.is_dir():
        return
    for target in sorted(server_logs.glob("*.log")):
        link = run_logs / target.name
        if link.name == "proxy.log":
            continue
        if link.is_symlink():
            link.unlink()
        if not link.exists():
            link.symlink_to(target.resolve())


def checkpoint_meta(
    run_id: str,
    env_id: str,
    model: str,
    rollouts: int,
    state: RunState,
    total: int,
    start_time: str,
) -> dict[str, Any]:
    return {
        "checkpoint_version": CHECKPOINT_VERSION,
        "run_id": run_id,
        "env_id": env_id,
        "model": model,
        "rollouts_per_example": rollouts,
        "completed_example_ids": state.completed_id_array(),  # written in pieces
        "total_examples": total,
        "completed_rollouts": state.finished_rollouts,
        "start_time": start_time,
        "last_checkpoint_time": datetime.now(UTC).isoformat(),
    }


def metadata_json(
    request: RunRequest, outcome: RunOutcome, sampling: dict[str, Any]
) -> dict[str, Any]:
    summary = outcome.summary
    attempts = {"attempts": outcome.attempts} if outcome.attempts is not None else {}
    return {
        "env_id": request.benchmark.config.env_id,
        "benchmark": request.benchmark.name,
        "model": request.model,
        "run_id": outcome.run_id,
        "num_examples": outcome.n_selected,
        "rollouts_per_example": outcome.rollouts,
        "sampling_args": sampling,
        "time_ms": round(outcome.eval_s * 1000, 1),  # evaluation time (runs.times)
        "avg_reward": summary.mean if summary else None,
        "avg_metrics": outcome.metric_means,
        "pass_at_k": {
            p.name: {"mean": p.mean, "stderr": _finite(p.stderr)} for p in outcome.pass_at_k
        },
        "stderr": _finite(summary.stderr) if summary else None,
        "ci": [_finite(summary.ci_low), _finite(summary.ci_high)] if summary else None,
        "ci_level": summary.confidence if summary else None,
        "ci_method": summary.interval if summary else None,
        "n_evaluated": summary.n_examples if summary else 0,
        "errors": len(outcome.errored),
        "errored_example_ids": sorted(outcome.errored),
        "truncated_rollouts": outcome.truncated_rollouts,
        **attempts,  # a seat played several times per rollout (best-of-n's attempts)
        "resumed_examples": outcome.resumed_examples,
        "reused_answers": outcome.reused_answers,
        "answer_hash": outcome.answer_hash,
        "serving": outcome.serving,
        "early_stop": outcome.early_stop,
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def run_config_json(
    request: RunRequest,
    info: EndpointInfo,
    run_id: str,
    run_dir: Path,
    answer_hash: str,
    fields: dict[str, Any],
    slug: str,
    n_selected: int,
    secret_key: bytes,
) -> dict[str, Any]:
    """``secret_key``: the output directory's (``runs.local_key``), for the secret settings'
    stand-ins."""
    config = request.benchmark.config
    return {
        "run_id": run_id,
        "model_id": request.model,
        "model_slug": slug,
        "benchmark": request.benchmark.name,
        "benchmark_file": str(request.benchmark.path),
        "env_id": config.env_id,
        "server_profile": mask_profile(request.server, secret_key),
        "endpoint": info.endpoint.base_url,
        "chat_template": info.chat_template or None,
        "server_startup": (info.startup.phases or None) if info.startup else None,
        "sampling": config.sampling.model_dump(),
        "rollouts": config.eval.rollouts,
        "num_examples": n_selected,
        "config": mask_config(config.model_dump(mode="json"), secret_key),
        "answer_hash": answer_hash,
        "answer_fields": fields,
        "model_identity": (
            {**request.identity.record, "unchecked": request.identity.unchecked}
            if request.identity is not None
            else None
        ),
        "started_at": datetime.now(UTC).isoformat(),
        "checkpoint_dir": str(run_dir),
        "versions": _versions(),
        "git_commit": _git_commit(request.benchmark.path.parent),
    }


def verifiers_api(version: str | None = None) -> str:
    """``verifiers 0.4.0 (v1 API)``: the installed verifiers, or ``version``."""
    version = version or verifiers_adapter.installed_version()
    try:
        api = verifiers_adapter.api_for(version)
    except EnvironmentLoadError:
        return f"verifiers {version}"
    return f"verifiers {version} ({api} API)"


def other_verifiers_api(run_dir: Path) -> str | None:
    """The verifiers a run was started with (its ``run_config.json``), when its API is not the
    installed one; else None (the same API, or not recorded)."""
    try:
        made = (RunPaths(run_dir).read_run_config() or {})["versions"]["verifiers"]
    except (RunFileError, KeyError, TypeError):
        return None
    if not isinstance(made, str):
        return None
    installed = verifiers_adapter.installed_version()
    try:
        same = verifiers_adapter.api_for(made) == verifiers_adapter.api_for(installed)
    except EnvironmentLoadError:
        return None
    return None if same else verifiers_api(made)


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("pytest-modal-eval", "pytest", "verifiers", "modal", "openai", "vllm"):
        try:
            found[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return found


def _git_commit(directory: Path) -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None

"""Log finished runs to Weights & Biases: one W&B run per run of a benchmark x model, beside
MLflow (:mod:`.tracking`) and in the same shape.

The project is ``WANDB_PROJECT`` (default ``pytest-modal-eval``) and the entity
``WANDB_ENTITY`` (default: the key's own), as W&B reads them; ``WANDB_MODE=offline`` writes
the runs to disk for ``wandb sync`` later. Runs are written under ``WANDB_DIR``, else the
output directory (``outputs/evals/wandb/``).

Each W&B run holds its configuration (the parameters MLflow gets, the resolved benchmark
configuration nested), its summary (the figures MLflow gets as metrics: reward, standard
error, interval, pass@k, errors, time; and the gate's verdict, its reasons and threshold), a
per-example table (``per_example``: id, mean reward, the model's answer, the reference, status)
and the run's files as an artifact (``results.jsonl``, ``metadata.json``, ``run_config.json``,
any HTML report: the redacted copies). Everything is checked for the session's secrets
before W&B is handed it. Its id is the run's (``run id`` and configuration): a run logged
again online resumes the same W&B run.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.runs.example_status import example_status
from pytest_modal_eval.runs.messages import content_text
from pytest_modal_eval.share.bundle import SharedRun, shared_folder
from pytest_modal_eval.share.tracking import (
    IDENTITY_KEYS,
    RUN_ID_TAG,
    chat_template,
    run_metrics,
)

DEFAULT_PROJECT = "pytest-modal-eval"
INSTALL_HINT = "pip install 'pytest-modal-eval[wandb]'"
#: The per-example table's name (its key in the run's history and summary), and its columns.
TABLE_KEY = "per_example"
TABLE_COLUMNS = ["example_id", "reward", "answer", "reference", "status"]
#: Characters of an answer kept in the table (the whole text is in results.jsonl).
MAX_ANSWER = 2000


@dataclass(frozen=True)
class LoggedRun:
    config_name: str
    wandb_run_id: str
    mode: str  # "online" or "offline"
    where: str  # the run's page, or its offline directory


def require_wandb() -> None:
    """Fail at start-up, before any evaluation, when wandb is not installed (without
    importing it)."""
    if importlib.util.find_spec("wandb") is None:
        raise ShareError(f"--wandb needs wandb, which is not installed: {INSTALL_HINT}")


def run_id(run: SharedRun) -> str:
    """The W&B run id of a run: stable for the run and its configuration."""
    digest = hashlib.sha256(f"{run.config_name}\n{run.run_id}".encode()).hexdigest()
    return digest[:16]


def run_config(run: SharedRun) -> dict[str, Any]:
    """The W&B config: what MLflow's parameters hold, as values (W&B keeps numbers and nested
    configuration as such): the model's identity, the resolved configuration, versions."""
    rc = run.run_config
    config: dict[str, Any] = {key: rc[key] for key in IDENTITY_KEYS if rc.get(key) is not None}
    config.update(
        {
            RUN_ID_TAG: run.run_id,
            "model": run.model,
            "chat_template": chat_template(run),
            "config": rc.get("config") or {},
            "versions": rc.get("versions") or {},
        }
    )
    if rc.get("git_commit"):
        config["git_commit"] = rc["git_commit"]
    return config


def run_summary(run: SharedRun) -> dict[str, Any]:
    """The summary figures (MLflow's metrics), the interval and the gate's verdict."""
    summary: dict[str, Any] = dict(run_metrics(run))
    metadata = run.metadata
    for key in ("verdict", "threshold", "ci_method", "confidence"):
        if metadata.get(key) is not None:
            summary[key] = metadata[key]
    if metadata.get("gate_reasons"):
        summary["gate_reasons"] = list(metadata["gate_reasons"])
    return summary


def example_rows(run: SharedRun) -> list[list[Any]]:
    """One row per example: its id, mean reward over its rollouts (None when errored), the
    model's last reply in its first rollout, the reference answer, and its status."""
    by_example: dict[int, list[dict[str, Any]]] = {}
    for record in run.records():
        by_example.setdefault(int(record["example_id"]), []).append(record)
    rows = []
    for example_id, records in sorted(by_example.items()):
        records.sort(key=lambda r: int(r.get("rollout") or 0))
        error = next((r["error"] for r in records if r.get("error")), None)
        rewards = [float(r.get("reward") or 0.0) for r in records]
        status = example_status(rewards, None if error is None else str(error))
        reward = sum(rewards) / len(rewards) if error is None and rewards else None
        reference = records[0].get("answer")
        rows.append(
            [
                example_id,
                reward,
                final_answer(records[0].get("completion"))[:MAX_ANSWER],
                None if reference is None else str(reference),
                status,
            ]
        )
    return rows


def final_answer(completion: Any) -> str:
    """The text of the model's last reply in a completion (chat messages, or a string)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion if isinstance(completion, list) else []):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            return content_text(message.get("content"))
    return ""


def log_runs(runs: Sequence[SharedRun], *, output_dir: Path, redactor: Redactor) -> list[LoggedRun]:
    """One W&B run per finished run (see the module docstring)."""
    require_wandb()
    with warnings.catch_warnings(), _quiet_wandb():
        # wandb's own use of deprecated APIs is not the project's to fix; under its
        # `filterwarnings = error` those warnings would stop the logging.
        warnings.simplefilter("ignore", DeprecationWarning)
        return [_log_run(run, output_dir, redactor) for run in runs]


@contextlib.contextmanager
def _quiet_wandb() -> Iterator[None]:
    """No ``wandb:`` lines in pytest's terminal (its advice to install Weave, its artifact
    progress): the session says what was logged in its summary. W&B reads these variables
    when it sets itself up, in the first call; a user's own settings of them are kept."""
    quiet = {"WANDB_SILENT": "true", "WANDB_DISABLE_WEAVE": "true"}
    added = [name for name in quiet if name not in os.environ]
    os.environ.update({name: quiet[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def _log_run(run: SharedRun, output_dir: Path, redactor: Redactor) -> LoggedRun:
    import wandb

    config, summary, rows = run_config(run), run_summary(run), example_rows(run)
    name = run.config_name
    # Nothing W&B is handed may hold a secret (the files are checked as they are written).
    for part, value in (("config", config), ("summary", summary), ("examples", rows)):
        redactor.check(f"W&B {name} {part}", json.dumps(value, default=str).encode())
    folder = Path(os.environ.get("WANDB_DIR") or output_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(
        silent=True,
        console="off",  # the session's terminal is pytest's: never wrapped, never uploaded
        disable_git=True,
        save_code=False,
        x_disable_stats=True,
        disable_job_creation=True,
    )
    wandb_run = wandb.init(
        project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
        entity=os.environ.get("WANDB_ENTITY") or None,
        name=name,
        id=run_id(run),
        resume="allow",
        job_type="evaluation",
        group=run.benchmark,
        tags=[run.benchmark, run.model[:64]],
        config=config,
        dir=str(folder),
        settings=settings,
        reinit="create_new",
    )
    try:
        wandb_run.summary.update(summary)
        table = wandb.Table(columns=TABLE_COLUMNS, data=rows)  # type: ignore[arg-type]
        wandb_run.log({TABLE_KEY: table})
        artifact = wandb.Artifact(
            f"run-{run_id(run)}", type="evaluation_result", metadata={"run_id": run.run_id}
        )
        with shared_folder(run) as files:
            for path in sorted(files.iterdir()):
                redactor.check(f"W&B {name}/{path.name}", path.read_bytes())
            artifact.add_dir(str(files))
            wandb_run.log_artifact(artifact)
        mode = "offline" if wandb_run.offline else "online"
        where = wandb_run.dir if wandb_run.offline else (wandb_run.url or "")
        logged = LoggedRun(name, wandb_run.id, mode, str(where))
    finally:
        wandb_run.finish()
    return logged


def describe(logged: Sequence[LoggedRun]) -> str:
    if not logged:
        return "W&B: nothing logged"
    logged = sorted(logged, key=lambda r: r.config_name)  # in name order, however -n finished
    mode = logged[0].mode
    names = ", ".join(r.config_name for r in logged)
    if mode == "offline":
        runs = " ".join(str(Path(r.where).parent) for r in logged)  # …/offline-run-…/files
        return f"W&B (offline): logged {names}; upload with `wandb sync {runs}`"
    return f"W&B: logged {names} ({', '.join(r.where for r in logged if r.where)})"

"""Log finished runs to MLflow: one MLflow run per run of a benchmark x model.

The tracking URI is ``MLFLOW_TRACKING_URI``; without it, a SQLite store in the output directory
(``mlflow.db``, artifacts in ``mlartifacts/``). SQLite because MLflow 3 refuses to open a new
file store (``./mlruns``) unless told to, and recommends a database. The experiment is
``MLFLOW_EXPERIMENT_NAME``, else ``pytest-modal-eval``.

Each MLflow run holds parameters (the model's identity and the resolved configuration, flattened
to dotted names), metrics (reward, standard error, confidence bounds, pass@k when the run has
it, errors, time), artifacts (``results.jsonl``, ``metadata.json``, ``run_config.json`` and any
HTML report: the redacted copies) and tags (git commit, benchmark, model, run id). A run that is
already in the experiment (same run id and benchmark x model) is not logged again.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.share.bundle import SharedRun, shared_folder

DEFAULT_EXPERIMENT = "pytest-modal-eval"
RUN_ID_TAG = "modal_eval.run_id"
CONFIG_TAG = "modal_eval.config"
INSTALL_HINT = "pip install 'pytest-modal-eval[mlflow]'"
#: MLflow's limits: characters in a parameter value, parameters in one batch call.
MAX_PARAM_LENGTH = 6000
MAX_BATCH_PARAMS = 100
#: pass@k as metadata may carry it: ``pass@4``/``pass_at_4`` keys or a ``pass_at_k`` mapping.
_PASS_AT = re.compile(r"^pass(?:@|_at_)(\d+)$")
#: The fields of run_config.json that say which model and benchmark a run is (MLflow's
#: parameters, W&B's config).
IDENTITY_KEYS = (
    "model_id",
    "model_slug",
    "server_profile",
    "benchmark",
    "env_id",
    "rollouts",
    "num_examples",
    "answer_hash",
)
#: Characters MLflow refuses in metric names.
_NOT_IN_NAMES = re.compile(r"[^\w./ -]+")


@dataclass(frozen=True)
class LoggedRun:
    config_name: str
    mlflow_run_id: str
    new: bool  # False: it was in the experiment already and was left alone


def require_mlflow() -> None:
    """Fail at start-up, before any evaluation, when MLflow is not installed (without
    importing it: that takes seconds)."""
    if importlib.util.find_spec("mlflow") is None:
        raise ShareError(f"--mlflow needs MLflow, which is not installed: {INSTALL_HINT}")


def tracking_uri(environ: Mapping[str, str], output_dir: Path) -> str:
    uri = environ.get("MLFLOW_TRACKING_URI", "").strip()
    return uri or f"sqlite:///{output_dir.resolve() / 'mlflow.db'}"


def describe(logged: Sequence[LoggedRun], uri: str) -> str:
    new = [r.config_name for r in logged if r.new]
    old = [r.config_name for r in logged if not r.new]
    parts = []
    if new:
        parts.append(f"logged {', '.join(new)}")
    if old:
        parts.append(f"already had {', '.join(old)}")
    return f"MLflow ({_without_userinfo(uri)}): {'; '.join(parts)}"


def log_runs(
    runs: Sequence[SharedRun], uri: str, *, output_dir: Path, experiment: str | None = None
) -> list[LoggedRun]:
    require_mlflow()
    with warnings.catch_warnings():
        # MLflow's own use of deprecated SQLAlchemy and Pydantic APIs is not the project's to
        # fix; under its `filterwarnings = error` those warnings would stop the logging.
        warnings.simplefilter("ignore", DeprecationWarning)
        return _log_runs(runs, uri, output_dir, experiment)


def _log_runs(
    runs: Sequence[SharedRun], uri: str, output_dir: Path, experiment: str | None
) -> list[LoggedRun]:
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        experiment_id = existing.experiment_id
    else:
        # A local store keeps its artifacts beside it, not in the working directory.
        local = uri.startswith("sqlite:") and not os.environ.get("MLFLOW_TRACKING_URI")
        location = (output_dir.resolve() / "mlartifacts").as_uri() if local else None
        experiment_id = client.create_experiment(name, artifact_location=location)

    logged = []
    for run in runs:
        before = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{RUN_ID_TAG}` = {_quoted(run.run_id)} "
            f"and tags.`{CONFIG_TAG}` = {_quoted(run.config_name)}",
            max_results=1,
        )
        if before:
            logged.append(LoggedRun(run.config_name, before[0].info.run_id, new=False))
            continue
        mlflow_run = client.create_run(experiment_id, run_name=run.config_name, tags=run_tags(run))
        run_id = mlflow_run.info.run_id
        params = [Param(key, value) for key, value in run_params(run).items()]
        for start in range(0, len(params), MAX_BATCH_PARAMS):
            client.log_batch(run_id, params=params[start : start + MAX_BATCH_PARAMS])
        client.log_batch(
            run_id, metrics=[Metric(key, value, 0, 0) for key, value in run_metrics(run).items()]
        )
        with shared_folder(run) as folder:
            client.log_artifacts(run_id, str(folder))
        client.set_terminated(run_id, "FINISHED")
        logged.append(LoggedRun(run.config_name, run_id, new=True))
    return logged


def run_tags(run: SharedRun) -> dict[str, str]:
    tags = {
        RUN_ID_TAG: run.run_id,
        CONFIG_TAG: run.config_name,
        "modal_eval.benchmark": run.benchmark,
        "modal_eval.model": run.model,
    }
    commit = run.run_config.get("git_commit")
    if commit:
        tags["mlflow.source.git.commit"] = str(commit)
    return tags


def chat_template(run: SharedRun) -> str:
    return "custom" if run.run_config.get("chat_template") else "model's own"


def run_params(run: SharedRun) -> dict[str, str]:
    """The model's identity and the resolved configuration, flattened to dotted names."""
    rc = run.run_config
    params = {key: str(rc[key]) for key in IDENTITY_KEYS if rc.get(key) is not None}
    params["chat_template"] = chat_template(run)
    params.update(_flatten(rc.get("config") or {}, "config"))
    params.update(_flatten(rc.get("versions") or {}, "version"))
    return {key: value[:MAX_PARAM_LENGTH] for key, value in params.items()}


def run_metrics(run: SharedRun) -> dict[str, float]:
    m = run.metadata
    ci: list[Any] = m["ci"] if isinstance(m.get("ci"), list) else []
    time_ms = m.get("time_ms")
    found: dict[str, Any] = {
        "reward": m.get("avg_reward"),
        "stderr": m.get("stderr"),
        "ci_low": ci[0] if len(ci) == 2 else None,
        "ci_high": ci[1] if len(ci) == 2 else None,
        "errors": m.get("errors"),
        "truncated_rollouts": m.get("truncated_rollouts"),
        "examples": m.get("n_evaluated"),
        "rollouts_per_example": m.get("rollouts_per_example"),
        "time_s": time_ms / 1000 if isinstance(time_ms, (int, float)) else None,
    }
    for name, value in (m.get("avg_metrics") or {}).items():
        found[f"metric.{name}"] = value
    for key, value in m.items():
        match = _PASS_AT.match(str(key))
        if match:
            found[f"pass_at_{match.group(1)}"] = value
    pass_at = m.get("pass_at_k")
    if isinstance(pass_at, Mapping):
        for k, value in pass_at.items():
            found[f"pass_at_{k}"] = value
    return {
        _NOT_IN_NAMES.sub("_", key): float(value)
        for key, value in found.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }


def _flatten(value: Any, prefix: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            yield from _flatten(inner, f"{prefix}.{key}")
    else:
        yield prefix, value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _without_userinfo(uri: str) -> str:
    return re.sub(r"(?<=://)[^/@]+@", "", uri)

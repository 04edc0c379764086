"""``--push-to-hub``, ``--mlflow`` and ``--wandb``: share the session's finished runs when it
ends.

:class:`SessionShare` lives on the controller only (or in-process without xdist), driven by
its session's hooks: workers evaluate, the controller sees every benchmark item's report
(``run_dir`` crosses xdist in ``user_properties``) and shares once, when the session finishes
(the ``LFPlugin`` shape). What it needs (``HF_TOKEN``, MLflow or wandb installed) is checked by
:func:`configure` when the session is configured, before any evaluation spends time. A failed
push or log is reported in the summary and makes the exit status 1; it never hides the
evaluations' results.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.redact import Redactor

if TYPE_CHECKING:
    import pytest

PUSH_DEST = "modal_eval_push_to_hub"
PRIVATE_DEST = "modal_eval_hub_private"
MLFLOW_DEST = "modal_eval_mlflow"
WANDB_DEST = "modal_eval_wandb"


def _repo_id(value: str) -> str:
    """The option's ``type=``: argparse reports the error as ``argument --push-to-hub: ...``."""
    from pytest_modal_eval.share.hub import check_repo_id

    try:
        return check_repo_id(value)
    except ShareError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("modal-eval")
    group.addoption(
        "--push-to-hub",
        dest=PUSH_DEST,
        metavar="ORG/NAME",
        type=_repo_id,
        default=None,
        help="when the session ends, push its finished runs to this Hugging Face Hub dataset "
        "repository (one configuration per benchmark x model; token from HF_TOKEN). Pushing "
        "the same runs again changes nothing. Default: no push.",
    )
    group.addoption(
        "--hub-private",
        dest=PRIVATE_DEST,
        action="store_true",
        default=False,
        help="create the --push-to-hub repository private (an existing one keeps its "
        "visibility). Default: public.",
    )
    group.addoption(
        "--mlflow",
        dest=MLFLOW_DEST,
        action="store_true",
        default=False,
        help="when the session ends, log each finished run to MLflow at $MLFLOW_TRACKING_URI, "
        "else a SQLite store in the output directory. Needs pytest-modal-eval[mlflow]. "
        "Default: off.",
    )
    group.addoption(
        "--wandb",
        dest=WANDB_DEST,
        action="store_true",
        default=False,
        help="when the session ends, log each finished run to Weights & Biases: project "
        "$WANDB_PROJECT (else pytest-modal-eval), entity $WANDB_ENTITY; WANDB_MODE=offline "
        "writes the runs to disk. Needs pytest-modal-eval[wandb]. Default: off.",
    )


def configure(config: pytest.Config, output_dir: Path, redactor: Redactor) -> SessionShare | None:
    """The session's :class:`SessionShare` when asked for (None otherwise, and on an xdist
    worker); what it needs is checked here, before any run. Raises :class:`ShareError`, which
    the caller reports as a usage error."""
    repo_id: str | None = config.getoption(PUSH_DEST)
    use_mlflow: bool = config.getoption(MLFLOW_DEST)
    use_wandb: bool = config.getoption(WANDB_DEST)
    if config.getoption(PRIVATE_DEST) and not repo_id:
        raise ShareError("--hub-private needs --push-to-hub ORG/NAME")
    if not (repo_id or use_mlflow or use_wandb) or hasattr(config, "workerinput"):
        return None
    if config.option.collectonly:
        return None
    from pytest_modal_eval.share import hub, tracking, wandb_runs

    token = hub.hub_token(os.environ) if repo_id else None
    if use_mlflow:
        tracking.require_mlflow()
    if use_wandb:
        wandb_runs.require_wandb()
    return SessionShare(
        repo_id,
        bool(config.getoption(PRIVATE_DEST)),
        token,
        use_mlflow,
        output_dir,
        redactor,
        wandb=use_wandb,
    )


class SessionShare:
    """The session's finished runs, shared when it ends (see the module docstring)."""

    def __init__(
        self,
        repo_id: str | None,
        private: bool,
        token: str | None,
        mlflow: bool,
        output_dir: Path,
        redactor: Redactor,
        wandb: bool = False,
    ) -> None:
        self.redactor = redactor  # the session's: every secret value it holds
        self.repo_id = repo_id
        self.private = private
        self.token = token
        self.mlflow = mlflow
        self.wandb = wandb
        self.output_dir = output_dir
        self.run_dirs: dict[str, None] = {}
        self.lines: list[str] = []
        self.errors: set[str] = set()

    def add(self, report: pytest.TestReport) -> None:
        """A report, on the controller (and in-process): each benchmark item's run directory."""
        if report.when != "call" or hasattr(report, "context"):
            return
        run_dir = dict(report.user_properties).get("run_dir")
        if isinstance(run_dir, str):
            from pytest_modal_eval.runs.paths import reported_run_dir

            self.run_dirs[str(reported_run_dir(run_dir))] = None

    def share(self) -> bool:
        """Once on the controller, after every item: shares the finished runs. False when a
        push or log failed (the session's exit status then says so)."""
        from pytest_modal_eval.share import bundle, hub, tracking, wandb_runs

        redactor = self.redactor
        runs = []
        for run_dir in self.run_dirs:
            try:
                runs.append(bundle.load_run(Path(run_dir), redactor))
            except ShareError as exc:
                self.lines.append(f"not shared: {exc}")
        if not runs:
            self.lines.append("no finished runs to share")
            return True
        # A failure here is reported, not raised: the evaluations' own results stay visible.
        if self.repo_id and self.token:
            try:
                result = hub.push_runs(
                    runs,
                    self.repo_id,
                    token=self.token,
                    redactor=redactor,
                    private=self.private,
                    log_dir=self.output_dir / "logs",
                )
            except Exception as exc:
                self._fail(f"Hub: pushing to {self.repo_id} failed: {_reason(exc, redactor)}")
            else:
                self.lines.append(result.describe())
        if self.mlflow:
            uri = tracking.tracking_uri(os.environ, self.output_dir)
            try:
                logged = tracking.log_runs(runs, uri, output_dir=self.output_dir)
            except Exception as exc:
                self._fail(f"MLflow: logging failed: {_reason(exc, redactor)}")
            else:
                self.lines.append(tracking.describe(logged, uri))
        if self.wandb:
            try:
                wandb_logged = wandb_runs.log_runs(
                    runs, output_dir=self.output_dir, redactor=redactor
                )
            except Exception as exc:
                self._fail(f"W&B: logging failed: {_reason(exc, redactor)}")
            else:
                self.lines.append(wandb_runs.describe(wandb_logged))
        return not self.errors

    def _fail(self, message: str) -> None:
        self.errors.add(message)
        self.lines.append(message)

    def write(self, terminalreporter: Any) -> None:
        """On the controller, in the terminal summary (after :meth:`share`)."""
        if self.lines:
            terminalreporter.section("shared results")
            for line in self.lines:
                terminalreporter.write_line(line, red=line in self.errors)


def _reason(exc: Exception, redactor: Redactor) -> str:
    text = str(exc) if isinstance(exc, ShareError) else f"{type(exc).__name__}: {exc}"
    return redactor.text(text)

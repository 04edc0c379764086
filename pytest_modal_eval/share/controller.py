"""``--push-to-hub`` and ``--mlflow``: share the session's finished runs when it ends.

:class:`SharePlugin` is registered on the controller only (or in-process without xdist):
workers evaluate, the controller sees every benchmark item's report (``run_dir`` crosses xdist
in ``user_properties``) and shares once, in ``pytest_sessionfinish`` (the ``LFPlugin`` shape).
What it needs (``HF_TOKEN``, MLflow installed) is checked in ``pytest_configure``, before any
evaluation spends time. A failed push or log is reported in the summary and makes the exit
status 1; it never hides the evaluations' results.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.redact import Redactor

PUSH_DEST = "modal_eval_push_to_hub"
PRIVATE_DEST = "modal_eval_hub_private"
MLFLOW_DEST = "modal_eval_mlflow"
PLUGIN_NAME = "modal_eval_share"


def _repo_id(value: str) -> str:
    from pytest_modal_eval.share.hub import check_repo_id

    try:
        return check_repo_id(value)
    except ShareError as exc:
        raise pytest.UsageError(f"--push-to-hub: {exc}") from None


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


def configure(config: pytest.Config, output_dir: Path) -> None:
    """Register :class:`SharePlugin` when asked for; check what it needs before any run."""
    repo_id: str | None = config.getoption(PUSH_DEST)
    use_mlflow: bool = config.getoption(MLFLOW_DEST)
    if config.getoption(PRIVATE_DEST) and not repo_id:
        raise pytest.UsageError("--hub-private needs --push-to-hub ORG/NAME")
    if not (repo_id or use_mlflow) or hasattr(config, "workerinput"):
        return
    if config.option.collectonly:
        return
    from pytest_modal_eval.share import hub, tracking

    try:
        token = hub.hub_token(os.environ) if repo_id else None
        if use_mlflow:
            tracking.require_mlflow()
    except ShareError as exc:
        raise pytest.UsageError(str(exc)) from None
    plugin = SharePlugin(
        repo_id, bool(config.getoption(PRIVATE_DEST)), token, use_mlflow, output_dir
    )
    config.pluginmanager.register(plugin, PLUGIN_NAME)


class SharePlugin:
    def __init__(
        self, repo_id: str | None, private: bool, token: str | None, mlflow: bool, output_dir: Path
    ) -> None:
        self.repo_id = repo_id
        self.private = private
        self.token = token
        self.mlflow = mlflow
        self.output_dir = output_dir
        self.run_dirs: dict[str, None] = {}
        self.lines: list[str] = []
        self.errors: set[str] = set()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Runs on the controller (and in-process): each benchmark item's run directory."""
        if report.when != "call" or hasattr(report, "context"):
            return
        run_dir = dict(report.user_properties).get("run_dir")
        if isinstance(run_dir, str):
            self.run_dirs[run_dir] = None

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Runs once on the controller, after every item; shares the finished runs."""
        from pytest_modal_eval.share import bundle, hub, tracking

        redactor = Redactor.from_environ()
        runs = []
        for run_dir in self.run_dirs:
            try:
                runs.append(bundle.load_run(Path(run_dir), redactor))
            except ShareError as exc:
                self.lines.append(f"not shared: {exc}")
        if not runs:
            self.lines.append("no finished runs to share")
            return
        # A failure here is reported, not raised: the evaluations' own results stay visible.
        if self.repo_id and self.token:
            try:
                result = hub.push_runs(
                    runs, self.repo_id, token=self.token, redactor=redactor, private=self.private
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
        if self.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _fail(self, message: str) -> None:
        self.errors.add(message)
        self.lines.append(message)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Runs on the controller after :meth:`pytest_sessionfinish`."""
        if self.lines:
            terminalreporter.section("shared results")
            for line in self.lines:
                terminalreporter.write_line(line, red=line in self.errors)


def _reason(exc: Exception, redactor: Redactor) -> str:
    text = str(exc) if isinstance(exc, ShareError) else f"{type(exc).__name__}: {exc}"
    return redactor.text(text)

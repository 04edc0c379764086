"""The hooks of a ``--detach`` session where it was typed: collect here (so a mistake in a
benchmark shows at once), then hand the session to Modal instead of running it.

Registered instead of the :class:`~pytest_modal_eval.session.controller.ControllerSession`:
nothing is evaluated, served, reported or shared here. With ``--wait`` the session's output
follows here until it ends, and this pytest exits with its exit status, ``--junitxml`` written
from the session's own.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_modal_eval.collect.items import BenchmarkItem
from pytest_modal_eval.config.backends import backend
from pytest_modal_eval.exceptions import DetachError, ServingError
from pytest_modal_eval.model_names import model_slug
from pytest_modal_eval.redact import KNOWN_SECRET_VARIABLES, is_secret_name, secret_variables
from pytest_modal_eval.traces.settings import HEADER_VARIABLES

if TYPE_CHECKING:
    from pytest_modal_eval.collect.context import EvalContext
    from pytest_modal_eval.detach.launch import Handle, Launch
    from pytest_modal_eval.detach.modal_calls import ModalCalls
    from pytest_modal_eval.detach.request import PlannedItem

#: The name :class:`DetachedSession` is registered under.
DETACHED_PLUGIN = "modal_eval_detached"
#: Credentials that never travel: a Modal container has its own (and ignores these).
STAY_HERE = ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET")
#: Traces' and W&B's settings, read from the environment as their SDKs read them: they travel
#: to the container (a secret-looking one, or the OTLP headers, as a secret) so that
#: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``WANDB_MODE`` mean there what they mean here.
SETTING_PREFIXES = ("OTEL_", "WANDB_")
#: Paths of this machine, meaningless in the container (W&B's offline runs land in the run's
#: output directory, on the Volume, without them).
LOCAL_PATHS = (
    "WANDB_DIR",
    "WANDB_CACHE_DIR",
    "WANDB_CONFIG_DIR",
    "WANDB_DATA_DIR",
    "WANDB_ARTIFACT_DIR",
)


def traveling_settings(environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The ``OTEL_*`` / ``WANDB_*`` variables set here, as ``(secret ones, the others)``."""
    secret: list[str] = []
    plain: list[str] = []
    for name in sorted(environ):
        if not name.startswith(SETTING_PREFIXES) or name in LOCAL_PATHS or not environ[name]:
            continue
        hidden = is_secret_name(name) or name in HEADER_VARIABLES
        (secret if hidden else plain).append(name)
    return secret, plain


class DetachedSession:
    """Registered by ``plugin.pytest_configure`` with ``--detach``, on the controller."""

    def __init__(self, config: pytest.Config, context: EvalContext) -> None:
        self.config = config
        self.context = context
        self.items: list[BenchmarkItem] = []
        self.exit_code: int | None = None
        self.handle: Handle | None = None
        # With --wait and --junitxml: (Modal, the session's JUnit XML, where it goes here).
        self._junit: tuple[ModalCalls, str, Path] | None = None

    def _line(self, text: str, **markup: bool) -> None:
        writer = self.config.get_terminal_writer()
        writer.line(self.context.redactor.text(text), **markup)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Runs after collection: the benchmark items the session will fan out over."""
        self.items = [item for item in session.items if isinstance(item, BenchmarkItem)]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """Runs instead of pytest's own loop: start (or attach to) the session on Modal, then
        follow it with ``--wait``."""
        if self.config.option.collectonly:
            return None
        if session.testsfailed and not self.config.option.continue_on_collection_errors:
            return None  # pytest's own loop stops on the collection errors
        from pytest_modal_eval.detach.launch import start_or_attach
        from pytest_modal_eval.detach.modal_calls import ModalCalls
        from pytest_modal_eval.serving.modal.access import check_modal_access

        try:
            launch = self._launch()
            calls = ModalCalls(launch.volume)
            check_modal_access()  # in milliseconds, not after a minute of the SDK's retries
            self.handle = start_or_attach(launch, calls, lambda text: self._line(text))
        except (DetachError, ServingError) as exc:
            raise pytest.UsageError(str(exc)) from None
        self._say_handle(self.handle)
        settings = self.context.settings.detach
        if settings is not None and settings.wait:
            self._wait(calls, self.handle)
        # pytest's own "no tests ran" line would be about this machine, which ran none.
        self.config.option.verbose = min(self.config.option.verbose, -2)
        return True

    def _launch(self) -> Launch:
        from pytest_modal_eval.detach.launch import Launch
        from pytest_modal_eval.detach.request import (
            local_options_removed,
            relative_path,
            split_paths,
        )

        settings = self.context.settings
        detach = settings.detach
        assert detach is not None
        root = Path(self.config.rootpath).resolve()
        invocation = Path(self.config.invocation_params.dir).resolve()
        args = local_options_removed(self.config.invocation_params.args)
        redactor = self.context.redactor
        if any(redactor.text(arg) != arg for arg in args):
            raise DetachError(
                "--detach: an argument holds the value of a secret the session knows, and "
                "arguments travel to Modal as they are (and show in its logs): leave the value "
                "in its environment variable, which travels as a Modal secret"
            )
        given = list(getattr(self.config.option, "file_or_dir", None) or ())
        options, paths = split_paths(args, given)
        paths = [relative_path(path, root, invocation) for path in paths]
        names = {settings.api_key_env, *settings.secret_env, *detach.env, *KNOWN_SECRET_VARIABLES}
        for item in self.items:
            names.update(secret_variables(item.benchmark.config.env_args))
        secret_settings, plain_settings = traveling_settings(os.environ)
        names.update(secret_settings)
        return Launch(
            root=root,
            invocation=invocation,
            options=tuple(options),
            paths=tuple(paths),
            items=tuple(self._planned(item, root, invocation) for item in self.items),
            benchmark_dirs=tuple(sorted({item.path.parent for item in self.items})),
            output_dir=settings.output_dir,
            volume=detach.volume,
            cpu=detach.cpu,
            memory_mib=detach.memory_mib,
            secrets=detach.secrets,
            env_names=tuple(sorted(names - set(STAY_HERE))),
            setting_names=tuple(plain_settings),
            parallel=detach.parallel,
            junit=bool(getattr(self.config.option, "xmlpath", None)),
            lock_timeout_s=settings.lock_timeout_s,
            command=shlex.join(["pytest", *self.config.invocation_params.args]),
            serving_on_modal=backend(settings.backend).on_modal,
            keep_deployment=settings.keep_deployment,
        )

    def _planned(self, item: BenchmarkItem, root: Path, invocation: Path) -> PlannedItem:
        from pytest_modal_eval.detach.request import PlannedItem

        detach = self.context.settings.detach
        assert detach is not None and item.model is not None
        path, _, name = item.nodeid.partition("::")
        nodeid = f"{os.path.relpath(root / path, invocation)}::{name}"
        runs_dir = f"{item.benchmark.name}--{model_slug(item.model)}"
        shards = detach.shards_of(item.benchmark.name) if detach.parallel else 1
        return PlannedItem(nodeid, item.benchmark.name, item.model, runs_dir, shards)

    def _say_handle(self, handle: Handle) -> None:
        session = handle.session_id
        if handle.attached:
            self._line(f"attached: session {session} already runs this command on Modal", bold=True)
        else:
            self._line(f"detached: session {session} runs on Modal ({handle.app_name})", bold=True)
        self._line(f"  follow:   pytest-modal-eval logs -f {session}")
        self._line(f"  stop:     pytest-modal-eval stop {session}")
        self._line("  results:  pytest-modal-eval runs --remote; pytest-modal-eval pull RUN")

    def _wait(self, calls: ModalCalls, handle: Handle) -> None:
        from pytest_modal_eval.detach.follow import follow, pull_file
        from pytest_modal_eval.detach.layout import SessionFiles

        writer = self.config.get_terminal_writer()

        def write(text: str) -> None:
            writer.write(self.context.redactor.text(text))
            writer.flush()

        try:
            end = follow(calls, handle.session_id, handle.call_id, write)
        except DetachError as exc:
            raise pytest.UsageError(str(exc)) from None
        assert end is not None
        self.exit_code = end.exit_code
        if end.note:
            self._line(f"session {handle.session_id} {end.state}: {end.note}", red=True)
        xmlpath = getattr(self.config.option, "xmlpath", None)
        if xmlpath:
            self._junit = (calls, str(SessionFiles(handle.session_id).junit), Path(xmlpath))
        report = self.context.settings.report
        if report is not None and pull_file(
            calls, str(SessionFiles(handle.session_id).report), report
        ):
            self._line(f"evaluation report: {report} (the session's, from the Volume)")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Runs on this machine at the end: its exit status is the detached session's."""
        if self.exit_code is not None:
            try:
                session.exitstatus = pytest.ExitCode(self.exit_code)
            except ValueError:
                session.exitstatus = self.exit_code

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Runs last: the session's JUnit XML replaces the empty one pytest wrote here."""
        if self._junit is None:
            return
        from pytest_modal_eval.detach.follow import pull_file

        calls, remote, local = self._junit
        if not pull_file(calls, remote, local):
            sys.stderr.write(f"pytest-modal-eval: the session wrote no JUnit XML ({remote})\n")

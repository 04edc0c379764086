"""What the commands share for detached sessions (``--remote``, ``pull``, ``logs``, ``stop
SESSION``): which Volume, the way to Modal, and runs mirrored from the Volume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from pytest_modal_eval.detach.modal_calls import ModalCalls
    from pytest_modal_eval.runs.paths import RunPaths

F = TypeVar("F", bound=Callable[..., Any])


def remote_option(function: F) -> F:
    return click.option(
        "--remote",
        is_flag=True,
        help="read runs of detached sessions (pytest --detach) from their Modal Volume (a run "
        "not found in the output directory is looked for there); they are copied to a local "
        "cache first",
    )(function)


def volume_option(function: F) -> F:
    return click.option(
        "--volume",
        metavar="NAME",
        default=None,
        help="the Modal Volume of detached sessions. Default: ini modal_eval_detach_volume, "
        "else pytest-modal-eval-runs.",
    )(function)


def volume_name(given: str | None) -> str:
    from pytest_modal_eval.cli.project import Project
    from pytest_modal_eval.config.options import DEFAULT_DETACH_VOLUME

    if given:
        return given
    try:
        configured = Project.find().ini_str("modal_eval_detach_volume").strip()
    except Exception:  # an ini file pytest cannot read: the default Volume
        configured = ""
    return configured or DEFAULT_DETACH_VOLUME


def modal_calls(volume: str | None) -> ModalCalls:
    """Modal for the Volume, once it is known to be reachable (a ClickException otherwise)."""
    from pytest_modal_eval.detach.modal_calls import ModalCalls
    from pytest_modal_eval.exceptions import ServingError
    from pytest_modal_eval.serving.modal.access import check_modal_access

    try:
        check_modal_access()
    except ServingError as exc:
        raise click.ClickException(str(exc)) from None
    return ModalCalls(volume_name(volume))


class RemoteRuns:
    """The runs on a Volume, mirrored into a local cache as a command needs them; Modal is
    asked only once a run is looked for there."""

    def __init__(self, volume: str | None) -> None:
        self.volume = volume
        self._calls: ModalCalls | None = None

    @property
    def calls(self) -> ModalCalls:
        if self._calls is None:
            self._calls = modal_calls(self.volume)
        return self._calls

    def listing(self) -> Path:
        """The mirror of every remote run's small files (what ``runs`` lists), up to date."""
        from pytest_modal_eval.detach.mirror import Mirror, cache_dir, small_file

        cache = cache_dir(self.calls.volume_name)
        Mirror(self.calls, cache).sync(keep=small_file)
        return cache

    def run(self, run: str) -> RunPaths:
        """A remote run (its id, or a unique start of it) mirrored whole into the cache."""
        from pytest_modal_eval.detach.mirror import Mirror
        from pytest_modal_eval.runs.locate import find_run

        cache = self.listing()
        found = find_run(run, cache)
        Mirror(self.calls, cache).sync(found.dir.relative_to(cache).as_posix())
        return found


def find_run_here_or_remote(run: str, output: Path, remote: RemoteRuns | None) -> RunPaths:
    """A run named by a command: in the output directory, else (``remote``) on the Volume."""
    from pytest_modal_eval.runs.locate import RunNotFound, find_run

    try:
        return find_run(run, output)
    except RunNotFound:
        if remote is None:
            raise
    return remote.run(run)

"""Importing the framework a benchmark's environment needs (verifiers: seconds of CPU, most of
a small run), in the item's setup or beside a server's start-up.

A benchmark with no run to continue needs a server whatever its environment holds, so its
setup asks for the server first and imports the framework on a thread meanwhile: the import
costs nothing more than the start-up it waits for. A benchmark with a run to continue imports
first, loads its environment and reads its checkpoint, and asks for a server only if examples
are left; so does one whose environment may have judges or seats' endpoints of its own, which
are checked before a server is started for it (``collect/item_run.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from pytest_modal_eval import phases
from pytest_modal_eval.client import verifiers_adapter
from pytest_modal_eval.config.schema import BenchmarkConfig
from pytest_modal_eval.exceptions import EnvironmentLoadError

log = logging.getLogger("pytest_modal_eval")


def imported(config: BenchmarkConfig) -> bool:
    """Whether what plays ``config``'s environment is imported already (or needs no import:
    the plugin plays it itself)."""
    try:
        return verifiers_adapter.framework_imported(
            config.env_id, config.env_args, config.agent.model_dump()
        )
    except EnvironmentLoadError:
        return True  # nothing to import: the environment's load says why, in its place


def import_framework(name: str, config: BenchmarkConfig) -> None:
    """Import the framework ``config``'s environment needs, as the status line
    ``NAME: importing verifiers`` says; a framework that cannot be imported is said when the
    environment loads, in its place."""
    if imported(config):
        return
    with (
        phases.phase(f"{name}: importing verifiers"),
        contextlib.suppress(EnvironmentLoadError, ImportError),
    ):
        verifiers_adapter.import_framework(
            config.env_id, config.env_args, config.agent.model_dump()
        )


@contextlib.contextmanager
def importing_beside(name: str, config: BenchmarkConfig) -> Iterator[None]:
    """Import the framework on a thread while the block runs (a server starting); the block's
    end waits for the import. Whatever fails on the thread is left for :func:`import_framework`
    to meet again in its place (a module whose import needs the main thread, say)."""

    def run() -> None:
        try:
            import_framework(name, config)
        except Exception as exc:
            log.debug("importing the framework beside the server's start-up: %r", exc)

    thread = threading.Thread(target=run, name="pytest-modal-eval-import", daemon=True)
    thread.start()
    yield  # an exception (Ctrl-C) leaves the daemon thread to the process's end
    thread.join()

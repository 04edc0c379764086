"""What Ctrl-C leaves behind, said after pytest's "KeyboardInterrupt" block: the examples each
interrupted run keeps and the command that continues it."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from pytest_modal_eval.terminal_text import escape

if TYPE_CHECKING:
    import pytest

    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.runs.outcome import Interrupted


#: Under xdist, where the interrupted runs were the workers'.
WORKERS_KEPT = (
    "examples finished before the interruption are kept in their runs "
    "(pytest-modal-eval runs lists them)"
)


def continue_command(config: pytest.Config) -> str:
    """The command that continues the session: the same one (runs resume where they stopped)."""
    return shlex.join(["pytest", *config.invocation_params.args])


def kept_line(benchmark: str, model: str, stopped: Interrupted) -> str:
    """``alpha (org/x): 43/200 examples kept in run ID``."""
    kept = f"{stopped.kept}/{stopped.total}"
    return f"{benchmark} ({model}): {kept} examples kept in run {stopped.run_id}"


class InterruptNotice:
    """Driven on the controller (and in-process) by its session: once pytest has reported the
    interruption, one line per interrupted run, then how to continue.

    ``lines`` is filled by the process that ran the interrupted item (``collect/item_run``);
    under xdist that is a worker, whose lines do not reach here: the controller then says
    that the workers' finished examples are kept, and the command.
    """

    def __init__(self, config: pytest.Config, lines: list[str], redactor: Redactor) -> None:
        self.config = config
        self.lines = lines
        self.redactor = redactor

    def _write(self, reporter: pytest.TerminalReporter, line: str) -> None:
        """As every other line the plugin prints: secrets redacted, control characters shown."""
        reporter.write_line(escape(self.redactor.text(line)))

    def write(self, reporter: pytest.TerminalReporter, *, workers: bool = False) -> None:
        """After pytest's report of an interrupted session: the kept examples and the command.
        ``workers``: the session ran items on xdist workers, whose runs this process does not
        know; it says that their finished examples are kept."""
        if self.lines:
            for line in self.lines:
                self._write(reporter, line)
        elif workers:
            self._write(reporter, WORKERS_KEPT)
        else:
            return
        self._write(reporter, f"run the same command to continue: {continue_command(self.config)}")

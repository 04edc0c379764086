"""Secrets out of what pytest itself prints and writes: test reports and log records.

Every report of every test (a benchmark item, each example's subtest report, a collection
error, any other test of the session) passes :meth:`RedactedOutput.redact_report` (called by
the session's report hooks, ahead of the other implementations) before the terminal, JUnit
XML, the session's other plugins or xdist's channel to the controller read it, so its failure text,
captured output and logs and ``user_properties`` are redacted once, where it is made. Log
records are redacted as they are created (a log record factory), so no handler -- pytest's
live log and ``--log-file``, the captured-log sections, the run's ``logs/verifiers.log`` --
receives a secret.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.redact import Redactor, redact

if TYPE_CHECKING:
    import warnings

    import pytest


class RedactedOutput:
    """Driven in every process (controller, xdist worker, or the only one) by
    :class:`~pytest_modal_eval.session.worker.WorkerSession`."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._previous: Any = None

    def install(self) -> None:
        """Log records are redacted from now on (see the module docstring)."""
        if self._previous is not None:
            return
        previous = logging.getLogRecordFactory()
        redactor = self.redactor

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record: logging.LogRecord = previous(*args, **kwargs)
            redact(record, redactor)
            return record

        self._previous = previous
        logging.setLogRecordFactory(factory)

    def uninstall(self) -> None:
        """The log record factory before :meth:`install` comes back."""
        if self._previous is not None:
            logging.setLogRecordFactory(self._previous)
            self._previous = None

    def redact_internal_error(self, excrepr: object) -> None:
        """An internal error's traceback, redacted in place."""
        _redact_fields(excrepr, self.redactor.text)

    def redact_warning(self, warning_message: warnings.WarningMessage) -> None:
        """A recorded warning's message, redacted in place."""
        message = warning_message.message
        shown = str(message)
        clean = self.redactor.text(shown)
        if clean == shown:
            return
        if isinstance(message, Warning):
            message.args = (clean,)  # keeps the warning's class
        if str(message) != clean:
            warning_message.message = Warning(clean)

    def redact_report(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        text = self.redactor.text
        longrepr = report.longrepr
        if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
            path, line, reason = longrepr
            report.longrepr = (path, line, text(reason))
        elif longrepr is not None:
            # The rendered text, as the terminal and JUnit XML write it; only a report that
            # holds a secret loses its structured form (and its colours).
            rendered = str(longrepr)
            if text(rendered) != rendered:
                report.longrepr = text(rendered)
        report.sections = [(title, text(content)) for title, content in report.sections]
        # A test's report has user_properties (its own list), a collector's has none.
        properties: list[tuple[str, object]] | None = getattr(report, "user_properties", None)
        if properties is not None:
            properties[:] = [
                (name, text(value) if isinstance(value, str) else value)
                for name, value in properties
            ]


def _redact_fields(value: Any, text: Callable[[str], str]) -> Any:
    """``value`` with its strings redacted: a dataclass (pytest's traceback representations are
    dataclasses of strings, lists and tuples) is changed in place, a list or tuple copied."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_redact_fields(item, text) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            current = getattr(value, field.name)
            setattr(value, field.name, _redact_fields(current, text))
    return value

"""The stand-in's ``modal.exception``: the errors the code under test may meet."""

from __future__ import annotations


class Error(Exception):
    pass


class AuthError(Error):
    """A token Modal does not accept."""


class ConnectionError(Error):
    """Modal's server could not be reached."""


class NotFoundError(Error):
    """An object (a Volume, a Function, a Secret) that does not exist."""


class ExecutionError(Error):
    """A call that failed or was cancelled."""


class InvalidError(Error):
    """Settings Modal refuses."""


class OutputExpiredError(Error):
    """A call's result that is no longer kept."""


class InputCancellation(BaseException):
    """Raised in a function whose input was cancelled."""

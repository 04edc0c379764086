"""The stand-in's ``modal.exception``: the errors the code under test may meet."""

from __future__ import annotations


class Error(Exception):
    pass


class AuthError(Error):
    """A token Modal does not accept."""


class ConnectionError(Error):
    """Modal's server could not be reached."""

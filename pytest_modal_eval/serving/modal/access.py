"""Whether Modal can be asked from here, found out without waiting on Modal's retries.

With no token the first remote call fails at once; with a token but no route to Modal's server
the SDK retries for about a minute before giving up. A command that only lists or ends things
checks both first: the token in Modal's configuration (``MODAL_TOKEN_ID`` /
``MODAL_TOKEN_SECRET`` or ``~/.modal.toml``) and one TCP connection to its ``server_url``.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

from pytest_modal_eval.exceptions import ServingError

NO_TOKEN = (
    "no Modal token is configured: run `modal token new` "
    "(or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)"
)


def in_modal_container() -> bool:
    """Whether this process runs in a Modal container (a detached session's runner, or a
    process it started): the SDK then uses the container's own credentials, and no token is
    configured. ``MODAL_IS_REMOTE`` is what the SDK itself reads for this (``modal.config``)."""
    return os.environ.get("MODAL_IS_REMOTE") == "1"


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the URL's host opens (no request is sent)."""
    parsed = urlparse(url)
    if not parsed.hostname:
        return False
    try:
        port = parsed.port or (443 if parsed.scheme in ("https", "grpcs") else 80)
    except ValueError:  # a port that is not a number
        return False
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def check_modal_access() -> None:
    """Raise :class:`ServingError` (one line) when no token is configured or Modal's server
    cannot be reached."""
    import modal.config

    if in_modal_container():
        return
    config = modal.config.config
    if not (config.get("token_id") and config.get("token_secret")):
        raise ServingError(NO_TOKEN)
    server = str(config.get("server_url"))
    if not reachable(server):
        raise ServingError(
            f"Modal is not reachable: no connection to {server}; check the network "
            "(or MODAL_SERVER_URL) and try again"
        )

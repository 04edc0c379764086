"""The stand-in's ``modal.config``: a configured token (it never leaves this machine) and a
``server_url`` on a closed local port, so nothing here can reach Modal; a test that wants the
server reachable points it at a local listener (``MODAL_SERVER_URL``, as for the SDK)."""

from __future__ import annotations

import os

config = {
    "token_id": "ak-stand-in",
    "token_secret": "as-stand-in",
    "server_url": os.environ.get("MODAL_SERVER_URL") or "http://127.0.0.1:9",
}

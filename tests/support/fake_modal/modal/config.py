"""The stand-in's ``modal.config``: a configured token (it never leaves this machine)."""

from __future__ import annotations

config = {"token_id": "ak-stand-in", "token_secret": "as-stand-in"}

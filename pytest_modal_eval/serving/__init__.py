"""Serving backends: start a vLLM server for a model and hand back an OpenAI-compatible endpoint.

Deliberately import-light: the Modal container imports this package (through
``serving.modal.app``) with only vLLM's dependencies installed, so nothing here may pull in
pytest, httpx or the proxy at import time. Import the backends from their own modules.
"""

from __future__ import annotations

from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.serving.endpoint import Endpoint, Server, ServerProfile

__all__ = ["Endpoint", "Server", "ServerProfile", "ServingError"]

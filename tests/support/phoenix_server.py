"""Arize Phoenix, the trace UI users run, started from its own environment for the
``phoenix`` tier: where it is (``MODAL_EVAL_PHOENIX``, the environment's Python), skip or fail
(``MODAL_EVAL_REQUIRE_PHOENIX``, set by ``scripts/test.sh``), starting ``phoenix serve`` on
free ports of 127.0.0.1, and its REST API's spans.

Phoenix is never imported here nor by the plugin: it is large (about 830 MB with its
dependencies) and ``import phoenix`` starts much of its server; ``scripts/setup.sh`` installs it
into ``.venv-phoenix``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

PYTHON_ENV = "MODAL_EVAL_PHOENIX"
REQUIRE_ENV = "MODAL_EVAL_REQUIRE_PHOENIX"
#: Seconds Phoenix may take to start: its first start creates its database (minutes here).
START_TIMEOUT_S = 900


def phoenix_python() -> str:
    """Phoenix's interpreter; skips the calling test, or fails it when the tier is required."""
    python = os.environ.get(PYTHON_ENV)
    problem = None
    if not python:
        problem = f"{PYTHON_ENV} is not set (bash scripts/setup.sh installs Phoenix)"
    elif not Path(python).is_file():
        problem = f"{PYTHON_ENV}={python} is not a file"
    if problem is None:
        assert python is not None
        return python
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{problem}; {REQUIRE_ENV} is set, so the Phoenix tier may not skip")
    pytest.skip(problem)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Phoenix:
    """A ``phoenix serve`` process with its database in ``working_dir``."""

    def __init__(self, python: str, working_dir: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = working_dir / "phoenix.log"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))},
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(_free_port()),
            "PHOENIX_WORKING_DIR": str(working_dir),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        bin_dir = Path(python).parent
        command = [str(bin_dir / "phoenix"), "serve"]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=working_dir
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"phoenix exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"phoenix did not start in {START_TIMEOUT_S} s: {self.log}")

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of ``project`` through the REST API, following its cursor."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            answer = httpx.get(f"{self.url}/v1/projects/{project}/spans", params=params, timeout=60)
            if answer.status_code == 404:
                return []  # no span of the project has arrived yet
            answer.raise_for_status()
            body = answer.json()
            found += body["data"]
            cursor = body.get("next_cursor")
            if not cursor:
                return found

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

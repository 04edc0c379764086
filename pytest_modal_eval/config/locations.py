"""Where the plugin's settings come from, for paths, and where its servers' logs go in the
output directory: shared by the plugin and the command line.

Import-light on purpose (the command line resolves the output directory before importing
pytest or pydantic).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

DEFAULT_OUTPUT_DIR = "outputs/evals"
#: The output directory's subdirectory for servers' logs, beside the runs (each run links the
#: log of the server that answered it into its own ``logs/``, ``runs/paths.LOGS``).
SERVER_LOGS = "logs"


def output_dir_from(
    option: str | None,
    ini: Callable[[], str | None],
    invocation_dir: Path,
    environ: Mapping[str, str],
) -> Path:
    """--eval-output-dir, else $MODAL_EVAL_OUTPUT_DIR, else the ini key, else the default;
    relative to the directory pytest (or the command line) was started in. The one rule, for
    the plugin and every command; ``ini`` is called only when it decides (the command line
    then looks for the ini file)."""
    output = Path(
        option or environ.get("MODAL_EVAL_OUTPUT_DIR") or ini() or DEFAULT_OUTPUT_DIR
    ).expanduser()
    return output if output.is_absolute() else invocation_dir / output


def server_logs_dir(output_dir: Path) -> Path:
    """Where the servers of ``output_dir``'s runs write their logs: a directory per pytest
    session (:func:`session_logs_dir`) and per ``pytest-modal-eval deploy``."""
    return output_dir / SERVER_LOGS


def session_logs_dir(output_dir: Path) -> Path:
    """Where this session's servers write their logs: a directory of its own (named by its UTC
    start), so a failed start shows this session's lines and each run's log links keep
    pointing at the log of the server that answered it."""
    return server_logs_dir(output_dir) / f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def vllm_python_from(option: str | None, ini: str | None, environ: Mapping[str, str]) -> str:
    """--vllm-python, else $MODAL_EVAL_VLLM_PYTHON, else the ini key; "" when none names one
    (then :func:`vllm_interpreter` runs vLLM with this interpreter). The one rule, for the
    plugin and ``doctor``."""
    return option or environ.get("MODAL_EVAL_VLLM_PYTHON") or ini or ""


def vllm_interpreter(named: str) -> str:
    """The interpreter that runs vLLM: the one :func:`vllm_python_from` found, else this one."""
    return named or sys.executable

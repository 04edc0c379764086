"""Where the plugin's settings come from, for paths: shared by the plugin and the command line.

Import-light on purpose (the command line resolves the output directory before importing
pytest or pydantic).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

DEFAULT_OUTPUT_DIR = "outputs/evals"


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


def vllm_python_from(option: str | None, ini: str | None, environ: Mapping[str, str]) -> str:
    """--vllm-python, else $MODAL_EVAL_VLLM_PYTHON, else the ini key; "" when none names one
    (then :func:`vllm_interpreter` runs vLLM with this interpreter). The one rule, for the
    plugin and ``doctor``."""
    return option or environ.get("MODAL_EVAL_VLLM_PYTHON") or ini or ""


def vllm_interpreter(named: str) -> str:
    """The interpreter that runs vLLM: the one :func:`vllm_python_from` found, else this one."""
    return named or sys.executable

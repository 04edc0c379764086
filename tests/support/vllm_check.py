"""The real-vLLM tier's entry checks, in one place: which interpreter, skip or fail, the model.

Tests marked ``vllm`` get their interpreter from :func:`vllm_python`. Without a usable one
(``MODAL_EVAL_VLLM_PYTHON`` unset, not runnable, or unable to ``import vllm``) they are skipped
with the reason, except when ``MODAL_EVAL_REQUIRE_VLLM`` is set (CI: ``scripts/test.sh``), where
they fail instead, so the tier can never go green by not running.

    def test_something() -> None:
        python = vllm_check.vllm_python()

Call it in the test body: from a fixture, ``pytest.fail`` is reported as an error at setup
rather than as a failed test. The probe is cached per process, so calling it often is free.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock

PYTHON_ENV = "MODAL_EVAL_VLLM_PYTHON"
REQUIRE_ENV = "MODAL_EVAL_REQUIRE_VLLM"
REPO = Path(__file__).resolve().parent.parent.parent
FAKE_VLLM_ROOT = REPO / "tests" / "support" / "fake_vllm"
MAKE_MODEL = REPO / "scripts" / "make_demo_model.py"
# Where the untrained model is cached (shared with tests/test_local_vllm.py's own copy).
MODEL_CACHE_DIR = "modal-eval-tiny-model"
# Prints where vllm comes from: the fast tests' stand-in must not pass for the real thing.
_PROBE = "import vllm, sys; sys.stdout.write(vllm.__file__ or '')"


def required() -> bool:
    """True when a missing vLLM must fail the tier instead of skipping it."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


@functools.cache
def _problem(python: str | None) -> str | None:
    """Why ``python`` cannot run vLLM, or None. Cached: importing vllm takes ~8 s."""
    if not python:
        return f"{PYTHON_ENV} is not set (an interpreter with vLLM's CPU build; see README)"
    try:
        probe = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{PYTHON_ENV}={python} cannot be run: {exc}"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"{PYTHON_ENV}={python} cannot import vllm: {last}"
    if Path(probe.stdout.strip()).resolve().is_relative_to(FAKE_VLLM_ROOT):
        return f"{PYTHON_ENV}={python} imports the test stand-in {probe.stdout.strip()}"
    return None


def vllm_python() -> str:
    """The vLLM interpreter; skips the calling test, or fails it when the tier is required."""
    python = os.environ.get(PYTHON_ENV)
    problem = _problem(python)
    if problem is None:
        assert python is not None
        return python
    if required():
        pytest.fail(
            f"{problem}; {REQUIRE_ENV} is set, so the vLLM tier may not skip", pytrace=False
        )
    pytest.skip(problem)


def untrained_demo_model(python: str, cache: pytest.Cache | None, fallback_root: Path) -> Path:
    """An untrained model of the demo's shape (``make_demo_model.py --steps 0``), built once.

    Cached under ``.pytest_cache`` keyed by the script's hash, and built under a file lock, so
    xdist workers and test modules share one build (~10 s). ``fallback_root`` is used when the
    cache provider is disabled.
    """
    digest = hashlib.sha256(MAKE_MODEL.read_bytes()).hexdigest()[:12]
    root = Path(cache.mkdir(MODEL_CACHE_DIR)) if cache is not None else fallback_root
    out = root / digest
    with FileLock(str(root / "build.lock")):
        if not (out / "config.json").exists():
            partial = root / f"{digest}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            result = subprocess.run(
                [python, str(MAKE_MODEL), "--steps", "0", "--out", str(partial)],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert result.returncode == 0, f"make_demo_model failed:\n{result.stderr[-3000:]}"
            partial.rename(out)
    return out

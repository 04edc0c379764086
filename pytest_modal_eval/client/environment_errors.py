"""An error raised while an environment loads, told in one line the user can act on.

An environment's own code (its module, its loader, its dataset reading) can raise anything; the
benchmark's error then names the environment, what was being done, the exception and the line
of the environment's code that raised it, not a traceback through pytest, verifiers and this
plugin. An error verifiers raises itself (a module without ``__all__``, ...) already says what
to do and is passed on as it is.
"""

from __future__ import annotations

import importlib.util
import os
import sysconfig
import traceback
from pathlib import Path

import pytest_modal_eval
from pytest_modal_eval.exceptions import EnvironmentLoadError


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # finds without importing
    return Path(spec.origin).parent if spec is not None and spec.origin else None


#: Code that is not the environment's: the standard library, verifiers, this plugin.
_NOT_THE_ENVIRONMENTS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in (
        sysconfig.get_paths()["stdlib"],
        _package_dir("verifiers"),
        Path(pytest_modal_eval.__file__).parent,
    )
    if p is not None
)


def _module_root(module: str | None) -> str | None:
    """The environment module's file, or its package's directory."""
    if module is None:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    origin = Path(spec.origin).resolve()
    return str(origin.parent) + os.sep if spec.submodule_search_locations else str(origin)


def environment_frame(exc: BaseException, module: str | None = None) -> str | None:
    """``path:line`` where the environment's code raised ``exc``: the innermost frame in the
    environment module's own files, else the innermost outside the standard library, verifiers
    and this plugin (relative to the working directory when inside it); None if there is none."""
    root = _module_root(module)
    own: str | None = None
    other: str | None = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith("<"):  # <frozen importlib...>, <string>
            continue
        path = Path(frame.filename).resolve()
        if str(path).startswith(_NOT_THE_ENVIRONMENTS):
            continue
        try:
            shown = f"{path.relative_to(Path.cwd())}:{frame.lineno}"
        except ValueError:
            shown = f"{path}:{frame.lineno}"
        other = shown
        if root is not None and str(path).startswith(root):
            own = shown
    return own or other


def load_failure(
    env_id: str, doing: str, exc: BaseException, module: str | None = None
) -> EnvironmentLoadError:
    """The load error for ``exc``, raised while ``doing`` (e.g. "importing its module") by the
    environment whose module is ``module``."""
    # verifiers re-raises a module's failed import as "<kind> not found"; the module was
    # found (the plugin checked), so the cause is a module it imports.
    if isinstance(exc, ModuleNotFoundError) and isinstance(exc.__cause__, ModuleNotFoundError):
        exc = exc.__cause__
    where = environment_frame(exc, module)
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return EnvironmentLoadError(
            f"environment {env_id!r}: {doing} failed: no module named {exc.name!r}"
            + (f" (imported at {where})" if where else "")
            + f"; install the package that provides {exc.name!r} where pytest runs"
        )
    if where is None and not isinstance(exc, SyntaxError):
        return EnvironmentLoadError(f"environment {env_id!r}: {exc}")
    return EnvironmentLoadError(
        f"environment {env_id!r}: {doing} raised {type(exc).__name__}: {exc}"
        + (f" (at {where})" if where else "")
    )

"""An error raised while an environment loads, told in one line the user can act on.

An environment's own code (its module, its loader, its dataset reading) can raise anything; the
benchmark's error then names the environment, what was being done, the exception and the line
of the environment's code that raised it, not a traceback through pytest, verifiers and this
plugin. An error verifiers raises itself (a module without ``__all__``, ...) already says what
to do and is passed on as it is.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import site
import sysconfig
import traceback
from collections.abc import Iterable
from pathlib import Path

from pytest_modal_eval.exceptions import EnvironmentLoadError


def not_installed(env_id: str, bundled: Iterable[str], install_hint: str) -> str:
    """The message for an environment that is not installed: a close bundled id first (a typo
    such as ``fileqa`` for ``file-qa`` needs no installation), then how to install it."""
    close = difflib.get_close_matches(env_id.lower(), sorted(bundled), n=1, cutoff=0.75)
    if close:
        return (
            f"environment {env_id!r} is not installed; did you mean {close[0]!r}, bundled "
            f"with the plugin (env_id: {close[0]})? If not, {install_hint}"
        )
    return f"environment {env_id!r} is not installed: {install_hint}"


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # finds without importing
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _as_prefix(path: str | Path) -> str:
    return str(Path(path).resolve()) + os.sep


def interpreter_dirs() -> tuple[str, ...]:
    """The interpreter's own code: its standard library and site-packages directories (each
    ending in a separator). A process of the same interpreter searches them anyway."""
    paths = sysconfig.get_paths()
    found = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    found.update(site.getsitepackages())
    found.add(site.getusersitepackages())
    return tuple(sorted(_as_prefix(p) for p in found))


def under(path: Path, prefixes: tuple[str, ...]) -> bool:
    """Whether ``path`` (resolved) is one of the ``prefixes`` or lies under one."""
    return (str(path) + os.sep).startswith(prefixes)


#: This plugin's package directory (this file is in its ``client/``).
_PLUGIN_DIR = Path(__file__).resolve().parents[1]

#: Code that is never the environment's: the interpreter's (the standard library and installed
#: packages, an environment's own package excepted), verifiers, this plugin.
_NOT_THE_ENVIRONMENTS = (
    *interpreter_dirs(),
    *(_as_prefix(p) for p in (_package_dir("verifiers"), _PLUGIN_DIR) if p is not None),
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
    environment module's own files (installed or not), else the innermost in files that are
    not the interpreter's, verifiers' or this plugin's (a project's own modules); relative to
    the working directory when inside it. None if there is neither."""
    root = _module_root(module)
    own: str | None = None
    other: str | None = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith("<"):  # <frozen importlib...>, <string>
            continue
        path = Path(frame.filename).resolve()
        mine = root is not None and str(path).startswith(root)
        if not mine and under(path, _NOT_THE_ENVIRONMENTS):
            continue
        try:
            shown = f"{path.relative_to(Path.cwd())}:{frame.lineno}"
        except ValueError:
            shown = f"{path}:{frame.lineno}"
        if mine:
            own = shown
        else:
            other = shown
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

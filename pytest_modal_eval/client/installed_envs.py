"""Whether an environment id can be loaded here, told without importing verifiers or the
environment: what ``pytest --collect-only`` and each item's set-up ask first.

verifiers' classic API (0.3.x) imports the module named after the id (``-`` -> ``_``); its v1
API (0.4.x) the module of the id's last part (``owner/name@version`` -> ``name``), or one of
its own tasksets (``verifiers/v1/tasksets/<name>``). Both are looked for with
``importlib.util.find_spec`` on top-level names and a path test inside the verifiers package,
neither of which runs any of their code.
"""

from __future__ import annotations

import functools
import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

from pytest_modal_eval.client.environment_errors import not_installed
from pytest_modal_eval.exceptions import EnvironmentLoadError

ApiName = Literal["classic", "v1"]

#: Environments the plugin ships for the classic API, and for the v1 API.
BUNDLED_CLASSIC = ("file-qa",)
BUNDLED_V1 = ("file-qa", "lookup-qa")
#: The bundled environments the plugin runs itself (``client/native.py``), importing no
#: framework, with the env_args its own runner takes (``base_dir``, the benchmark's directory,
#: is the plugin's). Anything more (verifiers 0.4's ``task``: judges, a taskset's settings) or
#: an ``agent`` section goes to the installed verifiers, which plays it as its own evaluation
#: does (``verifiers_adapter.runs_natively``).
NATIVE = ("file-qa",)
FILE_QA_ARGS = ("path", "system_prompt")

#: How to install the environments the shipped benchmarks use (Prime environment hub).
CLASSIC_INSTALL_HINT = (
    "install it into the environment pytest runs in, from the Prime environment hub: "
    "`prime env install primeintellect/{env_id}` or `uv pip install {env_id} "
    "--extra-index-url https://hub.primeintellect.ai/primeintellect/simple/` "
    "(any package that makes the module `{module}` importable works)"
)
#: How to install a v1 taskset from the Prime environment hub.
V1_INSTALL_HINT = (
    "install it into the environment pytest runs in, from the Prime environment hub: "
    "`prime env install {env_id}` or `uv pip install {env_id} "
    "--extra-index-url https://hub.primeintellect.ai/primeintellect/simple/` (any package that "
    "makes the module `{module}` importable and exports a verifiers v1 Taskset in its __all__; "
    "verifiers {version} is installed, which has only the v1 API)"
)


def installed_version() -> str:
    try:
        return version("verifiers")
    except PackageNotFoundError:
        raise EnvironmentLoadError(
            "verifiers is not installed: `uv pip install 'verifiers>=0.3.1,<0.5'`"
        ) from None


def api_for(verifiers_version: str) -> ApiName:
    """``"classic"`` for verifiers 0.3.x (and older), ``"v1"`` for 0.4.x."""
    parts = verifiers_version.split(".")
    try:
        major, minor = int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        raise EnvironmentLoadError(
            f"cannot tell which verifiers API version {verifiers_version!r} has; "
            "install verifiers>=0.3.1,<0.5"
        ) from None
    if (major, minor) < (0, 4):
        return "classic"
    if (major, minor) < (0, 5):
        return "v1"
    raise EnvironmentLoadError(
        f"verifiers {verifiers_version} is newer than this plugin supports (0.3.x and 0.4.x); "
        "install verifiers>=0.3.1,<0.5 or a newer pytest-modal-eval"
    )


@functools.cache
def installed_api() -> ApiName:
    """Which API the installed verifiers has (read from its version; imports nothing)."""
    return api_for(installed_version())


def classic_module(env_id: str) -> str:
    """The module verifiers' classic API imports for ``env_id``."""
    return env_id.replace("-", "_")


def v1_module(env_id: str) -> str:
    """The module verifiers v1 imports for ``env_id`` (``owner/name@version`` -> ``name``)."""
    return env_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def _verifiers_version() -> str:
    try:
        return version("verifiers")
    except PackageNotFoundError:
        return "(none)"


def missing_classic(env_id: str) -> str | None:
    """Why the classic API cannot load ``env_id`` here (not installed), or None."""
    if env_id in BUNDLED_CLASSIC:
        return None
    if env_id in BUNDLED_V1:
        return (
            f"environment {env_id!r} is bundled for verifiers' v1 API (0.4.x) only, and "
            f"verifiers {_verifiers_version()} (classic API) is installed: install "
            "verifiers 0.4 (`uv pip install 'verifiers>=0.4,<0.5'`) to run it"
        )
    name = classic_module(env_id)
    if importlib.util.find_spec(name) is None:
        return not_installed(
            env_id,
            [*BUNDLED_CLASSIC, *BUNDLED_V1],
            CLASSIC_INSTALL_HINT.format(env_id=env_id, module=name),
        )
    return None


def missing_v1(env_id: str) -> str | None:
    """Why the v1 API cannot load ``env_id`` here (not installed), or None."""
    if env_id in BUNDLED_V1:
        return None
    module = v1_module(env_id)
    if _verifiers_taskset(module) or importlib.util.find_spec(module) is not None:
        return None
    return not_installed(
        env_id,
        BUNDLED_V1,
        V1_INSTALL_HINT.format(env_id=env_id, module=module, version=_verifiers_version()),
    )


def _verifiers_taskset(module: str) -> bool:
    """Whether verifiers ships a taskset of that name (``verifiers.v1.tasksets.<module>``),
    found on disk: ``find_spec`` of a submodule would import ``verifiers.v1`` (seconds)."""
    spec = importlib.util.find_spec("verifiers")
    if spec is None or not spec.submodule_search_locations:
        return False
    for root in spec.submodule_search_locations:
        tasksets = Path(root) / "v1" / "tasksets"
        if (tasksets / f"{module}.py").is_file() or (tasksets / module / "__init__.py").is_file():
            return True
    return False

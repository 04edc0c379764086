"""A v1 taskset's tool servers (MCP) for a run: its shared ones started once here, and the
directories it is imported from handed to every tool server's process."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from pathlib import Path

import verifiers.v1 as vf
from verifiers.v1.mcp import SharedToolServer, serve_shared

from pytest_modal_eval.client.environment_errors import interpreter_dirs, under
from pytest_modal_eval.client.verifiers_v1_load import V1Environment, toolsets
from pytest_modal_eval.exceptions import RunAborted


def _import_roots(classes: Iterable[type]) -> list[str]:
    """The ``sys.path`` entries the classes' top-level packages were imported from, but the
    interpreter's own (a process of the same interpreter searches those anyway)."""
    interpreter = interpreter_dirs()
    roots: list[str] = []
    for cls in classes:
        top = sys.modules.get(cls.__module__.split(".", 1)[0])
        origin = getattr(top, "__file__", None)
        if origin is None:
            continue
        # As imported (not resolved): a symlinked module's directory is the one on sys.path.
        where = Path(os.path.abspath(origin)).parent
        root = where.parent if Path(origin).name == "__init__.py" else where
        for entry in sys.path:
            if not entry or Path(os.path.abspath(entry)) != root:
                continue
            if not under(root.resolve(), interpreter) and entry not in roots:
                roots.append(entry if os.path.isabs(entry) else str(root))
            break
    return roots


@contextlib.contextmanager
def tool_servers_import_like_this_process(env: V1Environment) -> Iterator[None]:
    """Tool servers are ``python -m <toolset module>`` processes started in a working
    directory of their own; directories this process imports the taskset from by
    ``sys.path`` alone (pytest's ``pythonpath``, the rootdir) reach them through
    ``PYTHONPATH`` while the run lasts."""
    tools = toolsets(env.taskset)
    task_type = type(env.taskset).task_type()
    roots = _import_roots([type(env.taskset), task_type, *(type(t) for t in tools)])
    if not tools or not roots:
        yield
        return
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([*roots, *([previous] if previous else [])])
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


@contextlib.asynccontextmanager
async def shared_tools(env: V1Environment) -> AsyncIterator[Mapping[str, SharedToolServer]]:
    """The taskset's shared tool servers, started once for the run, each a local process, as
    verifiers' own ``Env.shared_tools`` starts them; a server that does not start ends the run
    with what it said."""
    toolsets = type(env.taskset).toolsets(env.taskset.config)
    try:
        async with serve_shared(toolsets, harness_is_local=True) as shared:
            yield shared
            return
    except vf.ToolsetError as exc:
        raise RunAborted(
            f"environment {env.env_id!r}: a tool server did not start: {exc}"
        ) from None

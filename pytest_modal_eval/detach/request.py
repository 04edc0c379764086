"""What a detached session runs: its arguments, its items and how they fan out, as the JSON the
controller function is called with (``request.json`` on the Volume holds the same).

The arguments are the pytest command's own, less what only makes sense where it was typed
(``--detach`` and its options, the output directory, the HTML report's and JUnit XML's paths,
``--basetemp``): the container puts its outputs on the Volume. Positional paths stay relative
to the directory pytest was started in, which the container recreates inside the project.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval.exceptions import DetachError

#: Options that stay where the command was typed, and whether each takes a value.
LOCAL_OPTIONS = {
    "--detach": False,
    "--wait": False,
    "--detach-parallel": False,
    "--detach-shards": True,
    "--eval-output-dir": True,
    "--eval-report": True,
    "--junitxml": True,
    "--junit-xml": True,
    "--basetemp": True,
}
#: Options a fanned-out session's final pass leaves out: it reports the runs its workers made.
FRESH_OPTIONS = ("--eval-fresh", "--cache-clear")
#: Options a fanned-out session's workers leave out: the final pass shares the merged runs
#: once (a worker's run is a part, or is shared again by the final pass).
SHARE_OPTIONS = {"--push-to-hub": True, "--hub-private": False, "--mlflow": False, "--wandb": False}


def local_options_removed(args: Sequence[str]) -> list[str]:
    """``args`` without :data:`LOCAL_OPTIONS` (``--opt value`` and ``--opt=value``)."""
    return options_removed(args, LOCAL_OPTIONS)


def options_removed(args: Sequence[str], options: Mapping[str, bool]) -> list[str]:
    """``args`` without ``options`` (each: whether it takes a value; ``--opt value`` and
    ``--opt=value``)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name, eq, _ = arg.partition("=")
        if name in options:
            skip = options[name] and not eq
            continue
        kept.append(arg)
    return kept


def split_paths(args: Sequence[str], paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """``args`` as options and positional paths: each of ``paths`` (pytest's ``file_or_dir``,
    as given) is taken out of ``args`` once, in order."""
    options = list(args)
    found = []
    for path in paths:
        if path in options:
            options.remove(path)
            found.append(path)
    return options, found


def relative_path(arg: str, root: Path, invocation: Path) -> str:
    """A positional path as the container reaches it: relative to the invocation directory
    (``::`` test names kept); DetachError when it lies outside the project, which does not
    travel."""
    path, sep, rest = arg.partition("::")
    given = Path(path).expanduser()
    full = (given if given.is_absolute() else invocation / given).resolve()
    if not full.is_relative_to(root):
        raise DetachError(
            f"--detach: {path} is outside the project directory {root}, and only the project "
            "travels to Modal; move it into the project or run from a directory above it"
        )
    if not given.is_absolute():
        return arg
    return os.path.relpath(full, invocation) + sep + rest


@dataclass(frozen=True)
class PlannedItem:
    """A benchmark item as the fan-out plans it."""

    nodeid: str  # relative to the invocation directory, as the container's pytest takes it
    benchmark: str
    model: str
    runs_dir: str  # `<benchmark>--<model slug>`: where its runs are, and its lease's name
    shards: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "benchmark": self.benchmark,
            "model": self.model,
            "runs_dir": self.runs_dir,
            "shards": self.shards,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedItem:
        return cls(
            str(data["nodeid"]),
            str(data["benchmark"]),
            str(data["model"]),
            str(data["runs_dir"]),
            int(data.get("shards") or 1),
        )


@dataclass(frozen=True)
class SessionRequest:
    """One detached session, as its controller is called with it."""

    session_id: str
    command_key: str
    options: tuple[str, ...]
    paths: tuple[str, ...]
    invocation: str  # the invocation directory, relative to the project's root ("" for it)
    items: tuple[PlannedItem, ...]
    volume: str
    app_name: str
    parallel: bool = False
    junit: bool = False
    # Seconds a container waits for a benchmark another session writes; None: as long as it
    # takes.
    lock_timeout_s: float | None = 600.0
    launched_at: str = ""
    command: str = ""  # the command as typed, for `logs` to list
    serving_on_modal: bool = False  # --backend modal: the model is served by a Modal app
    keep_deployment: bool = False  # --keep-deployment

    @property
    def args(self) -> list[str]:
        """The session's pytest arguments (the container adds where its outputs go)."""
        return [*self.options, *self.paths]

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "command_key": self.command_key,
            "options": list(self.options),
            "paths": list(self.paths),
            "invocation": self.invocation,
            "items": [item.to_json() for item in self.items],
            "volume": self.volume,
            "app_name": self.app_name,
            "parallel": self.parallel,
            "junit": self.junit,
            "lock_timeout_s": self.lock_timeout_s,
            "launched_at": self.launched_at,
            "command": self.command,
            "serving_on_modal": self.serving_on_modal,
            "keep_deployment": self.keep_deployment,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionRequest:
        timeout = data.get("lock_timeout_s")
        return cls(
            session_id=str(data["session_id"]),
            command_key=str(data["command_key"]),
            options=tuple(data["options"]),
            paths=tuple(data["paths"]),
            invocation=str(data.get("invocation") or ""),
            items=tuple(PlannedItem.from_json(item) for item in data.get("items") or ()),
            volume=str(data["volume"]),
            app_name=str(data["app_name"]),
            parallel=bool(data.get("parallel")),
            junit=bool(data.get("junit")),
            lock_timeout_s=None if timeout is None else float(timeout),
            launched_at=str(data.get("launched_at") or ""),
            command=str(data.get("command") or ""),
            serving_on_modal=bool(data.get("serving_on_modal")),
            keep_deployment=bool(data.get("keep_deployment")),
        )


def command_key(
    options: Sequence[str],
    paths: Sequence[str],
    invocation: str,
    project_digest: str,
    plan: Sequence[PlannedItem],
    volume: str,
) -> str:
    """What makes two commands the same session: the arguments, where they were typed, the
    project's files, the fan-out and the Volume (``--wait`` is not among them: running the same
    command again with or without it attaches)."""
    text = json.dumps(
        [
            list(options),
            list(paths),
            invocation,
            project_digest,
            [i.to_json() for i in plan],
            volume,
        ],
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]

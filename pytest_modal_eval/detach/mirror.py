"""Detached runs brought here: the Volume's ``outputs/`` mirrored, file by file, into a local
directory in the output directory's own layout, so every command reads them as local runs.

``pull RUN`` mirrors one run into the output directory (byte for byte what the container
wrote); ``runs --remote`` mirrors the small files of every run (``run_config.json``,
``checkpoint_meta.json``, ``metadata.json``) into a cache, and ``show``/``compare``/``report
--remote`` a whole run. A file is fetched again only when its size or time changed on the
Volume; a file gone from the Volume (a run's final files, removed when a session goes on with
it) goes here too. Links (a run's links to its server's logs) are not mirrored.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from pytest_modal_eval.detach.layout import OUTPUTS
from pytest_modal_eval.detach.modal_calls import ModalCalls
from pytest_modal_eval.runs.paths import CHECKPOINT_META, METADATA, RUN_CONFIG
from pytest_modal_eval.runs.store import replaced_atomically

#: The files ``runs`` reads of each run.
SMALL_FILES = frozenset({RUN_CONFIG, CHECKPOINT_META, METADATA})


def cache_dir(volume: str) -> Path:
    """Where remote runs are mirrored for reading: ``$XDG_CACHE_HOME/pytest-modal-eval/
    volumes/VOLUME/outputs`` (``~/.cache`` when unset)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pytest-modal-eval" / "volumes" / volume / str(OUTPUTS)


def small_file(relative: str) -> bool:
    """A run's small file: ``<benchmark dir>/<run id>/<name>``."""
    parts = relative.split("/")
    return len(parts) == 3 and parts[2] in SMALL_FILES


class Mirror:
    """The Volume's ``outputs/`` (or a part of it) kept in ``local``."""

    def __init__(self, calls: ModalCalls, local: Path) -> None:
        self.calls = calls
        self.local = local

    def sync(self, prefix: str = "", keep: Callable[[str], bool] = lambda path: True) -> int:
        """Mirror the files under ``prefix`` (a path within ``outputs/``) that ``keep``
        accepts; how many were fetched."""
        base = OUTPUTS / prefix if prefix else OUTPUTS
        remote = {}
        for entry in self.calls.list_files(str(base)):
            relative = str(PurePosixPath(entry.path).relative_to(OUTPUTS))
            if keep(relative):
                remote[relative] = entry
        fetched = 0
        for relative, entry in sorted(remote.items()):
            target = self.local / relative
            if target.is_file() and _same(target, entry.size, entry.mtime):
                continue
            data = self.calls.read_bytes(entry.path)
            target.parent.mkdir(parents=True, exist_ok=True)
            with replaced_atomically(target, binary=True) as out:
                out.write(data)
            os.utime(target, (entry.mtime, entry.mtime))
            fetched += 1
        top = self.local / prefix if prefix else self.local
        if top.is_dir():
            for path in sorted(top.rglob("*")):
                relative = path.relative_to(self.local).as_posix()
                if path.is_file() and keep(relative) and relative not in remote:
                    path.unlink()
        return fetched


def _same(path: Path, size: int, mtime: int) -> bool:
    stat = path.stat()
    return stat.st_size == size and int(stat.st_mtime) == mtime

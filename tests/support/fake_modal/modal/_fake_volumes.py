"""``modal.Volume`` in the stand-in, with Modal's commit and reload semantics.

A Volume's committed contents are a directory, ``FAKE_MODAL_ROOT/volumes/NAME``: what
``listdir``, ``read_file`` and ``batch_upload`` see from outside a container. A container gets
a copy of them when it starts (its mount); its writes reach the committed contents only when it
calls ``commit()`` (a file it changed replaces the committed one, last write wins; a file it
deleted is deleted), and it sees others' commits only after ``reload()``, which commits its own
first. A container killed before it commits loses what it wrote since its last commit.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _fake_store as _store
from .exception import NotFoundError


class FileEntryType(enum.IntEnum):
    UNSPECIFIED = 0
    FILE = 1
    DIRECTORY = 2
    SYMLINK = 3


@dataclass(frozen=True)
class FileEntry:
    path: str
    type: FileEntryType
    mtime: int
    size: int


def committed(name: str) -> Path:
    return _store.root() / "volumes" / name


def _lock(name: str) -> Path:
    return _store.root() / "volumes" / f".{name}.lock"


def _scan(top: Path) -> dict[str, list[int]]:
    """Relative path -> [size, mtime_ns] of every file under ``top`` (links left out)."""
    found: dict[str, list[int]] = {}
    for folder, _, files in os.walk(top):
        for name in files:
            path = Path(folder) / name
            with contextlib.suppress(FileNotFoundError):
                if path.is_symlink():
                    continue
                stat = path.stat()
                found[path.relative_to(top).as_posix()] = [stat.st_size, stat.st_mtime_ns]
    return found


def _copy(source: Path, target: Path) -> bool:
    """Replace ``target`` with ``source`` (atomically); False when ``source`` is gone."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.sync")
    try:
        shutil.copy2(source, tmp)
    except FileNotFoundError:
        return False
    os.replace(tmp, target)
    return True


def mount(name: str, folder: Path, manifest: Path) -> None:
    """A container's mount of Volume ``name`` at its start: the committed contents."""
    with _store.locked(_lock(name)):
        shutil.rmtree(folder, ignore_errors=True)
        source = committed(name)
        source.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, folder, symlinks=True)
        _store.write_json(manifest, {"local": _scan(folder), "remote": _scan(source)})


class Volume:
    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def from_name(name: str, *, create_if_missing: bool = False, **_: Any) -> Volume:
        folder = committed(name)
        if not folder.is_dir():
            if not create_if_missing:
                raise NotFoundError(f"Volume {name!r} not found")
            folder.mkdir(parents=True, exist_ok=True)
        return Volume(name)

    # -- outside a container --------------------------------------------------------------

    def listdir(self, path: str, *, recursive: bool = False) -> list[FileEntry]:
        top = committed(self.name) / path.strip("/")
        if not top.exists():
            raise NotFoundError(f"No such file or directory: {path}")
        if top.is_file():
            stat = top.stat()
            return [
                FileEntry(path.strip("/"), FileEntryType.FILE, int(stat.st_mtime), stat.st_size)
            ]
        entries = []
        walked = top.rglob("*") if recursive else top.iterdir()
        for item in sorted(walked):
            relative = item.relative_to(committed(self.name)).as_posix()
            with contextlib.suppress(FileNotFoundError):
                if item.is_symlink():
                    kind = FileEntryType.SYMLINK
                elif item.is_dir():
                    kind = FileEntryType.DIRECTORY
                else:
                    kind = FileEntryType.FILE
                stat = item.lstat()
                if item.name.endswith(".sync"):
                    continue
                entries.append(FileEntry(relative, kind, int(stat.st_mtime), stat.st_size))
        return entries

    def read_file(self, path: str) -> Iterator[bytes]:
        target = committed(self.name) / path.strip("/")
        if not target.is_file():
            raise NotFoundError(f"No such file: {path}")
        data = target.read_bytes()
        for start in range(0, len(data), 1 << 20):
            yield data[start : start + (1 << 20)]

    @contextlib.contextmanager
    def batch_upload(self, force: bool = False) -> Iterator[_Upload]:
        upload = _Upload(self.name, force)
        yield upload
        upload.finish()

    # -- inside a container that mounts it ------------------------------------------------

    def _mounted(self) -> tuple[Path, Path]:
        folder = _store.mounts().get(self.name)
        if folder is None:
            raise RuntimeError(
                "commit() and reload() only work inside a container that mounts the Volume"
            )
        return Path(folder), Path(folder + ".manifest.json")

    def commit(self) -> None:
        folder, manifest = self._mounted()
        with _store.locked(_lock(self.name)):
            self._commit(folder, manifest)

    def _commit(self, folder: Path, manifest: Path) -> dict[str, Any]:
        known = _store.read_json(manifest) or {"local": {}, "remote": {}}
        _push(folder, committed(self.name), known, "local", "remote")
        _store.write_json(manifest, known)
        return dict(known)

    def reload(self) -> None:
        folder, manifest = self._mounted()
        with _store.locked(_lock(self.name)):
            known = self._commit(folder, manifest)
            _push(committed(self.name), folder, known, "remote", "local")
            _store.write_json(manifest, known)


def _push(source: Path, target: Path, known: dict[str, Any], mine: str, theirs: str) -> None:
    """Copy to ``target`` what changed in ``source`` since the last sync (``known[mine]``,
    its files' sizes and times then) and delete there what was deleted here; ``known[theirs]``
    follows ``target``'s files."""
    now = _scan(source)
    for relative, stat in now.items():
        if known[mine].get(relative) != stat and _copy(source / relative, target / relative):
            known[mine][relative] = stat
            with contextlib.suppress(FileNotFoundError):
                done = (target / relative).stat()
                known[theirs][relative] = [done.st_size, done.st_mtime_ns]
    for relative in set(known[mine]) - set(now):
        with contextlib.suppress(FileNotFoundError):
            (target / relative).unlink()
        known[mine].pop(relative)
        known[theirs].pop(relative, None)


class _Upload:
    def __init__(self, name: str, force: bool) -> None:
        self.name = name
        self.force = force
        self.files: list[tuple[Path | bytes, str]] = []

    def put_file(self, local_file: Any, remote_path: Any, mode: int | None = None) -> None:
        source = local_file if isinstance(local_file, (str, Path)) else local_file.read()
        self.files.append((Path(source) if isinstance(source, str) else source, str(remote_path)))

    def put_directory(self, local_path: Any, remote_path: Any, recursive: bool = True) -> None:
        base = Path(local_path)
        for path in sorted(base.rglob("*")):
            if path.is_file():
                self.put_file(path, f"{remote_path}/{path.relative_to(base).as_posix()}")

    def finish(self) -> None:
        target = committed(self.name)
        with _store.locked(_lock(self.name)):
            for source, remote in self.files:
                path = target / remote.strip("/")
                if path.exists() and not self.force:
                    raise FileExistsError(remote)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.{time.time_ns()}.sync")
                if isinstance(source, bytes):
                    tmp.write_bytes(source)
                else:
                    shutil.copyfile(source, tmp)
                os.replace(tmp, path)

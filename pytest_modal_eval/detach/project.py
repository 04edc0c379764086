"""The project's files that travel with a detached session: its benchmarks and their data,
baselines, ``conftest.py``, its ini file, its own Python code, and the digest that names them.

In a git repository, the files git knows or would add (``git ls-files --cached --others
--exclude-standard``); elsewhere every file under the root but caches, virtual environments and
``.env`` files. Every file beside a collected benchmark (its data, git-ignored or not) travels
too, and nothing under the output directory.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

#: Directories never sent (their names, anywhere in the tree).
SKIPPED_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
        "node_modules", ".tox", ".nox", ".eggs", "site", "dist", "build",
    }
)  # fmt: skip


#: What git lists: the files it tracks and those it would add (ignored files are left out).
GIT_LISTS = ("--cached", "--others", "--exclude-standard")


def _skipped_dir(name: str) -> bool:
    return name in SKIPPED_DIRS or name.startswith((".venv", "venv"))


def _skipped_file(name: str) -> bool:
    # A .env file holds secrets: they travel as Modal secrets, never as files.
    return name == ".env" or name.startswith(".env.") or name.endswith((".pyc", ".pyo"))


def _walk(root: Path, top: Path) -> Iterable[Path]:
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not _skipped_dir(d))
        for name in sorted(files):
            path = Path(folder) / name
            if not _skipped_file(name) and path.is_file() and not path.is_symlink():
                yield path.relative_to(root)


def _git_files(root: Path) -> list[Path] | None:
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", *GIT_LISTS],
            capture_output=True, check=False, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    found = []
    for name in listed.stdout.decode("utf-8", "surrogateescape").split("\0"):
        path = Path(name)
        if not name or any(_skipped_dir(part) for part in path.parts[:-1]):
            continue
        if _skipped_file(path.name) or not (root / path).is_file() or (root / path).is_symlink():
            continue
        found.append(path)
    return found


def project_files(
    root: Path, beside: Iterable[Path] = (), exclude: Iterable[Path] = ()
) -> list[Path]:
    """The files (relative to ``root``) that travel: git's view of the project, or every file,
    with every file under the directories ``beside`` (the benchmarks'), less those under
    ``exclude`` (the output directory)."""
    root = root.resolve()
    files = set(_git_files(root) or _walk(root, root))
    for folder in beside:
        folder = folder.resolve()
        if folder.is_relative_to(root):
            files.update(_walk(root, folder))
    skipped = [p.resolve() for p in exclude]
    return sorted(
        path
        for path in files
        if not any((root / path).resolve().is_relative_to(folder) for folder in skipped)
    )


def digest(root: Path, files: Iterable[Path]) -> str:
    """What the files hold, names included: equal digests, the same project."""
    total = hashlib.sha256()
    for path in sorted(files):
        total.update(path.as_posix().encode() + b"\0")
        total.update(hashlib.sha256((root / path).read_bytes()).digest())
    return total.hexdigest()

"""The detached runner's image: this Python, and every distribution of the environment pytest
runs in, pinned to its installed version; distributions installed from a local directory
(editable or not) are added as Python source instead, since no index has them.

The project's own files do not go into the image: they travel with each session on the Volume
(``project.py``), so the image, and the deployment, is the same from one session to the next.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_NORMALIZE = re.compile(r"[-_.]+")


@dataclass(frozen=True)
class RunnerImage:
    """What the runner's image holds: its Python, pinned requirements and local sources."""

    python: str  # "3.11"
    pins: tuple[str, ...]  # "name==version", or "name @ URL" for a VCS or remote archive
    sources: tuple[str, ...]  # top-level modules of local distributions

    def to_json(self) -> dict[str, Any]:
        return {"python": self.python, "pins": list(self.pins), "sources": list(self.sources)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunnerImage:
        return cls(str(data["python"]), tuple(data["pins"]), tuple(data["sources"]))

    def build(self) -> Any:
        """The ``modal.Image`` (built offline; Modal builds it at deploy time)."""
        import modal

        image = modal.Image.debian_slim(python_version=self.python)
        if self.pins:
            image = image.uv_pip_install(*self.pins)
        if self.sources:  # last: local sources are added when a container starts
            image = image.add_local_python_source(*self.sources)
        return image


def normalized(name: str) -> str:
    return _NORMALIZE.sub("-", name).lower()


def local_environment() -> RunnerImage:
    """This interpreter's version and distributions, as :class:`RunnerImage` pins them."""
    pins: dict[str, str] = {}
    sources: set[str] = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name or normalized(name) in pins:
            continue  # a second copy of a distribution shadowed on sys.path
        origin = _direct_url(dist)
        if origin is None:
            pins[normalized(name)] = f"{name}=={dist.version}"
        elif "vcs_info" in origin:
            vcs = origin["vcs_info"]
            commit = f"@{vcs['commit_id']}" if vcs.get("commit_id") else ""
            pins[normalized(name)] = f"{name} @ {vcs['vcs']}+{origin['url']}{commit}"
        elif str(origin.get("url", "")).startswith(("http://", "https://")):
            pins[normalized(name)] = f"{name} @ {origin['url']}"
        else:  # a local directory or file: its modules travel as source
            sources.update(_top_level_modules(dist))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return RunnerImage(version, tuple(sorted(pins.values(), key=str.lower)), tuple(sorted(sources)))


def _direct_url(dist: importlib.metadata.Distribution) -> dict[str, Any] | None:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _top_level_modules(dist: importlib.metadata.Distribution) -> set[str]:
    """A local distribution's importable top-level modules that live outside site-packages:
    those it lists (``top_level.txt``, its files), its entry points' and its own name's."""
    names = set((dist.read_text("top_level.txt") or "").split())
    for file in dist.files or ():
        parts = Path(str(file)).parts
        if len(parts) == 1 and parts[0].endswith(".py"):
            names.add(parts[0][:-3])
        elif len(parts) == 2 and parts[1] == "__init__.py":
            names.add(parts[0])
    names.update(ep.value.split(":")[0].split(".")[0] for ep in dist.entry_points)
    names.add(normalized(dist.metadata["Name"]).replace("-", "_"))
    found = set()
    for name in names:
        if not name.isidentifier():
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = spec.origin if spec is not None else None
        if origin and "site-packages" not in Path(origin).parts:
            found.add(name)
    return found

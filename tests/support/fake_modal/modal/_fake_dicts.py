"""``modal.Dict`` in the stand-in: one file per key under ``FAKE_MODAL_ROOT/dicts/NAME``;
``put(..., skip_if_exists=True)`` is atomic (a hard link that fails when the key exists), as
Modal's is. Values round-trip through JSON (Modal pickles; what the plugin stores is JSON)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from . import _fake_store as _store

_MISSING = object()


class Dict:
    def __init__(self, name: str) -> None:
        self.name = name
        self._dir = _store.root() / "dicts" / name

    @staticmethod
    def from_name(name: str, *, create_if_missing: bool = False, **_: Any) -> Dict:
        return Dict(name)

    def _path(self, key: Any) -> Path:
        return self._dir / hashlib.sha256(json.dumps(key).encode()).hexdigest()

    def get(self, key: Any, default: Any = None) -> Any:
        data = _store.read_json(self._path(key))
        return default if data is None else data["value"]

    def put(self, key: Any, value: Any, *, skip_if_exists: bool = False) -> bool:
        self._dir.mkdir(parents=True, exist_ok=True)
        tmp = self._dir / f".{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps({"key": key, "value": value}), encoding="utf-8")
        try:
            if skip_if_exists:
                try:
                    os.link(tmp, self._path(key))
                except FileExistsError:
                    return False
                return True
            os.replace(tmp, self._path(key))
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        path = self._path(key)
        data = _store.read_json(path)
        try:
            path.unlink()
        except FileNotFoundError:
            if default is _MISSING:
                raise KeyError(key) from None
            return default
        return None if data is None else data["value"]

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

"""This tool's deployed apps on Modal: list them, read their tags, stop them.

A thin layer over two Modal calls, kept behind :class:`ModalApps` so the command line is
tested against an in-memory stand-in (:class:`pytest_modal_eval.serving.modal.apps` has no
Modal emulator to test against): ``modal app list --json`` (documented JSON keys: app_id,
description, state, tasks, created_at, stopped_at) and ``modal.App.lookup(name)`` for
``get_tags()`` / ``stop()``.

An app is *ours* when its name starts with :data:`APP_NAME_PREFIX` **and** it carries the
tag ``created-by=pytest-modal-eval`` that :func:`pytest_modal_eval.serving.modal.app.build`
sets: the prefix alone is too common a word to stop apps by.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.serving.modal.app import APP_NAME_PREFIX, CREATED_BY, CREATED_BY_TAG

#: ``modal app list`` states of an app that can still run containers.
LIVE_STATES = ("deployed", "ephemeral", "initializing")


@dataclass(frozen=True)
class AppRecord:
    """One deployed app, as ``modal app list --json`` describes it, plus its tags."""

    name: str
    app_id: str
    state: str
    tasks: int
    created_at: str
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def ours(self) -> bool:
        return self.name.startswith(f"{APP_NAME_PREFIX}-") and (
            self.tags.get(CREATED_BY_TAG) == CREATED_BY
        )

    @property
    def live(self) -> bool:
        return self.state.lower().startswith(LIVE_STATES)


class ModalApps(Protocol):
    def deployed(self) -> list[AppRecord]:
        """Apps of the current Modal environment whose names start with the prefix, with tags."""
        ...

    def web_url(self, name: str) -> str | None:
        """The app's serving URL, or None when it has none."""
        ...

    def stop(self, name: str) -> None:
        """Stop the app; raise :class:`ServingError` when Modal refuses."""
        ...

    def startups(self, name: str) -> list[dict[str, Any]]:
        """The app's recent container start-ups (``{"seconds", "snapshot", "at"}``), oldest
        first, as its containers recorded them."""
        ...


class ModalCliApps:
    """The real thing: the Modal CLI for listing (its JSON is documented), the SDK for tags,
    URLs and stopping."""

    def __init__(self, modal_cli: Sequence[str] | None = None, timeout: float = 120.0) -> None:
        self._cli = list(modal_cli or [sys.executable, "-m", "modal"])
        self._timeout = timeout

    def deployed(self) -> list[AppRecord]:
        try:
            result = subprocess.run(
                [*self._cli, "app", "list", "--json"],
                capture_output=True, text=True, timeout=self._timeout, check=False,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServingError(f"`modal app list` did not answer: {exc}") from exc
        if result.returncode != 0:
            raise ServingError(f"`modal app list` failed: {result.stderr.strip()[-500:]}")
        records = []
        for row in parse_app_list(result.stdout):
            if row.name.startswith(f"{APP_NAME_PREFIX}-") and row.live:
                records.append(
                    AppRecord(row.name, row.app_id, row.state, row.tasks, row.created_at,
                              self._tags(row.app_id or row.name))
                )  # fmt: skip
        return records

    @staticmethod
    def _tags(name: str) -> dict[str, str]:
        import modal

        try:
            return dict(modal.App.lookup(name).get_tags())
        except Exception:  # an app without tags, or one stopped meanwhile: not ours
            return {}

    def web_url(self, name: str) -> str | None:
        from pytest_modal_eval.serving.modal.backend import lookup_url

        return lookup_url(name)

    def startups(self, name: str) -> list[dict[str, Any]]:
        import modal

        from pytest_modal_eval.serving.modal.app import STARTUP_DICT

        try:
            found = modal.Dict.from_name(STARTUP_DICT).get(name)
        except Exception:  # never written yet, or unreachable: nothing to show
            return []
        return [dict(entry) for entry in found or [] if isinstance(entry, dict)]

    def stop(self, name: str) -> None:
        import modal

        try:
            modal.App.lookup(name).stop()
        except Exception as exc:
            raise ServingError(f"could not stop Modal app {name}: {exc}") from exc


def parse_app_list(text: str) -> list[AppRecord]:
    """Rows of ``modal app list --json`` (a JSON list of objects)."""
    data: Any = json.loads(text or "[]")
    rows = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        tasks = str(item.get("tasks") or "0")
        rows.append(
            AppRecord(
                name=str(item.get("description") or ""),
                app_id=str(item.get("app_id") or ""),
                state=str(item.get("state") or ""),
                tasks=int(tasks) if tasks.isdigit() else 0,
                created_at=str(item.get("created_at") or ""),
            )
        )
    return rows

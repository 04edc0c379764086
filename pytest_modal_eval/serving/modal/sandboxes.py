"""This tool's Modal sandboxes: the tags that mark them, finding the running ones, ending them.

A harness run in Modal sandboxes (``client/modal_sandbox.py``) creates every sandbox with
:func:`session_tags`: :data:`TAG` = :data:`TAG_VALUE` marks it as this tool's, and
:data:`SESSION_TAG` names the pytest session that made it. Modal's
``Sandbox.list(tags=...)`` yields the running sandboxes of the current Modal environment that
carry at least the given tags, so listing by the mark finds this tool's sandboxes and no
other. Three SDK calls, no verifiers: ``modal.Sandbox.list``, ``Sandbox.get_tags`` and
``Sandbox.terminate``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.serving.modal.access import check_modal_access
from pytest_modal_eval.terminal_text import escape

TAG = "pytest-modal-eval"
TAG_VALUE = "rollout"
SESSION_TAG = "pytest-modal-eval-session"


def session_tags(session: str | None = None) -> dict[str, str]:
    """The tags of a sandbox made by ``session`` (a new random id when not given)."""
    return {TAG: TAG_VALUE, SESSION_TAG: session or uuid.uuid4().hex}


@dataclass(frozen=True)
class RunningSandbox:
    """One running sandbox of this tool: its Modal id, the session that made it, its handle."""

    sandbox_id: str
    session: str
    handle: Any = field(repr=False, compare=False)

    def terminate(self) -> None:
        """End the sandbox (Modal's ``terminate``: a no-op on one that has already ended)."""
        try:
            self.handle.terminate()
        except Exception as exc:
            raise ServingError(
                f"could not end Modal sandbox {escape(self.sandbox_id)}: "
                f"{type(exc).__name__}: {escape(str(exc))}"
            ) from exc


def running_sandboxes(session: str | None = None) -> list[RunningSandbox]:
    """This tool's running sandboxes (only ``session``'s when given), grouped by session.

    Raises :class:`ServingError` in one line when Modal cannot be asked.
    """
    check_modal_access()
    import modal

    tags = {TAG: TAG_VALUE} if session is None else session_tags(session)
    found = []
    try:
        for sandbox in modal.Sandbox.list(tags=tags):
            made_by = dict(sandbox.get_tags()).get(SESSION_TAG, "?")
            found.append(RunningSandbox(str(sandbox.object_id), made_by, sandbox))
    except Exception as exc:
        reason = f"{type(exc).__name__}: {escape(str(exc))}"
        raise ServingError(f"could not list Modal sandboxes: {reason}") from exc
    return sorted(found, key=lambda s: (s.session, s.sandbox_id))

"""Every call a detached session makes to Modal's network, in one place, in plain types.

The Volume (listing, reading and uploading from outside a container; commit and reload inside
one), the Dict that holds leases and session records, and the runner's Functions (deploy,
spawn, poll, cancel). Nothing else in :mod:`pytest_modal_eval.detach` touches ``modal``'s
network: the tests replace Modal at this boundary with a local stand-in that plays these calls
(``tests/support/fake_modal``).

Modal's errors become :class:`~pytest_modal_eval.exceptions.DetachError` with one line that
says what was asked. A pending result is the builtin ``TimeoutError`` from ``get``; an expired
one is ``modal.exception.OutputExpiredError``, which is not a subclass of it (both are told
apart here).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval.exceptions import DetachError

#: The Dict holding leases, session records and stop requests of detached sessions.
DICT_NAME = "pytest-modal-eval-detach"


@dataclass(frozen=True)
class RemoteFile:
    """A file on the Volume: its path from the Volume's root ('/'-separated, no leading '/')."""

    path: str
    size: int
    mtime: int  # seconds


@dataclass(frozen=True)
class CallOutcome:
    """Where a spawned call stands: ``pending``, ``done`` (``value``), ``failed`` (``error``)
    or ``expired`` (its result is gone: Modal keeps one for 7 days)."""

    state: str
    value: Any = None
    error: str | None = None

    @property
    def over(self) -> bool:
        return self.state != "pending"


@contextlib.contextmanager
def _asked(what: str) -> Iterator[None]:
    """Modal's errors as a DetachError naming what was asked."""
    import modal.exception

    try:
        yield
    except modal.exception.AuthError as exc:
        raise DetachError(
            f"Modal rejected the token while {what}: {exc}; run `modal token new`"
        ) from None
    except modal.exception.Error as exc:
        raise DetachError(f"Modal failed while {what}: {exc}") from None


class ModalCalls:
    """Modal, as one detached session's code needs it: the Volume ``volume`` and the Dict."""

    def __init__(self, volume: str, dict_name: str = DICT_NAME) -> None:
        self.volume_name = volume
        self.dict_name = dict_name

    def _volume(self) -> Any:
        import modal

        return modal.Volume.from_name(self.volume_name, create_if_missing=True)

    def _dict(self) -> Any:
        import modal

        return modal.Dict.from_name(self.dict_name, create_if_missing=True)

    # -- the Volume, from outside a container ------------------------------------------------

    def list_files(self, prefix: str) -> list[RemoteFile]:
        """Every file under ``prefix`` (recursively); none when the path does not exist."""
        import modal.exception

        found = []
        with _asked(f"listing {prefix} on Volume {self.volume_name}"):
            try:
                entries = self._volume().listdir(prefix, recursive=True)
            except (modal.exception.NotFoundError, FileNotFoundError):
                return []
            for entry in entries:
                if getattr(entry.type, "name", str(entry.type)) != "FILE":
                    continue  # directories, and links (runs' links to server logs)
                found.append(RemoteFile(entry.path.lstrip("/"), int(entry.size), int(entry.mtime)))
        return found

    def list_dirs(self, prefix: str) -> list[str]:
        """The names of the directories directly under ``prefix`` (none when it is missing)."""
        import modal.exception

        with _asked(f"listing {prefix} on Volume {self.volume_name}"):
            try:
                entries = self._volume().listdir(prefix, recursive=False)
            except (modal.exception.NotFoundError, FileNotFoundError):
                return []
            return sorted(
                entry.path.rstrip("/").rsplit("/", 1)[-1]
                for entry in entries
                if getattr(entry.type, "name", str(entry.type)) == "DIRECTORY"
            )

    def read_bytes(self, path: str) -> bytes:
        """A file's bytes; FileNotFoundError when there is none."""
        import modal.exception

        buffer = io.BytesIO()
        with _asked(f"reading {path} from Volume {self.volume_name}"):
            try:
                for chunk in self._volume().read_file(path):
                    buffer.write(chunk)
            except modal.exception.NotFoundError:
                raise FileNotFoundError(path) from None
        return buffer.getvalue()

    def upload(self, files: Iterable[tuple[Path, str]]) -> None:
        """Put local files at Volume paths, replacing what is there."""
        with (
            _asked(f"uploading to Volume {self.volume_name}"),
            self._volume().batch_upload(force=True) as batch,
        ):
            for local, remote in files:
                batch.put_file(local, "/" + remote.lstrip("/"))

    # -- the Volume, inside a container that mounts it ---------------------------------------

    def commit(self) -> None:
        """Make this container's writes to the Volume durable and visible to others."""
        with _asked(f"committing Volume {self.volume_name}"):
            self._volume().commit()

    def reload(self) -> None:
        """See what other containers committed (this container's writes are committed first)."""
        with _asked(f"reloading Volume {self.volume_name}"):
            self._volume().reload()

    # -- the Dict ---------------------------------------------------------------------------

    def get(self, key: str) -> Any:
        with _asked(f"reading {key!r} from Dict {self.dict_name}"):
            return self._dict().get(key)

    def put(self, key: str, value: Any) -> None:
        with _asked(f"writing {key!r} to Dict {self.dict_name}"):
            self._dict().put(key, value)

    def put_if_absent(self, key: str, value: Any) -> bool:
        """Write ``value`` unless ``key`` exists; whether it was written (atomic in Modal)."""
        with _asked(f"writing {key!r} to Dict {self.dict_name}"):
            return bool(self._dict().put(key, value, skip_if_exists=True))

    def pop(self, key: str) -> None:
        with _asked(f"removing {key!r} from Dict {self.dict_name}"):
            self._dict().pop(key, None)

    # -- Functions --------------------------------------------------------------------------

    def deploy(self, app: Any, name: str) -> None:
        """Deploy ``app`` as ``name``; running containers of an earlier deployment go on."""
        with _asked(f"deploying app {name}"):
            app.deploy(name=name)

    def spawn(self, app_name: str, function: str, payload: dict[str, Any]) -> str:
        """Start ``function`` of the deployed app with ``payload``; its call id."""
        import modal

        with _asked(f"starting {function} of app {app_name}"):
            call = modal.Function.from_name(app_name, function).spawn(payload)
            return str(call.object_id)

    def poll(self, call_id: str, timeout: float = 0.0) -> CallOutcome:
        """The call's outcome, waiting up to ``timeout`` seconds for it."""
        import modal
        import modal.exception

        try:
            call = modal.FunctionCall.from_id(call_id)
            value = call.get(timeout=timeout)
        except TimeoutError:  # pending (the builtin, not modal.exception.TimeoutError)
            return CallOutcome("pending")
        except modal.exception.OutputExpiredError:
            return CallOutcome("expired")
        except modal.exception.AuthError as exc:
            raise DetachError(f"Modal rejected the token while asking {call_id}: {exc}") from None
        except modal.exception.ConnectionError as exc:
            raise DetachError(f"Modal is not reachable while asking {call_id}: {exc}") from None
        except Exception as exc:  # the function raised, or was cancelled
            return CallOutcome("failed", error=f"{type(exc).__name__}: {exc}")
        return CallOutcome("done", value=value)

    def cancel(self, call_id: str, *, terminate: bool) -> None:
        """Cancel the call (``terminate``: end its container at once)."""
        import modal

        with _asked(f"cancelling {call_id}"):
            modal.FunctionCall.from_id(call_id).cancel(terminate_containers=terminate)

    @staticmethod
    def current_call_id() -> str | None:
        """The call this container runs (None outside a Modal function)."""
        import modal

        found = modal.current_function_call_id()
        return str(found) if found else None

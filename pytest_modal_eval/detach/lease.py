"""One writer across machines: a lease in the Modal Dict, with an owner and a heartbeat.

Modal's Dict has an atomic put-if-absent (``put(..., skip_if_exists=True)``) but no
compare-and-swap and no expiry per key, so a lease is built on top:

- a lease is a key whose value names its ``owner`` (a function call's id, or a launching
  client's), its generation ``gen`` and its last ``beat`` (seconds since the epoch);
- taking a free key is a put-if-absent; the owner may always take its own key again (a
  pre-empted container restarted on the same input has the same call id);
- a lease whose owner is not live (the caller says what live means: a recent beat, or a call
  that is still running) is taken over through a put-if-absent of ``KEY#takeover-GEN``: of
  several takers of one stale generation exactly one wins, and writes generation ``GEN + 1``;
- the owner beats every :data:`BEAT_S` seconds; a beat that finds another owner raises
  :class:`LeaseLost`, and the holder stops writing.

Clocks of different machines disagree by seconds; :data:`STALE_S` is a minute.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

BEAT_S = 10.0
STALE_S = 60.0


class LeaseStore(Protocol):
    """What a lease needs of the Dict (:class:`~.modal_calls.ModalCalls` has it)."""

    def get(self, key: str) -> Any: ...

    def put(self, key: str, value: Any) -> None: ...

    def put_if_absent(self, key: str, value: Any) -> bool: ...

    def pop(self, key: str) -> None: ...


class LeaseLost(RuntimeError):
    """Another owner holds the lease now: this one must stop writing."""


def fresh(record: dict[str, Any], now: float | None = None) -> bool:
    """The lease's owner beat within :data:`STALE_S` seconds."""
    beat = record.get("beat")
    return isinstance(beat, (int, float)) and (now or time.time()) - beat < STALE_S


@dataclass
class Lease:
    """A lease on ``key`` for ``owner``; ``data`` is kept in its record for others to read."""

    store: LeaseStore
    key: str
    owner: str
    data: dict[str, Any]

    def _record(self, gen: int) -> dict[str, Any]:
        return {"owner": self.owner, "gen": gen, "beat": time.time(), "data": self.data}

    def try_take(self, live: Callable[[dict[str, Any]], bool] = fresh) -> dict[str, Any] | None:
        """Take the lease if it is free, ours, or its owner is not ``live``: None; else the
        record of the owner that holds it."""
        while True:
            record = self.store.get(self.key)
            if not isinstance(record, dict):
                if self.store.put_if_absent(self.key, self._record(0)):
                    return None
                continue  # taken meanwhile: look again
            gen = int(record.get("gen") or 0)
            if record.get("owner") == self.owner:
                self.store.put(self.key, self._record(gen))
                return None
            if live(record):
                return record
            if self.store.put_if_absent(f"{self.key}#takeover-{gen}", self.owner):
                self.store.put(self.key, self._record(gen + 1))
                return None
            time.sleep(0.2)  # another taker won this generation: look at what it wrote

    def take(
        self,
        live: Callable[[dict[str, Any]], bool] = fresh,
        *,
        timeout: float | None,
        waiting: Callable[[dict[str, Any]], None] = lambda record: None,
        poll_s: float = 2.0,
    ) -> None:
        """Wait for the lease (``timeout`` seconds, None: as long as it takes), telling
        ``waiting`` once who holds it; TimeoutError when it is not free in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        told = False
        while (holder := self.try_take(live)) is not None:
            if not told:
                waiting(holder)
                told = True
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.key} is held by {holder.get('owner')}")
            time.sleep(poll_s)

    def beat(self) -> None:
        """Refresh the lease; :class:`LeaseLost` when another owner holds it now."""
        record = self.store.get(self.key)
        if not isinstance(record, dict) or record.get("owner") != self.owner:
            holder = record.get("owner") if isinstance(record, dict) else "nobody"
            raise LeaseLost(f"lease {self.key} is held by {holder} now")
        self.store.put(self.key, {**record, "beat": time.time(), "data": self.data})

    def release(self) -> None:
        """Give the lease up, if it is still ours."""
        record = self.store.get(self.key)
        if isinstance(record, dict) and record.get("owner") == self.owner:
            self.store.pop(self.key)

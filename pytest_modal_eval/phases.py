"""What the session is doing while no example is reported: the phases that take time (a
server starting, an environment loading, a run's checkpoint read), told to whoever listens.

Code that waits wraps the wait in :func:`phase` and, where it learns more (vLLM's own
start-up phase from its log), calls :meth:`Phase.detail`. The session's live progress
(``report/progress.py``) listens on the process that has the terminal and draws a line that
changes while the phase lasts, or writes one line per phase with its duration in a CI log.
On an xdist worker (its terminal is the controller's) the broker's client listens and sends
each phase to the controller, where :class:`Relayed` tells them again, to its listeners.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol


class PhaseListener(Protocol):
    """Told of every phase of this process, from any thread."""

    def began(self, phase: Phase) -> None: ...

    def changed(self, phase: Phase, previous: str | None, seconds: float) -> None:
        """``phase``'s detail changed; ``previous`` (None: none yet) lasted ``seconds``."""

    def ended(self, phase: Phase, seconds: float) -> None: ...


class Phase:
    """One phase: its text (``arith: starting vLLM``), its current detail (``loading
    weights``) and when each began (``time.monotonic()``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.started = time.monotonic()
        self.current: str | None = None
        self.detail_started = self.started

    def detail(self, text: str) -> None:
        """What the phase is doing now; told to the listeners when it changes."""
        if text == self.current:
            return
        now = time.monotonic()
        previous, lasted = self.current, now - self.detail_started
        self.current, self.detail_started = text, now
        for listener in _listeners():
            listener.changed(self, previous, lasted)


_LOCK = threading.Lock()
_LISTENERS: list[PhaseListener] = []
_CURRENT = threading.local()  # this thread's innermost phase


def _listeners() -> list[PhaseListener]:
    with _LOCK:
        return list(_LISTENERS)


def listen(listener: PhaseListener) -> Callable[[], None]:
    """Tell ``listener`` of every phase from now on; the function returned stops that."""
    with _LOCK:
        _LISTENERS.append(listener)

    def stop() -> None:
        with _LOCK:
            if listener in _LISTENERS:
                _LISTENERS.remove(listener)

    return stop


@contextmanager
def phase(text: str) -> Iterator[Phase]:
    """A phase that lasts while the block runs."""
    current = Phase(text)
    outer = getattr(_CURRENT, "phase", None)
    _CURRENT.phase = current
    for listener in _listeners():
        listener.began(current)
    try:
        yield current
    finally:
        _CURRENT.phase = outer
        seconds = time.monotonic() - current.started
        for listener in _listeners():
            listener.ended(current, seconds)


def detail(text: str) -> None:
    """What this thread's current phase is doing now (nothing when no phase is open): code far
    below the phase, such as a server's wait for its log, says it without being handed it."""
    current = getattr(_CURRENT, "phase", None)
    if current is not None:
        current.detail(text)


class Relayed:
    """Phases of other processes (xdist workers'), told to this process's listeners as they
    are told there: each under the key its process gave it, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Phase] = {}

    def began(self, key: str, text: str) -> None:
        current = Phase(text)
        with self._lock:
            self._open[key] = current
        for listener in _listeners():
            listener.began(current)

    def changed(self, key: str, text: str) -> None:
        with self._lock:
            current = self._open.get(key)
        if current is not None:
            current.detail(text)

    def ended(self, key: str) -> None:
        with self._lock:
            current = self._open.pop(key, None)
        if current is None:
            return
        seconds = time.monotonic() - current.started
        for listener in _listeners():
            listener.ended(current, seconds)

    def end_all(self) -> None:
        """End what is still open (a worker that went away mid-phase)."""
        with self._lock:
            keys = list(self._open)
        for key in keys:
            self.ended(key)

"""One server per server profile at a time, owned by the controller process, stopped as soon as
no remaining item of the session needs it.

A *server profile* is what a server depends on (backend, model, infra, vllm, chat template).
Benchmarks with equal profiles share one server, started lazily by the first benchmark that
needs it. Collection puts the items of a profile next to each other (:func:`group_by_profile`)
and hands the controller the *plan*: which item needs which profile. The controller learns from
each item's teardown report that it is finished, and stops a server once no unfinished item of
the plan needs its profile. A server a user's test started through the ``eval_endpoint``
fixture is kept while any unfinished test requests that fixture (which profile it will ask for
is not known before it runs).

A backend whose servers run on this machine (``--backend local``) has at most one server at a
time: one vLLM per GPU. A request for another profile waits until no running item holds the
current server, then stops it; an item that would need two at once is refused with an error.

Without xdist :class:`Deployments` runs in-process. Under xdist it lives on the controller,
and workers reach it through the broker (:mod:`.broker`), so ``-n 4`` still deploys once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval import phases
from pytest_modal_eval.config.backends import backend
from pytest_modal_eval.config.options import Settings
from pytest_modal_eval.exceptions import ServerStartError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.serving.backends import endpoint_info_for_existing, start_server
from pytest_modal_eval.serving.endpoint import EndpointInfo, Server, ServerRequest

#: The plan's mark for an item that may ask for any profile (it uses ``eval_endpoint``).
ANY_PROFILE = "*"


def profile_key(request: ServerRequest) -> str:
    return json.dumps(request.profile(), sort_keys=True)


def group_by_profile(items: Sequence[Any], key_of: Mapping[int, str]) -> list[Any]:
    """``items`` with those that have a profile (``key_of[id(item)]``) grouped by it, each group
    where its first item was; other items keep their places. Stable, so every xdist worker
    collects the same order."""
    slots = [i for i, item in enumerate(items) if id(item) in key_of]
    first: dict[str, int] = {}
    for rank, i in enumerate(slots):
        first.setdefault(key_of[id(items[i])], rank)
    ordered = sorted(
        (items[i] for i in slots), key=lambda item: first[key_of[id(item)]]
    )  # sorted() is stable: within a profile, the collection order stays
    out = list(items)
    for i, item in zip(slots, ordered, strict=True):
        out[i] = item
    return out


@dataclass
class ServerRecord:
    """One server's life, for the summary: when it came up and for how long."""

    profile: dict[str, Any]
    startup_s: float
    started_at: float
    stopped_at: float | None = None

    @property
    def up_s(self) -> float:
        end = self.stopped_at if self.stopped_at is not None else time.monotonic()
        return end - self.started_at + self.startup_s


@dataclass
class _Running:
    server: Server
    info: EndpointInfo
    record: ServerRecord
    runs_here: bool


class Deployments:
    """Starts servers on demand, one per profile; stops each when the plan no longer needs it."""

    def __init__(
        self, settings: Settings, logs_dir: Path, redactor: Redactor | None = None
    ) -> None:
        """``redactor``: the session's secrets, kept out of the servers' logs."""
        self.settings = settings
        self.logs_dir = logs_dir
        self.redactor = redactor
        self._cond = threading.Condition()
        self._servers: dict[str, _Running] = {}
        self._starting: set[str] = set()
        self._failures: dict[str, str] = {}  # a profile that failed to start is not retried
        self._leases: dict[str, set[str]] = {}  # profile key -> unfinished items that use it
        self._plan: dict[str, str] = {}  # node id -> profile key (or ANY_PROFILE)
        self._finished: set[str] = set()
        self._closed = False
        self.started: list[str] = []  # profile keys, in start order (tests count these)
        self.stopped: list[str] = []  # profile keys, in stop order
        self.records: list[ServerRecord] = []

    # -- the plan -------------------------------------------------------------------------

    def plan(self, needs: Mapping[str, str]) -> None:
        """Which item (node id) needs which profile; sent once collection is done."""
        with self._cond:
            self._plan.update(needs)

    def finished(self, nodeid: str) -> None:
        """An item is over (its evaluation ended, or its teardown was reported): release what
        it held, stop what the rest of the plan does not need."""
        with self._cond:
            self._finished.add(nodeid)
            for holders in self._leases.values():
                holders.discard(nodeid)
            idle = [key for key in self._servers if not self._needed(key)]
            self._cond.notify_all()
        for key in idle:
            self._stop(key, only_if_idle=True)

    def _needed(self, key: str) -> bool:
        """Whether the server of ``key`` may still be asked for (call with the lock held)."""
        if self._leases.get(key):
            return True
        if not self._plan:
            return True  # no plan (nothing collected here): keep it to the end
        return any(
            wanted in (key, ANY_PROFILE) and nodeid not in self._finished
            for nodeid, wanted in self._plan.items()
        )

    # -- servers --------------------------------------------------------------------------

    def endpoint_for(self, request: ServerRequest, holder: str | None = None) -> EndpointInfo:
        """The endpoint of ``request``'s profile, started if need be, for the item ``holder``
        (a node id), which holds the server until its teardown is reported."""
        if not backend(request.backend).starts_server:
            return endpoint_info_for_existing(request)
        key = profile_key(request)
        runs_here = backend(request.backend).runs_here
        with self._cond:
            while True:
                if self._closed:
                    raise ServerStartError("the session is ending; no server is started")
                if key in self._failures:
                    raise ServerStartError(self._failures[key])
                running = self._servers.get(key)
                if running is not None:
                    if holder is not None:
                        self._leases.setdefault(key, set()).add(holder)
                    return running.info
                if key in self._starting:
                    self._cond.wait()
                    continue
                if runs_here:
                    others = [k for k, r in self._servers.items() if r.runs_here]
                    others += [k for k in self._starting if k != key]
                    held = {h for k in others for h in self._leases.get(k, ())}
                    if holder is not None and holder in held:
                        raise ServerStartError(
                            f"{holder} needs two vLLM servers on this machine at once "
                            "(--backend local runs one at a time, so that two never share a "
                            "GPU). Use one server profile per test, or another backend."
                        )
                    if held or any(k in self._starting for k in others):
                        self._cond.wait()  # another worker's item still uses it
                        continue
                    for other in others:
                        self._stop_locked(other)
                self._starting.add(key)
                break
        try:
            where = "on Modal" if backend(request.backend).on_modal else f"({request.backend})"
            with phases.phase(f"starting vLLM {where} for {request.model}"):
                server, info = start_server(
                    request, self.settings, self.logs_dir, holder, self.redactor
                )
        except Exception as exc:
            with self._cond:
                # Every benchmark on this profile would wait out the same failure again.
                self._failures[key] = str(exc)
                self._starting.discard(key)
                self._cond.notify_all()
            raise ServerStartError(str(exc)) from None
        startup_s = info.startup.seconds if info.startup is not None else 0.0
        record = ServerRecord(request.profile(), startup_s, time.monotonic())
        with self._cond:
            self._servers[key] = _Running(server, info, record, runs_here)
            self._starting.discard(key)
            self.started.append(key)
            self.records.append(record)
            if holder is not None:
                self._leases.setdefault(key, set()).add(holder)
            self._cond.notify_all()
            closed = self._closed
        if closed:
            self._stop(key)
        return info

    def _stop(self, key: str, only_if_idle: bool = False) -> None:
        with self._cond:
            if only_if_idle and self._needed(key):
                return
            self._stop_locked(key)

    def _stop_locked(self, key: str) -> None:
        running = self._servers.pop(key, None)
        if running is None:
            return
        running.record.stopped_at = time.monotonic()
        self.stopped.append(key)
        self._leases.pop(key, None)
        try:
            running.server.stop()
        except Exception as exc:  # keep going: the others still need stopping
            print(f"pytest-modal-eval: failed to stop a server: {exc}")

    def stop_all(self) -> None:
        with self._cond:
            self._closed = True
            for key in reversed(list(self._servers)):
                self._stop_locked(key)
            self._cond.notify_all()

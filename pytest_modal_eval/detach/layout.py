"""Where a detached session's files are on the Volume.

- ``outputs/``: the runs, in the output directory's own layout (``runs/paths.py``): every
  detached session writes and resumes its runs here, as a local session does in
  ``outputs/evals``.
- ``sessions/<session id>/``: one session: ``request.json`` (what it runs), ``project/`` (the
  project's files it runs on), ``log/`` (its pytest output, in numbered chunks), ``status.json``
  (its state, exit status and containers), ``junit.xml`` and ``report.html``; a fanned-out
  session's workers log under ``workers/<name>/log/``.
- ``shards/<benchmark>--<model slug>/<K>-of-<N>/``: the output directory of one shard of a
  benchmark's examples (its own run directory), merged into ``outputs/`` when every shard is
  done.

Paths here are relative to the Volume's root ('/'-separated): a container joins them to where
it mounts the Volume (:data:`VOLUME_MOUNT`), the laptop asks Modal for them as they are.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

#: Where the runner's containers mount the Volume.
VOLUME_MOUNT = "/results"
#: Where the container finds the Volume instead (the test stand-in mounts a local directory).
MOUNT_ENV = "MODAL_EVAL_VOLUME_MOUNT"

OUTPUTS = PurePosixPath("outputs")
SESSIONS = PurePosixPath("sessions")
SHARDS = PurePosixPath("shards")
#: A log chunk is closed once it holds this much; a follower reads only chunks it has not read.
LOG_CHUNK_BYTES = 256 * 1024


def volume_root() -> Path:
    """Where this container has the Volume."""
    return Path(os.environ.get(MOUNT_ENV) or VOLUME_MOUNT)


def new_session_id() -> str:
    """``YYYYMMDD-HHMMSS-xxxxxx``: the UTC start, then six random hex digits; sorts by start."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def log_chunk_name(number: int) -> str:
    return f"{number:06d}.txt"


@dataclass(frozen=True)
class SessionFiles:
    """One session's files, relative to the Volume's root."""

    session_id: str

    @property
    def dir(self) -> PurePosixPath:
        return SESSIONS / self.session_id

    @property
    def request(self) -> PurePosixPath:
        return self.dir / "request.json"

    @property
    def project(self) -> PurePosixPath:
        return self.dir / "project"

    @property
    def status(self) -> PurePosixPath:
        return self.dir / "status.json"

    @property
    def junit(self) -> PurePosixPath:
        return self.dir / "junit.xml"

    @property
    def report(self) -> PurePosixPath:
        return self.dir / "report.html"

    def log_dir(self, worker: str | None = None) -> PurePosixPath:
        """The controller's log (``worker`` None) or a worker's."""
        return self.dir / "log" if worker is None else self.dir / "workers" / worker / "log"


def shard_output(benchmark_dir: str, shard: tuple[int, int]) -> PurePosixPath:
    """The output directory of shard ``(K, N)`` of a benchmark's runs' directory
    (``<benchmark>--<model slug>``): the same for every session, so a shard resumes."""
    return SHARDS / benchmark_dir / f"{shard[0]}-of-{shard[1]}"

"""Answers the server sent for examples that are not finished yet, kept on disk.

An example is checkpointed only once all its rollouts are scored. Without this journal, a run
killed between "the server answered" and "the example was scored" would send those requests
again on resume: for a model that thinks for minutes per answer, that is paid-for work thrown
away, and it is why a run could not have more examples in progress than requests in flight.

Every successful answer is appended to ``<run dir>/answers.journal`` the moment it arrives,
keyed by its example and a hash of the exact request: its path (``chat/completions``) and JSON
body, not the host, which may differ on resume (another port, a new proxy). On resume the
answers of examples the checkpoint does not hold yet are loaded, and a request whose example
and bytes match a stored answer gets that answer back instead of going to the server (several
identical requests -- the rollouts of one example -- each get a different stored answer, in
order). Only the body, decoded (as the client read it, whatever ``Content-Encoding`` it came
in), and its ``Content-Type`` are stored, with the secrets the session knows replaced by
``[redacted]`` in its text (a server may echo the request's key in an answer): a record made
from a replayed answer holds the text one made from the answer itself would, since the run's
records are redacted the same way (a reward that looks for the secret's value can differ).
Multi-turn rollouts replay turn by turn: the second request contains the first answer, so it
matches only when the first was replayed.

The file is append-only: a record is a JSON header line followed by the answer's raw bytes. A
record torn by a crash ends the readable part; the file is cut there. Answers of examples in
the checkpoint are dead weight and the file is rewritten without them once they make up most
of it, so it stays small however long the run; it is deleted once no answer in it is needed.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_modal_eval.redact import Redactor

log = logging.getLogger(__name__)

#: Rewrite the file once this many bytes belong to finished examples (and most of it does).
COMPACT_AFTER_BYTES = 8 * 2**20

#: The example whose rollouts the current task runs (set by the adapter's workers).
current_example: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "pytest_modal_eval_example", default=None
)

RawHeaders = tuple[tuple[bytes, bytes], ...]
#: The answer headers kept: what reading the (decoded) body needs. Others (cookies, tracing
#: ids, a gateway's, the encoding the body came in) are not written to disk.
KEPT_HEADERS = frozenset({b"content-type"})


@dataclass(frozen=True)
class Answer:
    """An answer as the client read it: ``content`` is the body decoded from any
    ``Content-Encoding``."""

    status: int
    raw_headers: RawHeaders
    content: bytes


def request_key(path: str, body: bytes) -> str:
    return hashlib.sha256(path.lstrip("/").encode() + b"\n" + body).hexdigest()


class AnswerJournal:
    """``<run dir>/answers.journal``: see the module docstring. Not thread-safe (one event loop).

    The journal only saves work: when the file cannot be written (a full disk, a read-only
    directory) it logs one warning and stops recording, and the run goes on as without it.
    """

    def __init__(
        self, path: Path, finished: Callable[[int], bool], redactor: Redactor | None = None
    ) -> None:
        """Open ``path``, keeping the stored answers of the examples ``finished`` says are not
        (an example outside this run's selection is not: its answers stay for a later run).
        Answers are written with the secrets ``redactor`` knows replaced."""
        self.path = path
        self.redactor = redactor
        self.problem: str | None = None  # why recording stopped, for the run's summary
        # example -> request key -> stored answers not handed out yet in this process
        self._replay: dict[int, dict[str, deque[Answer]]] = {}
        # example -> (offset, length) of its records in the file, for rewriting
        self._records: dict[int, list[tuple[int, int]]] = {}
        self._dead_bytes = self._live_bytes = self._size = 0
        self._fd = -1
        self.replayed = 0
        # Examples given a stored answer, and examples that asked the server, until finished.
        self._replayed_examples: set[int] = set()
        self._asked: set[int] = set()
        try:
            stored = _read(path)
        except OSError as exc:
            self.problem = f"answer journal {path} cannot be read ({exc}): started without it"
            log.warning("%s", self.problem)
            stored = []
        kept = [record for record in stored if not finished(record[0])]
        for example, key, answer in kept:
            self._replay.setdefault(example, {}).setdefault(key, deque()).append(answer)
        self._guarded(
            self._rewrite, [_encode(*record) for record in kept], [record[0] for record in kept]
        )

    def replay(self, example: int | None, key: str) -> Answer | None:
        """A stored answer to this request of ``example``, each handed out once; else None."""
        stored = self._replay.get(example, {}).get(key) if example is not None else None
        if not stored:
            return None
        self.replayed += 1
        self._replayed_examples.add(example)  # type: ignore[arg-type]  # not None here
        return stored.popleft()

    def record(self, example: int | None, key: str, answer: Answer) -> None:
        """Append an answer that just arrived (a no-op outside an example's task)."""
        if example is not None:
            self._asked.add(example)
        if example is not None and self._fd >= 0:
            if self.redactor is not None:
                answer = redacted(answer, self.redactor)
            self._guarded(self._append, example, _encode(example, key, answer))

    def finished(self, example: int) -> bool:
        """``example`` is in the checkpoint (finished, or errored and to be retried afresh):
        its answers are no longer needed. True when every answer it got was replayed (this
        process asked the server nothing for it)."""
        replayed_only = example in self._replayed_examples and example not in self._asked
        self._replayed_examples.discard(example)
        self._asked.discard(example)
        for _, length in self._records.pop(example, ()):
            self._dead_bytes += length
            self._live_bytes -= length
        self._replay.pop(example, None)
        if self._dead_bytes >= COMPACT_AFTER_BYTES and self._dead_bytes > self._live_bytes:
            self._guarded(self._compact)
        return replayed_only

    def close(self) -> None:
        """Close the file: deleted when no answer in it is needed any more, else rewritten
        without the answers of finished examples."""
        if self._fd >= 0 and self._live_bytes == 0:
            os.close(self._fd)
            self._fd = -1
            self.path.unlink(missing_ok=True)
        elif self._fd >= 0 and self._dead_bytes:
            self._guarded(self._compact)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _append(self, example: int, data: bytes) -> None:
        # One write per record: a killed process leaves whole records (a crash may tear the
        # last one, which reading stops at).
        written = os.write(self._fd, data)
        while written < len(data):  # only a full disk or a signal writes less
            written += os.write(self._fd, data[written:])
        self._records.setdefault(example, []).append((self._size, len(data)))
        self._size += len(data)
        self._live_bytes += len(data)

    def _compact(self) -> None:
        live: list[bytes] = []
        examples: list[int] = []
        for example, records in self._records.items():
            for offset, length in records:
                live.append(os.pread(self._fd, length, offset))
                examples.append(example)
        self._rewrite(live, examples)

    def _rewrite(self, records: list[bytes], examples: list[int]) -> None:
        """Replace the file by ``records`` (whole, encoded) and append after them."""
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_bytes(b"".join(records))
        os.replace(tmp, self.path)
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        self._records = {}
        offset = 0
        for example, data in zip(examples, records, strict=True):
            self._records.setdefault(example, []).append((offset, len(data)))
            offset += len(data)
        self._dead_bytes, self._live_bytes, self._size = 0, offset, offset

    def _guarded(self, step: Callable[..., None], *args: Any) -> None:
        """Run a file step; on an OS error, cut a torn record off, warn once, stop recording."""
        try:
            step(*args)
        except OSError as exc:
            self.problem = self.problem or (
                f"answer journal {self.path}: {exc}; answers are no longer recorded in this run "
                "(a resume after an interruption asks the server again for unfinished examples)"
            )
            log.warning("%s", self.problem)
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._size)
                with contextlib.suppress(OSError):
                    os.close(fd)


def redacted(answer: Answer, redactor: Redactor) -> Answer:
    """``answer`` with the secrets ``redactor`` knows replaced in its body: in each string of a
    JSON body, as the run's records are redacted (so a record made from either answer holds
    the same text), else in its text. A body that holds none is kept byte for byte."""
    text = answer.content.decode("utf-8", "surrogateescape")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        clean = redactor.text(text)
        if clean == text:
            return answer
        return Answer(answer.status, answer.raw_headers, clean.encode("utf-8", "surrogateescape"))
    cleaned = redactor.json(value, by_name=False)
    if cleaned is value or cleaned == value:
        return answer
    try:
        body = json.dumps(cleaned, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate (\ud800 in the body): kept escaped
        body = json.dumps(cleaned, separators=(",", ":")).encode()
    return Answer(answer.status, answer.raw_headers, body)


def _encode(example: int, key: str, answer: Answer) -> bytes:
    header = {
        "example": example,
        "key": key,
        "status": answer.status,
        "headers": [
            [name.decode("latin-1"), value.decode("latin-1")]
            for name, value in answer.raw_headers
            if name.lower() in KEPT_HEADERS
        ],
        "length": len(answer.content),
    }
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + answer.content + b"\n"


def _read(path: Path) -> list[tuple[int, str, Answer]]:
    """Every whole record of the file, in order; stops at a torn or unreadable tail."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records = []
    position = 0
    while position < len(data):
        end = data.find(b"\n", position)
        if end < 0:
            break
        try:
            header = json.loads(data[position:end])
            length = int(header["length"])
            start, stop = end + 1, end + 1 + length
            if length < 0 or data[stop : stop + 1] != b"\n":
                break
            answer = Answer(
                int(header["status"]),
                tuple((n.encode("latin-1"), v.encode("latin-1")) for n, v in header["headers"]),
                data[start:stop],
            )
            records.append((int(header["example"]), str(header["key"]), answer))
        except (ValueError, KeyError, TypeError, AttributeError):
            break
        position = stop + 1
    return records

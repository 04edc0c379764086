"""A server's output copied to its log without the secrets, matched across lines and writes.

A server may print a secret of several lines (a service account's key), or its output may
reach the copy in pieces cut anywhere. So the copy does not look at one line at a time: it
writes whole lines, and holds back text that could be the start of a secret until the rest
arrives, or until the server has been quiet for :data:`IDLE_S` (then what is held is all there
is). Finding such a start is quick: a set of each secret form's first :data:`HEAD` characters
rules out almost every position, and the sorted forms decide the rest.

Self-contained, standard library only: the supervisor of a local vLLM
(``serving/vllm/local.py``) runs this module's source in vLLM's interpreter, which need not
have this plugin; the Modal backend imports it to copy the Modal CLI's output.
"""

from __future__ import annotations

import bisect
import codecs
import os
import re
import select
from collections.abc import Callable
from typing import Any

#: Characters of each secret form's start kept in a set: the first check of a position.
HEAD = 12
#: Seconds of quiet after which held-back output is written as it is.
IDLE_S = 0.5
#: A line this long is written before its end.
LONG_LINE = 1 << 20


class LogRules:
    """What to hide: ``spec`` is ``Redactor.to_json()`` (every form of every secret, a part
    each secret's forms all keep, the URL credentials pattern, the replacement)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        forms = [form for form in spec.get("forms") or [] if form]
        self.secret = re.compile("|".join(map(re.escape, forms))) if forms else None
        self.cores: list[str] | None = spec.get("cores")
        self.userinfo = re.compile(spec["userinfo"]) if spec.get("userinfo") else None
        self.hidden: str = spec.get("replacement", "[redacted]")
        self.forms = sorted(forms)
        self.longest = max(map(len, forms), default=0)
        self.heads = {f[:n] for f in forms for n in range(1, min(len(f), HEAD) + 1)}

    def _pending(self, text: str, start: int) -> bool:
        """Whether ``text[start:]`` is the start of a form that has not all arrived yet."""
        if text[start : start + HEAD] not in self.heads:
            return False
        tail = text[start:]
        i = bisect.bisect_left(self.forms, tail)
        while i < len(self.forms) and self.forms[i].startswith(tail):
            if len(self.forms[i]) > len(tail):
                return True
            i += 1
        return False

    def cut(self, text: str, pos: int) -> int:
        """Where, at or after ``pos``, a secret may be starting that more output would
        complete (text from there on is held back); ``len(text)`` when nowhere."""
        for start in range(max(pos, len(text) - self.longest + 1), len(text)):
            if self._pending(text, start):
                return start
        return len(text)

    def drain(self, text: str, final: bool) -> tuple[str, str]:
        """The part of ``text`` to write now, without the secrets, and the part held back:
        whole lines only, and never the start of a secret whose rest may come next.
        ``final``: write everything."""
        out: list[str] = []
        pos = 0
        # No part every form of some secret keeps: nothing to replace yet (the start of a
        # secret may still have to be held back).
        secret = self.secret
        if self.cores is not None and not any(core in text for core in self.cores):
            secret = None
        while True:
            limit = len(text) if final or self.secret is None else self.cut(text, pos)
            found = secret.search(text, pos) if secret is not None else None
            if found is None or found.start() >= limit:
                break
            out += [text[pos : found.start()], self.hidden]
            pos = found.end()
        if final:
            end = len(text)
        else:
            newline = text.rfind("\n", pos, limit)
            end = newline + 1 if newline >= 0 else pos
            if limit - pos > LONG_LINE:
                end = limit
        out.append(text[pos:end])
        shown = "".join(out)
        if self.userinfo is not None and "://" in shown:
            shown = self.userinfo.sub(self.hidden + "@", shown)
        return shown, text[end:]


def copy_redacted(source: int, write: Callable[[str], None], rules: Callable[[], LogRules]) -> None:
    """Copy what the file descriptor ``source`` gives (UTF-8; other bytes kept as they are)
    to ``write`` until its end, without the secrets ``rules()`` names (asked again for each
    piece, so rules learned meanwhile apply)."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    held = ""
    while True:
        ready, _, _ = select.select([source], [], [], IDLE_S)
        if not ready:
            if held:  # quiet for a while: what is held back is all there is
                shown, held = rules().drain(held, final=True)
                write(shown)
            continue
        chunk = os.read(source, 65536)
        held += decoder.decode(chunk, final=not chunk)
        shown, held = rules().drain(held, final=not chunk)
        if shown:
            write(shown)
        if not chunk:
            return

"""Text from models, servers and run files made safe to print in a terminal.

A model's completion or a server's error message can hold terminal control sequences: an OSC
``ESC ] 52`` writes the user's clipboard, another sets the window title, CSI sequences move
the cursor or erase what was printed. :func:`escape` shows every C0 and C1 control character
(and the bidirectional-override characters that reorder what is shown) as a visible escape, so
such text is read, never obeyed. Newlines are kept only where the caller's layout wants them.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls, bidi embeddings/overrides/isolates, and
# lone surrogates (a server's JSON can carry them; no terminal encoding can print them).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_CONTROL_AND_NEWLINE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _shown(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str, *, newlines: bool = False) -> str:
    """``text`` with control characters shown as ``\\x1b``-style escapes; a newline is kept
    when ``newlines`` is true, else shown as ``\\x0a``. A tab is kept."""
    return (_CONTROL if newlines else _CONTROL_AND_NEWLINE).sub(_shown, text)


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def escape_json(text: str) -> str:
    """JSON text (``ensure_ascii=False``, which escapes C0 controls already) with C1 controls,
    DEL, bidi overrides and lone surrogates written as ``\\uXXXX`` escapes: the same JSON
    value, safe to print."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)

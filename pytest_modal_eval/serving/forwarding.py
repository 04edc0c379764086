"""What a relay or proxy of the plugin forwards: a request's path, checked, for a URL built
from parts.

Every place that sends on a request whose path came from elsewhere -- the Modal sandbox relay
(``client/modal_sandbox.py``: the path comes from code running in the sandbox), the redirect
proxy in front of Modal (``serving/modal/redirect_proxy.py``: the client's path and the
``Location`` of the upstream's redirects) and the Modal container's own requests to its vLLM
(``serving/modal/app.py``) -- takes the path through :func:`forwarded_target` and builds the
URL from its parts (scheme, host, port, path, query) with its HTTP library, never by pasting
text after ``http://host:port``. Pasted, a path of ``@127.0.0.1:22/x`` turns the host and port
into user info and sends the request to port 22.

The rule is an origin-form request target (RFC 9112, 3.2.1) and a little less: one leading
``/``; only the characters RFC 3986 allows in a path and a query, but ``@``, so no user info,
scheme or authority can hide in it; no backslash, whitespace, control or non-ASCII character;
no ``.`` or ``..`` segment; and no percent-escape of a character that could change how the
target is split (``/``, ``\\``, ``@``, ``.``, ``%``, a control character). The requests the
plugin relays (OpenAI routes, verifiers' interception routes, Modal's result URLs) need none of
what is refused. Stdlib only: the Modal container imports it.
"""

from __future__ import annotations

import re

#: The methods a relay forwards; anything else is refused.
FORWARDED_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: Longest request target forwarded (servers refuse longer ones anyway).
MAX_TARGET = 8192

# RFC 3986 pchar / query characters, without "@" (user info's delimiter): unreserved,
# sub-delims, ":", "/", "?" and percent-escapes (checked apart).
_ALLOWED = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:/?%]*")
_ESCAPE = re.compile(r"%(..)?")
# Percent-escapes of these bytes could change how a server or a later hop splits the target.
_REFUSED_ESCAPES = frozenset(b"/\\@.%") | frozenset(range(0x20)) | {0x7F}


class ForwardRefused(ValueError):
    """A request a relay or proxy will not forward; the message says why (one line, with the
    offending text shown escaped), ``status`` what to answer (400, or 403 for a target the
    caller may not reach)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def forwarded_target(target: object) -> tuple[str, str]:
    """``(path, query)`` of ``target`` (a request's path and query, as it came), or
    :class:`ForwardRefused` when it is not a plain absolute path (see the module docstring)."""
    if not isinstance(target, str):
        raise ForwardRefused(f"the path is not text: {type(target).__name__}")
    shown = ascii(target[:200])
    if not target.startswith("/") or target.startswith("//"):
        raise ForwardRefused(f"the path must start with one '/': {shown}")
    if len(target) > MAX_TARGET:
        raise ForwardRefused(f"the path is longer than {MAX_TARGET} characters")
    if not _ALLOWED.fullmatch(target):
        raise ForwardRefused(
            f"the path holds a character no plain path has ('@', '\\', space, control, "
            f"non-ASCII, ...): {shown}"
        )
    for escape in _ESCAPE.finditer(target):
        digits = escape.group(1)
        if digits is None or not re.fullmatch(r"[0-9A-Fa-f]{2}", digits):
            raise ForwardRefused(f"the path holds a '%' that is not a percent-escape: {shown}")
        if int(digits, 16) in _REFUSED_ESCAPES:
            raise ForwardRefused(
                f"the path escapes a character that splits URLs (%{digits}): {shown}"
            )
    path, _, query = target.partition("?")
    if any(segment in (".", "..") for segment in path.split("/")):
        raise ForwardRefused(f"the path holds a '.' or '..' segment: {shown}")
    return path, query


def forwarded_method(method: object) -> str:
    """``method`` if a relay forwards it (:data:`FORWARDED_METHODS`), else
    :class:`ForwardRefused`."""
    if not isinstance(method, str) or method not in FORWARDED_METHODS:
        raise ForwardRefused(f"method {ascii(method)[:40]} is not relayed")
    return method

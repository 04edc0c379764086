"""Keeping secrets out of what is shared: by key name, by value, and a last check on the bytes.

A secret can reach a run's files two ways: under a key that names it (``env_args.api_key``,
``headers.authorization``) or as the value of an environment variable that the run used
(``OPENAI_API_KEY``, ``HF_TOKEN``) turning up in some text. :class:`Redactor` replaces both, and
:meth:`Redactor.check` refuses bytes that still hold a known secret value, so a file nobody
thought to redact fails loudly instead of leaking.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pytest_modal_eval.exceptions import ShareError

REDACTED = "[redacted]"

#: Key names (in JSON and environment variables) whose values are secrets: ``api_key``,
#: ``HF_TOKEN``, ``client_secret``, ``AWS_SECRET_ACCESS_KEY``; not ``max_tokens`` or
#: ``token_usage``.
SECRET_NAME = re.compile(
    r"(?:^|[_.-])(?:(?:api|access|private|secret)[_-]?key|token|secret|password|passwd"
    r"|credentials?|authorization|auth)$",
    re.IGNORECASE,
)
#: ``scheme://user:password@host``: the user part of a URL.
URL_USERINFO = re.compile(r"(?<=://)[^/@\s\"']+@")
#: Environment values shorter than this are not searched for (too many false matches).
MIN_SECRET_LENGTH = 8


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


class Redactor:
    """Replaces secrets in JSON values and text; ``values`` are the secret strings to find."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        found = {v for v in values if len(v) >= MIN_SECRET_LENGTH}
        # Longest first, so a secret containing another is replaced whole.
        self.values = sorted(found, key=len, reverse=True)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        """Secrets are the values of environment variables with secret-looking names."""
        env = os.environ if environ is None else environ
        return cls(value.strip() for name, value in env.items() if is_secret_name(name))

    def text(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, REDACTED)
        return URL_USERINFO.sub(f"{REDACTED}@", text)

    def json(self, value: Any) -> Any:
        """A copy of ``value`` with secret-named keys' values and secret strings replaced."""
        if isinstance(value, Mapping):
            return {
                str(k): (REDACTED if is_secret_name(str(k)) and v else self.json(v))
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.json(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def check(self, name: str, data: bytes) -> None:
        """Raise if ``data`` (a file about to leave this machine) holds a known secret."""
        for value in self.values:
            if value.encode() in data:
                raise ShareError(
                    f"{name} still contains the value of a secret environment variable after "
                    "redaction; nothing was shared. Remove the secret from the run's files."
                )

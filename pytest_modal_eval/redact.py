"""Keeping secrets out of what is written and shared: by key name, by value, and a last check
on the bytes.

A secret can reach a run's files two ways: under a key that names it (``env_args.api_key``,
``headers.authorization``) or as the value of an environment variable that the run used
(``OPENAI_API_KEY``, ``HF_TOKEN``) turning up in some text. :class:`Redactor` replaces both, and
:meth:`Redactor.check` refuses bytes that still hold a known secret value, so a file nobody
thought to redact fails loudly instead of leaking. Run records (``run_config.json``, the resume
index in ``.pytest_cache``) hold a slow hash of each secret setting, and of the
``user:password`` of each URL, instead of its value (:func:`mask_config`), so the answer key
still changes when a secret does.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytest_modal_eval.exceptions import ShareError

REDACTED = "[redacted]"

#: Key names (in JSON and environment variables) whose values are secrets: ``api_key``,
#: ``api_keys``, ``HF_TOKEN``, ``client_secret``, ``secrets``, ``AWS_SECRET_ACCESS_KEY``,
#: ``session_cookie``, ``bearer``, ``GITHUB_PAT`` (camelCase too: ``accessToken``); not
#: ``max_tokens``, ``special_tokens`` (plural ``tokens`` is a count or a vocabulary unless it
#: is ``api_tokens``, ``access_tokens``, ...), ``token_usage``, ``api_key_var`` (the name of a
#: variable), ``path`` or ``pattern``.
SECRET_NAME = re.compile(
    r"(?:^|[_.-])(?:(?:(?:api|access|private|secret)[_-]?key|secret|password|passwd"
    r"|passphrase|credential|cookie|pat)s?|token|(?:api|access|auth|bearer|refresh|session)[_-]?tokens"
    r"|authorization|auth|bearer)$",
    re.IGNORECASE,
)
#: ``scheme://user:password@host``: the user part of a URL (group 1, without the ``@``).
URL_USERINFO = re.compile(r"(?<=://)([^/@\s\"']+)@")
#: Environment values shorter than this are not searched for (too many false matches).
MIN_SECRET_LENGTH = 8


#: A camelCase word boundary (``authToken``, ``openaiApiKey``): read as ``_``.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(_CAMEL.sub("_", name)))


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
        return _replace_url_userinfo(text, lambda _: REDACTED)

    def json(self, value: Any) -> Any:
        """A copy of ``value`` with secret-named keys' values and secret strings replaced."""
        return _replace_secrets(value, lambda _: REDACTED, self.text)

    def check(self, name: str, data: bytes) -> None:
        """Raise if ``data`` (a file about to leave this machine) holds a known secret."""
        for value in self.values:
            if value.encode() in data:
                raise ShareError(
                    f"{name} still contains the value of a secret environment variable after "
                    "redaction; nothing was shared. Remove the secret from the run's files."
                )


#: Salt of :func:`keyed`: fixed, so equal secrets give equal keys on every machine.
_KEY_SALT = b"pytest-modal-eval answer key"
#: PBKDF2 rounds of :func:`keyed`: slow enough that a short password is not guessed from it.
_KEY_ROUNDS = 200_000


def keyed(value: str) -> str:
    """A stand-in for a secret in a run's answer key: it changes when the secret changes, and
    does not give it away (a slow salted hash, cut to 16 hex digits)."""
    digest = hashlib.pbkdf2_hmac("sha256", value.encode(), _KEY_SALT, _KEY_ROUNDS)
    return f"[secret {digest.hex()[:16]}]"


def mask_args(args: Iterable[Any]) -> list[Any]:
    """A command line (``vllm.extra_args``) with the value of every secret-named flag
    (``--api-key X``, ``--hf-token=X``) replaced by :func:`keyed`: what run records hold."""
    return _replace_secret_args(args, keyed)


def redact_args(args: Iterable[Any]) -> list[Any]:
    """A command line with the value of every secret-named flag replaced by ``[redacted]``:
    what a log shows of a command it ran."""
    return _replace_secret_args(args, lambda _: REDACTED)


def _replace_secret_args(args: Iterable[Any], replace: Callable[[str], str]) -> list[Any]:
    out: list[Any] = []
    secret_next = False
    for arg in args:
        if secret_next and isinstance(arg, str):
            out.append(replace(arg))
            secret_next = False
            continue
        secret_next = False
        if isinstance(arg, str) and arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if is_secret_name(name.replace("-", "_")):
                if eq:
                    out.append(f"--{name}={replace(value)}")
                    continue
                secret_next = True
        out.append(arg)
    return out


def mask_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """``env_args`` with the value under every secret-named key (at any depth, in mappings and
    lists) replaced by :func:`keyed` of it (of its ``repr`` when it is not a string), and the
    ``user:password`` of every URL in a string by :func:`keyed` of it."""
    masked: dict[str, Any] = _replace_secrets(
        values,
        lambda value: keyed(value if isinstance(value, str) else repr(value)),
        lambda text: _replace_url_userinfo(text, keyed),
    )
    return masked


def _replace_secrets(value: Any, secret: Callable[[Any], Any], string: Callable[[str], str]) -> Any:
    """A copy of the JSON-like ``value`` with the (non-empty) value under every secret-named key
    replaced by ``secret(value)`` and every other string by ``string(text)``, at any depth."""
    if isinstance(value, Mapping):
        return {
            str(k): (
                secret(v) if is_secret_name(str(k)) and v else _replace_secrets(v, secret, string)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_replace_secrets(v, secret, string) for v in value]
    if isinstance(value, str):
        return string(value)
    return value


def _replace_url_userinfo(text: str, replace: Callable[[str], str]) -> str:
    """``text`` with the ``user:password`` of every URL in it replaced by ``replace(it)``."""
    return URL_USERINFO.sub(lambda match: f"{replace(match.group(1))}@", text)


def mask_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A benchmark configuration as JSON (``BenchmarkConfig.model_dump``) with the secrets in
    ``env_args`` and ``vllm.extra_args`` replaced by :func:`keyed`: what run records hold."""
    out = mask_profile(config)
    if isinstance(out.get("env_args"), Mapping):
        out["env_args"] = mask_mapping(out["env_args"])
    return out


def mask_profile(profile: Mapping[str, Any]) -> dict[str, Any]:
    """A server profile (``ServerRequest.profile``) with its ``vllm.extra_args`` secrets replaced
    by :func:`keyed`: what ``run_config.json`` records as ``server_profile``."""
    out = dict(profile)
    vllm = out.get("vllm")
    if isinstance(vllm, Mapping) and vllm.get("extra_args"):
        out["vllm"] = {**vllm, "extra_args": mask_args(vllm["extra_args"])}
    return out

"""Keeping secrets out of what is written and shared: by key name, by value, and a last check
on the bytes.

A secret can reach a run's files two ways: under a key that names it (``env_args.api_key``,
``headers.authorization``) or as the value of an environment variable that the run used
(``OPENAI_API_KEY``, ``HF_TOKEN``) turning up in some text -- a server that echoes the request's
``Authorization`` header in its error message, for one. :class:`Redactor` knows the secret
values a session holds (``collect.context.session_redactor``, then each benchmark's settings)
and replaces them, as written and in the escaped forms text takes on its way out (JSON and
Python string escapes, URL and HTML encoding); :meth:`Redactor.check` refuses bytes that still
hold one, so a file nobody thought to redact fails loudly instead of leaking. Run records
(``run_config.json``, the resume index in ``.pytest_cache``) hold an HMAC of each secret
setting, and of the ``user:password`` of each URL, under a random key that never leaves this
machine, instead of its value (:func:`mask_config`), so the answer key still changes when a
secret does and gives nothing away.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import hmac
import html
import json
import logging
import os
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
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
#: Environment variable names whose values are secrets however they are named: a name written
#: in capitals that ends in ``_KEY`` (``AZURE_OPENAI_KEY``, ``MISTRAL_KEY``); ``answer_key`` in
#: a benchmark's ``env_args`` is a setting, not a secret.
SECRET_VARIABLE = re.compile(r"(?:^|_)KEYS?$")
#: ``scheme://user:password@host``: the credentials of a URL (group 1, without the ``@``).
URL_USERINFO = re.compile(r"(?<=://)([^/@\s\"':]*:[^/@\s\"']+)@")
#: Environment values shorter than this are not searched for (too many false matches).
MIN_SECRET_LENGTH = 8
#: A secret made of lower-case letters alone (``password``, ``example_id``): an ordinary word,
#: which text says for other reasons and the plugin may write itself (see :class:`Redactor`).
_WORD = re.compile(r"[a-z]+(?:[_-][a-z]+)*")
#: Values the chat protocol writes as structure (roles, finish reasons): kept as they are in
#: structured outputs, whatever a secret says, so that a record still reads as a conversation.
PROTOCOL_WORDS = frozenset(
    {"system", "user", "assistant", "tool", "developer", "function", "stop", "length",
     "tool_calls", "content_filter", "chat.completion"}
)  # fmt: skip
#: An Authorization header's value: the credential after its scheme is a secret of its own.
_AUTH_SCHEME = re.compile(r"(?:bearer|basic|token|bot|apikey)\s+(\S.*)", re.IGNORECASE | re.DOTALL)
#: ``{name: <secret-looking name>, value: X}``: the keys a pair's name is under, and its value.
PAIR_NAME_KEYS = frozenset({"name", "key", "header", "field", "variable", "env"})
PAIR_VALUE_KEYS = frozenset({"value", "val"})
#: Characters no encoding of :func:`secret_forms` changes, and the shortest run of them in a
#: secret worth a fast first check of a text (see ``Redactor.text``).
_PLAIN = re.compile(r"[A-Za-z0-9]+")
MIN_CORE_LENGTH = 4


#: A camelCase word boundary (``authToken``, ``openaiApiKey``): read as ``_``.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


#: Variables the plugin itself reads credentials from (Modal, the vLLM server's key, the Hub),
#: secret whatever :func:`is_secret_name` says of their names (``MODAL_TOKEN_ID``).
KNOWN_SECRET_VARIABLES = (
    "OPENAI_API_KEY",
    "MODAL_TOKEN_ID",
    "MODAL_TOKEN_SECRET",
    "MODAL_PROXY_TOKEN_ID",
    "MODAL_PROXY_TOKEN_SECRET",
    "VLLM_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
)
#: ``env_args`` keys whose value names an environment variable holding a secret (a v1 judge's
#: ``api_key_var``), and keys whose mapping's values do (``headers_from_env``: header ->
#: variable).
VARIABLE_NAME_KEYS = re.compile(r"(?:^|_)(?:key|token|secret)_(?:var|env)$", re.IGNORECASE)
VARIABLE_MAP_KEYS = frozenset({"headers_from_env"})


def is_secret_name(name: str) -> bool:
    """Whether a key or variable called ``name`` holds a secret (see :data:`SECRET_NAME`; an
    environment-style name in capitals ending in ``_KEY`` too)."""
    if name.isupper() and SECRET_VARIABLE.search(name):
        return True
    return bool(SECRET_NAME.search(_CAMEL.sub("_", name)))


def _escapes(text: str) -> set[str]:
    """``text`` as each encoding on the way out writes it: JSON (ASCII and not; as PHP writes
    it, with ``\\/``; as Go does, with ``<>&`` as ``\\u003c``...; every character but letters
    and digits as ``\\uXXXX``, either case), a Python ``repr`` (either quote), URL (path and
    form) and HTML."""
    ascii_json = json.dumps(text)[1:-1]
    unicode_json = json.dumps(text, ensure_ascii=False)[1:-1]
    return {
        ascii_json,
        unicode_json,
        ascii_json.replace("/", "\\/"),
        unicode_json.translate(_GO_ESCAPES),
        _escape_all(text, "{:04x}"),
        _escape_all(text, "{:04X}"),
        repr(text)[1:-1],
        repr(f"'\"{text}")[4:-1],  # quoted with ', escaping it
        urllib.parse.quote(text, safe=""),
        urllib.parse.quote_plus(text, safe=""),
        html.escape(text),
        html.escape(text, quote=False),
    }


_GO_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})


def _escape_all(text: str, digits: str) -> str:
    """``text`` as JSON with every character but ASCII letters and digits written as
    ``\\uXXXX`` (UTF-16 code units, hex ``digits`` in either case)."""
    data = text.encode("utf-16-be", "surrogatepass")
    units = (int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    return "".join(
        chr(u) if u < 128 and chr(u).isalnum() else "\\u" + digits.format(u) for u in units
    )


#: A secret longer than this (a key file) is searched for through one encoding, not two: its
#: lines and inner values, each searched for through two, cover the rest, and the forms of a
#: long text through two would cost a session seconds to compile.
TWICE_MAX = 256


def secret_forms(value: str) -> set[str]:
    """``value`` and the forms it takes through one or two encodings (a key echoed in a JSON
    error body, quoted again in an exception's ``repr``, then written to a JSON file); one
    only when it is longer than :data:`TWICE_MAX`."""
    once = _escapes(value) | {value}
    if len(value) > TWICE_MAX:
        return once
    return once | {twice for form in once for twice in _escapes(form)}


class Redactor:
    """Replaces secrets in JSON values and text; ``values`` are the secret strings to find.

    One per process of a session (``collect.context.session_redactor``), learning more as
    benchmarks load (:meth:`learn`, :meth:`learn_env_args`); the plugin hands it to
    everything that writes or prints.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: list[str] = []
        self._lock = threading.Lock()
        self._forms: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        # A part of each secret that every form keeps (letters, digits, - and _): text without
        # any of them holds no secret, and is not searched further. None: some secret has none.
        self._cores: list[str] | None = []
        # Those that must know every secret this one knows (see tell): another process's
        # redactor, a local vLLM's log supervisor.
        self._listeners: list[Callable[[list[str]], None]] = []
        # Each secret's forms; those check() looks for (no plain word); the secrets that are
        # numbers.
        self._forms_of: dict[str, set[str]] = {}
        self._checked: list[str] = []
        self._numbers: frozenset[str] = frozenset()
        #: Configured secrets the redactor cannot keep out of text as the others (one line
        #: each, naming where the secret was set, never its value): see :meth:`take_notices`.
        self.notices: list[str] = []
        self._noted: set[str] = set()
        self.learn(values)

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, names: Iterable[str] = ()
    ) -> Redactor:
        """Secrets are the values of environment variables with secret-looking names, of
        :data:`KNOWN_SECRET_VARIABLES` and of ``names``."""
        env = os.environ if environ is None else environ
        redactor = cls()
        # Each by its name: one too short or a plain word is noted (see learn).
        found = [name for name in env if is_secret_name(name)]
        redactor.learn_variables([*found, *KNOWN_SECRET_VARIABLES, *names], env)
        return redactor

    def learn(self, values: Iterable[Any], source: str | None = None) -> None:
        """Add secret values, and every text each can be written as (:func:`secret_texts`).
        Too short ones are not searched for (too many false matches); with ``source`` (where
        the secret was configured: a variable's name, ``env_args.judge.api_key``), that, and
        a value that is a plain word, is said once in :attr:`notices`."""
        self._learn_named((source, value) for value in values)

    def _learn_named(self, values: Iterable[tuple[str | None, Any]]) -> None:
        """:meth:`learn` of each ``(source, value)``, the patterns built once for all."""
        found: set[str] = set()
        for source, value in values:
            texts = secret_texts(value)
            found |= texts
            if source is not None:
                self._note(source, value, texts)
        new = {v for v in found if len(v) >= MIN_SECRET_LENGTH} - set(self.values)
        if not new:
            return
        with self._lock:
            # Longest first, so a secret containing another is replaced whole.
            self.values = sorted({*self.values, *new}, key=len, reverse=True)
            for value in new:  # a secret's forms are worked out once
                self._forms_of[value] = {
                    f for f in secret_forms(value) if len(f) >= MIN_SECRET_LENGTH
                }
            forms = set().union(*self._forms_of.values())
            self._forms = sorted(forms, key=len, reverse=True)
            self._pattern = re.compile("|".join(map(re.escape, self._forms)))
            cores = {max(_PLAIN.findall(v) or [""], key=len) for v in self.values}
            self._cores = sorted(cores) if all(len(c) >= MIN_CORE_LENGTH for c in cores) else None
            # A plain word is not looked for in files about to be shared: they hold the
            # plugin's own words (field names), which no redaction may rewrite.
            checked = {f for v, fs in self._forms_of.items() if not _WORD.fullmatch(v) for f in fs}
            self._checked = sorted(checked)
            self._numbers = frozenset(v for v in self.values if _is_number(v))
        for send in list(self._listeners):
            send(sorted(new))

    def _note(self, source: str, value: Any, texts: set[str]) -> None:
        """A line in :attr:`notices` (once per ``source``) when the secret configured there
        cannot be kept out of text as the rest are: too short, or a plain word."""
        text = value.strip() if isinstance(value, str) else next(iter(texts), "")
        if not text or source in self._noted:
            return
        if len(text) < MIN_SECRET_LENGTH:
            problem = (
                f"its value is {len(text)} characters long, shorter than the "
                f"{MIN_SECRET_LENGTH} a secret must have to be searched for in text (a shorter "
                "one matches ordinary text): an echo of it in an answer, an error or a log is "
                "not redacted"
            )
        elif _WORD.fullmatch(text):
            problem = (
                "its value is a plain word: it is replaced by [redacted] wherever that word "
                "appears in what the run writes or prints, but not in the names the plugin "
                "writes itself (field names, roles), and a word is easily guessed"
            )
        else:
            return
        self._noted.add(source)
        self.notices.append(
            f"{source}: {problem}; use a long random secret (see docs/security.md, Limits)"
        )

    def take_notices(self) -> list[str]:
        """The :attr:`notices` not taken yet (each is given out once)."""
        with self._lock:
            taken, self.notices = self.notices, []
        return taken

    def tell(self, send: Callable[[list[str]], None]) -> None:
        """Hand every secret this redactor knows to ``send``: those it knows now at once, and
        each one :meth:`learn` adds before it returns, so that the other side knows it before
        this process goes on (an xdist worker tells the controller, which writes the servers'
        logs, see ``serving.broker``; a local vLLM's supervisor, which keeps secrets out of its
        log). An error of ``send`` is raised to the caller."""
        self._listeners.append(send)
        if self.values:
            send(list(self.values))

    def stop_telling(self, send: Callable[[list[str]], None]) -> None:
        """``send`` hears of no more secrets."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(send)

    def learn_variables(
        self, names: Iterable[str], environ: Mapping[str, str] | None = None
    ) -> None:
        """Add the values of the environment variables ``names`` (those that are set)."""
        env = os.environ if environ is None else environ
        self._learn_named((name, env[name]) for name in names if env.get(name))

    def learn_env_args(
        self, env_args: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> None:
        """Add a benchmark's secret settings: the values under secret-named keys (at any
        depth), and the values of the variables its judges read keys from (``api_key_var``,
        ``headers_from_env``)."""
        values: list[tuple[str, Any]] = []
        variables: list[str] = []
        _find_secrets(env_args, values, variables, "env_args")
        env = os.environ if environ is None else environ
        self._learn_named([*values, *((name, env[name]) for name in variables if env.get(name))])

    def text(self, text: str) -> str:
        pattern = self._pattern
        if pattern is not None and len(text) >= MIN_SECRET_LENGTH and self._may_hold(text):
            text = pattern.sub(REDACTED, text)
        return _replace_url_userinfo(text, lambda _: REDACTED)

    def to_json(self) -> dict[str, Any]:
        """What another process needs to redact text as :meth:`text` does (the forms to find,
        the fast first check, the URL credentials pattern): handed to the supervisor of a local
        vLLM through a pipe, never its command line or environment."""
        return {
            "forms": list(self._forms),
            "cores": self._cores,
            "userinfo": URL_USERINFO.pattern,
            "replacement": REDACTED,
        }

    def _may_hold(self, text: str) -> bool:
        if self._cores is None:
            return True
        return any(core in text for core in self._cores)

    def json(
        self, value: Any, by_name: bool = True, default: Callable[[Any], Any] | None = None
    ) -> Any:
        """A copy of ``value`` with secret strings replaced and, ``by_name``, the values under
        secret-named keys too (a run's records keep what the model wrote under any key).
        ``default`` turns what is not JSON (a pydantic message) into JSON first, as
        ``json.dumps(default=...)`` would."""
        if not by_name:
            # One pass in C first: most values (a run's records) hold nothing to replace.
            try:
                probe = json.dumps(value, default=default or repr, ensure_ascii=False)
            except (TypeError, ValueError):  # keys json cannot write: look at every string
                probe = "://"
            if "://" not in probe and (self._pattern is None or not self._may_hold(probe)):
                return value
            return _replace_strings(value, self._value, default)
        return _replace_secrets(value, lambda _: REDACTED, self._value)

    def _value(self, value: str | int | float) -> Any:
        """A value of a structured output, redacted: a string as :meth:`text` does (but for
        :data:`PROTOCOL_WORDS`), a number whose text is a secret as ``[redacted]``."""
        if isinstance(value, str):
            return value if value in PROTOCOL_WORDS else self.text(value)
        if self._numbers and not isinstance(value, bool) and str(value) in self._numbers:
            return REDACTED
        return value

    def check(self, name: str, data: bytes) -> None:
        """Raise if ``data`` (a file about to leave this machine) holds a known secret (but a
        plain word, which the plugin's own field names may be)."""
        for form in self._checked:
            if form.encode() in data:
                raise ShareError(
                    f"{name} still contains the value of a secret environment variable or "
                    "setting after redaction; nothing was shared. Remove the secret from the "
                    "run's files."
                )


def redact(record: logging.LogRecord, redactor: Redactor) -> None:
    """Replace the secrets in ``record``'s formatted message, traceback and stack in place."""
    try:
        message = record.getMessage()
    except Exception:  # a malformed call: logging reports it when a handler formats it
        return
    clean = redactor.text(message)
    if clean != message:
        record.msg, record.args = clean, None
    # A traceback is formatted here only when it holds a secret: otherwise each handler still
    # formats it its own way.
    shown = record.exc_text
    if record.exc_info and not shown:
        shown = logging.Formatter().formatException(record.exc_info)
    if shown and redactor.text(shown) != shown:
        record.exc_text = redactor.text(shown)
    if record.stack_info:
        record.stack_info = redactor.text(record.stack_info)


def secret_texts(value: Any) -> set[str]:
    """Every text a secret ``value`` can be written as, stripped: a string as it is; a number
    or boolean as Python and JSON write it (``12345678``, ``True``, ``true``); a date or time
    (YAML reads ``2024-01-31`` unquoted as one) as ``str``, ISO and ``repr`` write it; the
    strings of a mapping or list, each so. A string of several lines gives each line too, and
    the value with ``\\r\\n`` or ``\\n`` line breaks (a log copies it a line at a time, or
    rewrites the breaks); an ``Authorization`` value (``Bearer K``, ``Basic dTpw``) gives its
    credential (and what a ``Basic`` one decodes to, ``user:password`` and the password); a
    JSON object or list gives every string and number inside it, each so."""
    found: set[str] = set()
    _collect_texts(value, found, depth=0)
    return {text for text in found if text}


def _collect_texts(value: Any, found: set[str], depth: int, derived: bool = False) -> None:
    """Add to ``found`` the texts of ``value``; ``derived``: ``value`` is a part of a secret
    (a line, a value inside its JSON), not a secret given as such."""
    if depth > 8:  # a secret nested deeper than this is not a setting anyone writes
        return
    if isinstance(value, (bool, int, float)):  # True and JSON's true, 1e-05 and 1e-05
        found |= {str(value), json.dumps(value)}
    elif isinstance(value, (datetime.date, datetime.time)):  # YAML's unquoted 2024-01-31
        found |= {str(value), value.isoformat(), repr(value)}
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect_texts(item, found, depth + 1, derived)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_texts(item, found, depth + 1, derived)
    elif isinstance(value, str):
        text = value.strip()
        # A part with no run of letters or digits long enough for the redactor's fast first
        # check (``-----END KEY-----``, ``},``) would turn that check off for every text;
        # alone, such a part gives nothing away.
        if not text or text in found or (derived and _core(text) < MIN_CORE_LENGTH):
            return
        found.add(text)
        if "\n" in text or "\r" in text:
            for line in text.splitlines():
                _collect_texts(line, found, depth + 1, derived=True)
            unix = text.replace("\r\n", "\n")
            found |= {unix, unix.replace("\n", "\r\n")}
        credential = _AUTH_SCHEME.fullmatch(text)
        if credential is not None:
            _collect_texts(credential.group(1), found, depth + 1, derived)
            if text[:5].lower() == "basic":
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    pair = base64.b64decode(credential.group(1).strip(), validate=True).decode()
                    found |= {pair, pair.partition(":")[2]}
        if text[:1] in "{[":
            with contextlib.suppress(ValueError, RecursionError):
                _collect_texts(json.loads(text), found, depth + 1, derived=True)


def _core(text: str) -> int:
    """The length of ``text``'s longest run of letters and digits."""
    return max(map(len, _PLAIN.findall(text)), default=0)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _secret_pair_key(value: Mapping[Any, Any]) -> Any:
    """The key of the value of a ``{name: <secret-looking name>, value: X}`` mapping (a
    Kubernetes ``env`` entry, a header given as ``{key: ..., value: ...}``), else None."""
    named = any(
        str(key).lower() in PAIR_NAME_KEYS and isinstance(item, str) and is_secret_name(item)
        for key, item in value.items()
    )
    if not named:
        return None
    return next((key for key in value if str(key).lower() in PAIR_VALUE_KEYS), None)


def _is_secret_pair(value: Sequence[Any]) -> bool:
    """``[<secret-looking name>, X]`` with a plain ``X`` (``[Authorization, "Bearer K"]``)."""
    return (
        len(value) == 2
        and isinstance(value[0], str)
        and is_secret_name(value[0])
        and isinstance(value[1], (str, int, float))
    )


def _find_secrets(
    value: Any, values: list[tuple[str, Any]], variables: list[str], where: str
) -> None:
    """Collect ``(where it is, value)`` of the values under secret-named keys of ``value``, of
    its ``{name: <secret name>, value: X}`` mappings and ``[<secret name>, X]`` pairs (at any
    depth) and of its URLs' passwords into ``values``, and the variable names under
    :data:`VARIABLE_NAME_KEYS` / :data:`VARIABLE_MAP_KEYS` into ``variables``."""
    if isinstance(value, Mapping):
        pair_key = _secret_pair_key(value)
        for key, item in value.items():
            name = str(key)
            here = f"{where}.{name}"
            if VARIABLE_NAME_KEYS.search(name) and isinstance(item, str):
                variables.append(item)
            elif name in VARIABLE_MAP_KEYS and isinstance(item, Mapping):
                variables.extend(str(v) for v in item.values())
            elif is_secret_name(name) or (pair_key is not None and key == pair_key):
                values.append((here, item))
            else:
                _find_secrets(item, values, variables, here)
    elif isinstance(value, (list, tuple)):
        if _is_secret_pair(value):
            values.append((f"{where}[1]", value[1]))
            return
        # A command line kept in a setting: ``[--api-key, X]``, ``[--token=X]``.
        values.extend((where, found) for found in secret_arg_values(value))
        for index, item in enumerate(value):
            _find_secrets(item, values, variables, f"{where}[{index}]")
    elif isinstance(value, str):
        match = URL_USERINFO.search(value)
        if match:
            values.append((where, match.group(1).partition(":")[2]))


def _replace_strings(
    value: Any, replace: Callable[[Any], Any], default: Callable[[Any], Any] | None
) -> Any:
    """A copy of the JSON-like ``value`` with every string and number ``v`` as
    ``replace(v)``; keys are kept as they are (they are the writer's names, not data); any
    other object is ``default(object)``, replaced in turn."""
    kind = type(value)
    if kind is str:
        return replace(value)
    if value is None or kind is bool:
        return value
    if kind is int or kind is float:
        return replace(value)
    if kind is dict or isinstance(value, Mapping):
        return {str(k): _replace_strings(v, replace, default) for k, v in value.items()}
    if kind is list or isinstance(value, (list, tuple)):
        return [_replace_strings(v, replace, default) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int, float)):
        return replace(value)
    return value if default is None else _replace_strings(default(value), replace, default)


#: How a secret setting's stand-in is written (:func:`keyed`), and how to find one.
STAND_IN = re.compile(r"\[secret [0-9a-f]{16}\]")
#: What :func:`comparable_stand_ins` puts in place of every stand-in.
ANY_SECRET = "[secret]"


def keyed(value: str, key: bytes) -> str:
    """A stand-in for a secret in a run's answer key: it changes when the secret changes, and
    gives nothing away to whoever lacks ``key`` (an HMAC under a random key kept on this
    machine only, ``runs.local_key``), cut to 16 hex digits."""
    digest = hmac.new(key, value.encode(), hashlib.sha256).hexdigest()
    return f"[secret {digest[:16]}]"


def comparable_stand_ins(value: Any) -> Any:
    """``value`` (JSON-like) with every :func:`keyed` stand-in as :data:`ANY_SECRET`: what two
    runs made under different keys (another machine's, another output directory's) compare
    as, since a secret's value is not what makes two runs comparable."""
    if isinstance(value, str):
        return STAND_IN.sub(ANY_SECRET, value)
    if isinstance(value, Mapping):
        return {k: comparable_stand_ins(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [comparable_stand_ins(v) for v in value]
    return value


def mask_args(args: Iterable[Any], key: bytes) -> list[Any]:
    """A command line (``vllm.extra_args``) with the value of every secret-named flag
    (``--api-key X``, ``--hf-token=X``) replaced by :func:`keyed`: what run records hold."""
    return _replace_secret_args(args, lambda value: keyed(value, key))


def redact_args(args: Iterable[Any]) -> list[Any]:
    """A command line with the value of every secret-named flag replaced by ``[redacted]``:
    what a log shows of a command it ran."""
    return _replace_secret_args(args, lambda _: REDACTED)


#: Where vLLM reads each secret flag's value from instead of its command line, and how a
#: Modal deployment gives it (``serving.modal.app``'s secrets).
_FLAG_FIXES = {
    "--hf-token": "set HF_TOKEN in the environment (--backend local) or in the Modal secret "
    "'huggingface' (--backend modal); vLLM reads it from there",
    "--api-key": "the local server needs no key; on Modal, vLLM reads VLLM_API_KEY from the "
    "Modal secret 'vllm-api-key'",
}


def secret_flags(args: Iterable[Any]) -> list[str]:
    """The secret-named flags of a command line (``--hf-token``, ``--api-key=...``), each once,
    without their values."""
    found: list[str] = []
    for arg in args:
        if isinstance(arg, str) and arg.startswith("--"):
            name = arg.partition("=")[0]
            if is_secret_name(name[2:].replace("-", "_")) and name not in found:
                found.append(name)
    return found


def secret_flags_problem(args: Iterable[Any]) -> str | None:
    """Why ``vllm.extra_args`` may not hold these flags, and the fix, without their values;
    None when it holds none. A command line is readable by every local user
    (``/proc/PID/cmdline``, ``ps``), vLLM's and its supervisor's alike."""
    flags = secret_flags(args)
    if not flags:
        return None
    fixes = "; ".join(
        f"{flag}: "
        + _FLAG_FIXES.get(flag, "give vLLM the value through an environment variable it reads")
        for flag in flags
    )
    return (
        f"{', '.join(flags)} would put a secret on vLLM's command line, which every local user "
        f"can read; remove {'it' if len(flags) == 1 else 'them'} ({fixes})"
    )


def secret_arg_values(args: Iterable[Any]) -> list[str]:
    """The values of a command line's secret-named flags (``--api-key X``, ``--hf-token=X``)."""
    found: list[str] = []

    def keep(value: str) -> str:
        found.append(value)
        return value

    _replace_secret_args(args, keep)
    return found


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


def holds_secret(key: str, value: Any) -> bool:
    """Whether setting the dotted ``key`` to ``value`` writes a secret: a secret-named part of
    the key, a secret-named key inside the value, a URL with a password or a secret flag's
    value (``--api-key X``) in it."""
    if any(is_secret_name(part) for part in key.split(".")):
        return True
    redacted = _replace_secrets(
        {"value": value},
        lambda _: REDACTED,
        _urls_only(lambda _: REDACTED),
    )["value"]
    if isinstance(value, list):
        redacted = redact_args(redacted)
    return bool(redacted != value)


def mask_mapping(values: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    """``env_args`` with the value under every secret-named key (at any depth, in mappings and
    lists) replaced by :func:`keyed` of it (of its ``repr`` when it is not a string), and the
    ``user:password`` of every URL in a string by :func:`keyed` of it."""
    return _mask_mapping(values, lambda found: keyed(found, key))


def _mask_mapping(values: Mapping[str, Any], stand_in: Callable[[str], str]) -> dict[str, Any]:
    masked: dict[str, Any] = _replace_secrets(
        values,
        lambda value: stand_in(value if isinstance(value, str) else repr(value)),
        _urls_only(stand_in),
    )
    return masked


def _replace_secrets(value: Any, secret: Callable[[Any], Any], string: Callable[[Any], Any]) -> Any:
    """A copy of the JSON-like ``value`` with the (non-empty) value under every secret-named
    key, of every ``{name: <secret name>, value: X}`` mapping and ``[<secret name>, X]`` pair
    replaced by ``secret(value)`` and every other string (and number) by ``string(it)``, at
    any depth; keys are kept as they are."""
    if isinstance(value, Mapping):
        pair_key = _secret_pair_key(value)
        return {
            str(k): (
                secret(v)
                if v and (is_secret_name(str(k)) or (pair_key is not None and k == pair_key))
                else _replace_secrets(v, secret, string)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        if _is_secret_pair(value) and value[1]:
            return [value[0], secret(value[1])]
        flagged = _replace_secret_args(value, secret)  # [--api-key, X], [--token=X]
        return [
            v if v is not old else _replace_secrets(v, secret, string)
            for v, old in zip(flagged, value, strict=True)
        ]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (str, int, float)):
        return string(value)
    return value


def _urls_only(replace: Callable[[str], str]) -> Callable[[Any], Any]:
    """For :func:`_replace_secrets`: a string with its URLs' ``user:password`` as
    ``replace(it)``; anything else (a number) as it is."""
    return lambda value: _replace_url_userinfo(value, replace) if isinstance(value, str) else value


def _replace_url_userinfo(text: str, replace: Callable[[str], str]) -> str:
    """``text`` with the ``user:password`` of every URL in it replaced by ``replace(it)``."""
    if "://" not in text:
        return text
    return URL_USERINFO.sub(lambda match: f"{replace(match.group(1))}@", text)


def mask_config(config: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    """A benchmark configuration as JSON (``BenchmarkConfig.model_dump``) with the secrets in
    ``env_args`` and ``vllm.extra_args`` replaced by :func:`keyed`: what run records hold."""
    return _mask_config(config, lambda found: keyed(found, key))


def redacted_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`mask_config` with ``[redacted]`` for each secret: what is shown of a
    configuration (``--collect-only -v``), where no stand-in has to be compared."""
    return _mask_config(config, lambda _: REDACTED)


def _mask_config(config: Mapping[str, Any], stand_in: Callable[[str], str]) -> dict[str, Any]:
    out = _mask_profile(config, stand_in)
    if isinstance(out.get("env_args"), Mapping):
        out["env_args"] = _mask_mapping(out["env_args"], stand_in)
    return out


def mask_profile(profile: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    """A server profile (``ServerRequest.profile``) with its ``vllm.extra_args`` secrets replaced
    by :func:`keyed`: what ``run_config.json`` records as ``server_profile``."""
    return _mask_profile(profile, lambda found: keyed(found, key))


def _mask_profile(profile: Mapping[str, Any], stand_in: Callable[[str], str]) -> dict[str, Any]:
    out = dict(profile)
    vllm = out.get("vllm")
    if isinstance(vllm, Mapping) and vllm.get("extra_args"):
        out["vllm"] = {**vllm, "extra_args": _replace_secret_args(vllm["extra_args"], stand_in)}
    return out


def secret_variables(env_args: Mapping[str, Any]) -> list[str]:
    """The environment variables a benchmark's settings name as holding secrets (a judge's
    ``api_key_var``, ``headers_from_env``): what a detached session sends to its container."""
    values: list[tuple[str, Any]] = []
    variables: list[str] = []
    _find_secrets(env_args, values, variables, "env_args")
    return variables

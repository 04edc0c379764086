"""The random key a run's answer key digests secret settings under (``redact.keyed``): kept in
the output directory, beside the runs and never inside one, so nothing that leaves the machine
with a run (``push``, a copied run directory, MLflow) holds it.

Without the key, a stand-in such as ``[secret 1a2b3c4d5e6f7a8b]`` in ``run_config.json`` (and
the answer hash computed over it) tells nothing of the secret, however short: an HMAC cannot be
computed from a guess alone. With it, the same secret gives the same stand-in in every run of
the output directory, so a run is continued while its secrets stay the same and a new run
starts when one changes. The output directory carries its key: a copy of the whole directory
(a CI cache, another machine) continues its runs there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from pytest_modal_eval.exceptions import RunFileError

#: The key's file in the output directory (hidden; mode 0600).
KEY_FILE = ".secret-key"
_KEY_BYTES = 32


def local_key(output_dir: Path) -> bytes:
    """The output directory's key, made (readable by this user only) the first time. Two
    processes making it at once end up with the same one."""
    path = output_dir / KEY_FILE
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    _install(output_dir, secrets.token_bytes(_KEY_BYTES))
    return _read(path)


def share_key(from_dir: Path, to_dir: Path) -> None:
    """Give ``to_dir`` the key of ``from_dir`` (made there if it has none), unless it has one:
    a shard's output directory gets the session's, so its runs have the benchmark's own
    answer key."""
    key = local_key(from_dir)
    if not (to_dir / KEY_FILE).exists():
        _install(to_dir, key)


def _install(output_dir: Path, key: bytes) -> None:
    """Write ``key`` as ``output_dir``'s key unless it has one (readable by this user only)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    fresh = output_dir / f"{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(key.hex() + "\n")
        # A link fails when the key exists: whoever made it first, the key is theirs.
        with contextlib.suppress(FileExistsError):
            os.link(fresh, output_dir / KEY_FILE)
    finally:
        fresh.unlink(missing_ok=True)


def _read(path: Path) -> bytes:
    try:
        text = path.read_text(encoding="ascii").strip()
        key = bytes.fromhex(text)
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != _KEY_BYTES:
        raise RunFileError(
            f"{path}: not a key this plugin wrote ({_KEY_BYTES * 2} hex digits); remove the file "
            "(runs of secret settings made under it are then not continued) and run again"
        )
    return key

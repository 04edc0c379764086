"""A model's identity: which weights answer, as the answer key holds it (a model's names are
``model_names.py``'s).

A finished run is reused when its answer key matches, and the model's *name* does not say
which weights answer: a checkpoint directory is overwritten, a Hub id gets a new commit, a
``--base-url`` server is restarted on another checkpoint. So the key holds one of:

- a local directory: a digest of its model files' contents (:func:`local_identity`). Hashing
  weights takes time, so the digest is kept with the files' names, sizes and times; while
  those are unchanged, the kept digest is used.
- a Hub id: the commit it resolves to (:func:`hub_identity`): ``vllm.revision`` when that is a
  commit, else the commit the Hub names for the revision (default ``main``) right now, or,
  for a server on this machine when the Hub cannot be asked, the commit in the local cache.
  The server is then started at that commit (:func:`pin_revision`).
- a ``--base-url`` endpoint: what its ``/v1/models`` says of the served model
  (:func:`served_identity`): its id, ``root`` (the path vLLM loaded) and ``max_model_len``.

When the Hub or the endpoint cannot be asked, the identity is *unchecked*: ``key`` is None and
``unchecked`` says why. A finished run may then be reused, with a note saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval import phases
from pytest_modal_eval.config.backends import backend

if TYPE_CHECKING:
    from pytest_modal_eval.serving.endpoint import ServerRequest

#: Seconds to wait for the Hub's answer: a key lookup must not hold a CI job for long.
HUB_TIMEOUT = 5.0

#: Files of a model directory that decide its answers (what vLLM and transformers read).
MODEL_FILE_PATTERNS = (
    "*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.json", "*.model", "*.model.v*",
    "*.tiktoken", "*.txt", "*.jinja", "*.py",
)  # fmt: skip
#: Files a training run leaves beside a checkpoint that no server reads.
TRAINING_FILES = (
    "optimizer.pt", "scheduler.pt", "rng_state*.pth", "training_args.bin", "trainer_state.json",
)  # fmt: skip

_COMMIT = re.compile(r"[0-9a-f]{40}")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelIdentity:
    """The answer key's ``weights`` (None: unchecked) and what ``run_config.json`` records."""

    key: dict[str, Any] | None
    record: dict[str, Any] = field(default_factory=dict)
    unchecked: str | None = None  # why the weights could not be checked

    @property
    def hub_commit(self) -> str | None:
        """The Hub commit the weights are, when they are a Hub id's and it is known: what a
        server for them is started at."""
        key = self.key or {}
        commit = key.get("commit") if key.get("kind") == "hub" else None
        return commit if isinstance(commit, str) else None


def model_files(directory: Path) -> list[Path]:
    """The files of a model directory that decide its answers, by name."""
    found = []
    for path in sorted(directory.iterdir()):
        name = path.name
        if name.startswith(".") or not path.is_file():  # is_file follows the Hub's symlinks
            continue
        if any(fnmatch(name, p) for p in MODEL_FILE_PATTERNS) and not any(
            fnmatch(name, p) for p in TRAINING_FILES
        ):
            found.append(path)
    return found


def _signature(files: list[Path]) -> list[list[Any]]:
    # ctime too: copying with preserved times (cp -p, rsync -t) keeps mtime but not ctime.
    rows = []
    for path in files:
        st = path.stat()
        rows.append([path.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    return rows


def _digest(files: list[Path]) -> str:
    total = hashlib.sha256()
    for path in files:
        one = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                one.update(chunk)
        total.update(f"{path.name}\0{path.stat().st_size}\0{one.hexdigest()}\n".encode())
    return total.hexdigest()


class FingerprintStore:
    """Digests kept by directory, with the signature (names, sizes, times) they were made at:
    a JSON file per directory in pytest's cache, or nothing (then every run hashes)."""

    def __init__(self, cache: Any) -> None:  # pytest.Cache | None
        self.cache = cache

    def _key(self, directory: Path) -> str:
        return (
            "modal_eval/model_fingerprints/"
            + hashlib.sha256(str(directory).encode()).hexdigest()[:16]
        )

    def get(self, directory: Path, signature: list[list[Any]]) -> str | None:
        if self.cache is None:
            return None
        kept = self.cache.get(self._key(directory), None)
        if isinstance(kept, dict) and kept.get("signature") == signature:
            digest = kept.get("digest")
            return digest if isinstance(digest, str) else None
        return None

    def put(self, directory: Path, signature: list[list[Any]], digest: str) -> None:
        if self.cache is not None:
            value = {"path": str(directory), "signature": signature, "digest": digest}
            self.cache.set(self._key(directory), value)


def local_identity(directory: Path, store: FingerprintStore) -> ModelIdentity:
    """The content digest of a local model directory's model files (see :func:`model_files`)."""
    directory = directory.resolve()
    files = model_files(directory)
    signature = _signature(files)
    digest = store.get(directory, signature)
    hashed = digest is None
    if digest is None:
        size = sum(row[1] for row in signature) / 2**30
        # Minutes for a large checkpoint on a slow disk; kept while its files are unchanged.
        with phases.phase(f"hashing the weights in {directory} ({size:.1f} GiB)"):
            digest = _digest(files)
        store.put(directory, signature, digest)
    record = {
        "kind": "local",
        "path": str(directory),
        "digest": digest,
        "files": [[name, size] for name, size, _, _ in signature],
        "hashed": hashed,  # False: names, sizes and times unchanged, the kept digest used
    }
    return ModelIdentity({"kind": "local", "digest": digest}, record)


def hub_identity(
    model: str,
    revision: str | None,
    timeout: float = HUB_TIMEOUT,
    *,
    cache_serves: bool = False,
) -> ModelIdentity:
    """The commit a Hub id resolves to at ``revision`` (None: ``main``), asked of the Hub now
    with huggingface_hub (``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` apply).

    ``cache_serves``: the server runs on this machine, so when the Hub cannot be asked it
    loads the local Hugging Face cache, and the commit cached for ``revision`` is what answers.
    """
    base: dict[str, Any] = {"kind": "hub", "revision": revision}
    if revision is not None and _COMMIT.fullmatch(revision):
        key = {**base, "commit": revision}
        return ModelIdentity(key, {**key, "id": model, "resolved": "vllm.revision"})
    with phases.phase(f"asking the Hugging Face Hub which commit {model} is"):
        found = _ask_hub(model, revision, timeout)
    if isinstance(found, ModelIdentity):
        return found
    cached = cached_commit(model, revision) if cache_serves else None
    if cached is not None:
        key = {**base, "commit": cached}
        return ModelIdentity(key, {**key, "id": model, "resolved": "local cache"})
    return ModelIdentity(None, {**base, "id": model, "commit": None}, found)


def cached_commit(model: str, revision: str | None) -> str | None:
    """The commit of ``model`` at ``revision`` (None: ``main``) in the local Hugging Face
    cache (``HF_HUB_CACHE``), which a vLLM on this machine loads offline; None if not cached."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model, "config.json", revision=revision)
    except Exception:  # an id the cache cannot hold (a path, a malformed id): not cached
        return None
    # The cache keeps a revision's files under snapshots/<commit>/.
    commit = Path(found).parent.name if isinstance(found, str) else ""
    return commit if _COMMIT.fullmatch(commit) else None


def _ask_hub(model: str, revision: str | None, timeout: float) -> ModelIdentity | str:
    """The Hub's answer as an identity, or why there is none."""
    base: dict[str, Any] = {"kind": "hub", "revision": revision}
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return f"HF_HUB_OFFLINE is set: the Hub was not asked which commit {model} is"
    try:
        from huggingface_hub import HfApi

        info = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None).model_info(
            model, revision=revision, timeout=timeout
        )
        commit: str | None = info.sha
        problem = None if commit else "the Hub's answer named no commit"
    except Exception as exc:  # offline, unreachable, gated, unknown: all mean "cannot check"
        commit, problem = None, f"{type(exc).__name__}: {_first_line(exc)}"
    if commit is None:
        at = f"{model}@{revision or 'main'}"
        return f"the Hugging Face Hub could not say which commit {at} is ({problem})"
    key = {**base, "commit": commit}
    return ModelIdentity(key, {**key, "id": model, "resolved": "hub"})


def served_identity(entry: dict[str, Any] | None, problem: str | None) -> ModelIdentity:
    """What an endpoint's ``/v1/models`` entry for the served model says about it: ``id``,
    ``root`` and ``max_model_len`` (``created`` changes with every response, so not that)."""
    if entry is None:
        reason = f"the endpoint could not say which model it serves ({problem or 'no entry'})"
        return ModelIdentity(None, {"kind": "endpoint"}, reason)
    key = {"kind": "endpoint", **{k: entry.get(k) for k in ("id", "root", "max_model_len")}}
    return ModelIdentity(key, dict(key))


def describe_change(old: Any, new: Any) -> str:
    """One phrase for how the weights' identity changed, e.g. ``commit 1a2b3c4 -> 5d6e7f8``."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return f"{describe_weights(old)} -> {describe_weights(new)}"
    parts = [
        f"{name} {_field(old.get(name))} -> {_field(new.get(name))}"
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]
    return ", ".join(parts)


def describe_weights(weights: Any) -> str:
    """``commit 1a2b3c4d5e6f``, ``digest ...``, ``id m, root /models/m``; ``unchecked``."""
    if not isinstance(weights, dict):
        return _short(weights)
    return ", ".join(f"{k} {_short(v)}" for k, v in weights.items() if k != "kind" and v)


def _field(value: Any) -> str:
    """One field of an identity: a field the endpoint or Hub did not report is "none"."""
    return "none" if value is None else _short(value)


def _short(value: Any) -> str:
    if value is None:
        return "unchecked"
    text = str(value)
    return text[:12] if re.fullmatch(r"[0-9a-f]{16,}", text) else text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


# --- one request's model ---------------------------------------------------------------------

#: What a ``--base-url`` endpoint says it serves: its ``/v1/models`` entry, or why there is none.
ServedModel = Callable[["ServerRequest"], tuple[dict[str, Any] | None, str | None]]


class ModelIdentities:
    """Which weights answer each request, found once per process and model: the Hub is asked
    and a directory hashed once per process, not once per benchmark. One per process, owned by
    its worker session (``session/worker.py``); the benchmark items and ``eval_endpoint`` ask it.

    ``served``: what a ``--base-url`` endpoint says it serves; ``cache``: pytest's cache, where
    local directories' fingerprints are kept (None: every process hashes)."""

    def __init__(self, served: ServedModel, cache: Any) -> None:
        self._served = served
        self._fingerprints = FingerprintStore(cache)
        self._found: dict[str, ModelIdentity] = {}

    def of(self, request: ServerRequest) -> ModelIdentity:
        """What a ``--base-url`` endpoint says it serves, a local directory's content digest,
        or the commit the Hub resolves the id (and ``vllm.revision``) to now."""
        revision = request.vllm.get("revision")
        memo = json.dumps([request.backend, request.model, revision, request.base_url])
        if memo not in self._found:
            self._found[memo] = self._look_up(request, revision)
        return self._found[memo]

    def _look_up(self, request: ServerRequest, revision: str | None) -> ModelIdentity:
        spec = backend(request.backend)
        if spec.takes_base_url:
            return served_identity(*self._served(request))
        path = Path(request.model).expanduser()
        if path.is_dir():
            return local_identity(path, self._fingerprints)
        # A vLLM on this machine loads the local Hugging Face cache when the Hub cannot be
        # asked, so there the cached commit is what answers.
        return hub_identity(request.model, revision, cache_serves=spec.runs_here)


def pin_revision(request: ServerRequest, identity: ModelIdentity) -> ServerRequest:
    """``request`` started at the Hub commit its model's identity names, when ``vllm.revision``
    names none: otherwise vLLM would fetch whatever the branch points to when it starts (or,
    on Modal, a warm deployment would keep serving what it fetched before)."""
    commit = identity.hub_commit
    if commit is None or request.vllm.get("revision") == commit:
        return request
    return replace(request, pinned_revision=commit)


def served_revision_problem(request: ServerRequest, profile: Mapping[str, Any]) -> str | None:
    """Why the server ``profile`` describes does not answer with the commit ``request`` was
    pinned to (the server was started for another benchmark before the Hub moved), or None."""
    served = (profile.get("vllm") or {}).get("revision")
    if request.pinned_revision is None or served == request.pinned_revision:
        return None
    return (
        f"{request.model} resolved to commit {request.pinned_revision} for this benchmark, but "
        f"its server was started at {served} for another (the Hub moved during the session). "
        "Run again, or pin vllm.revision to a commit."
    )

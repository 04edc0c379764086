"""Push finished runs to a dataset repository on the Hugging Face Hub.

The repository holds one folder per benchmark x model (``{benchmark}--{org}--{model}``, as in
the output directory) with the latest pushed run's ``results.parquet``, ``metadata.json`` and
``run_config.json``, and a ``README.md`` dataset card covering every folder, old and new.

Pushing the same runs again changes nothing. Every file is built deterministically and
compared with the repository's copy by content hash (the git blob id of a regular file, the
sha256 of an LFS file, both from ``paths-info``); equal files are left out of the commit and,
with none left, no commit is made. ``huggingface_hub`` also drops unchanged files, but only
when the Hub's ``preupload`` answer carries each file's ``oid``; checking here does not depend
on that. The commit names the revision it was computed from (``parent_commit``), so a
concurrent push to the same repository is refused instead of overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.share.bundle import SharedRun, latest_per_config, results_parquet
from pytest_modal_eval.share.card import RESULTS_FILE, CardEntry, render_card

if TYPE_CHECKING:
    from huggingface_hub import HfApi

REPO_TYPE = "dataset"
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
RUN_FILES = ("metadata.json", "run_config.json")
LFS_UPLOAD_WARNING = r"Use 'content=<\.\.\.>' to upload raw bytes/text content"


def check_repo_id(value: str) -> str:
    if not REPO_ID.match(value) or ".." in value or value.endswith((".git", ".")):
        raise ShareError(
            f"{value!r} is not a Hub repository id; give ORG/NAME, e.g. my-org/llm-evals"
        )
    return value


#: What a Hub token can hold: visible ASCII, no spaces (a header value cannot carry the rest).
TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")


def hub_token(environ: Mapping[str, str]) -> str:
    """The token, from ``HF_TOKEN`` only: never the command line, never a cached login that
    the user may not know is there."""
    token = environ.get("HF_TOKEN", "").strip()
    if not token:
        raise ShareError(
            "pushing to the Hub needs a token with write access in the HF_TOKEN environment "
            "variable (create one at https://huggingface.co/settings/tokens)"
        )
    if not TOKEN_CHARACTERS.fullmatch(token):
        # Checked here: sent as it is, the HTTP library fails with the header in its message.
        raise ShareError(
            "HF_TOKEN holds a character no Hub token has (a space, a line break or a "
            "non-ASCII character, often from copying it): set it to the token exactly as "
            "https://huggingface.co/settings/tokens shows it"
        )
    return token


#: The file, under the log directory ``push_runs`` is given, that keeps the traceback of a
#: push that failed for an unexpected reason.
PUSH_LOG = "hub-push.log"


@dataclass
class PushResult:
    repo_id: str
    repo_url: str
    commit: str | None  # None: nothing changed, no commit was made
    configs: list[str] = field(default_factory=list)
    uploaded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def describe(self) -> str:
        configs = ", ".join(self.configs)
        if self.commit is None:
            return f"Hub: {self.repo_url} already has {configs}; nothing pushed"
        return (
            f"Hub: pushed {configs} to {self.repo_url} (commit {self.commit[:12]}, "
            f"{len(self.uploaded)} files changed, {len(self.unchanged)} unchanged)"
        )


def run_files(run: SharedRun) -> dict[str, bytes]:
    """A run's files in the repository, under its configuration's folder."""
    folder = run.config_name
    return {
        f"{folder}/{RESULTS_FILE}": results_parquet(run),
        f"{folder}/metadata.json": _json_bytes(run.metadata),
        f"{folder}/run_config.json": _json_bytes(run.run_config),
    }


def push_runs(
    runs: Sequence[SharedRun],
    repo_id: str,
    *,
    token: str,
    redactor: Redactor,
    private: bool = False,
    log_dir: Path,
    endpoint: str | None = None,
) -> PushResult:
    """Create the dataset repository if needed and commit the runs' changed files; the newest
    run of each benchmark x model replaces that configuration's files. ``endpoint``: the Hub's
    URL, default ``HF_ENDPOINT``, else huggingface_hub's default.

    Every failure is a :class:`ShareError` whose hint matches its cause: the Hub's answer (a
    refused token: the token), no answer (the network and ``HF_ENDPOINT``), or anything else,
    which is unexpected: its traceback, secrets replaced, goes to :data:`PUSH_LOG` in
    ``log_dir``, and the message names the file."""
    from huggingface_hub import errors
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    # The HTTP library's base error as huggingface_hub imports it (httpx2's in huggingface_hub
    # 2): no connection, a timeout, a proxy, a broken answer. Not in its __all__: should it
    # move, connection errors are still told as such, and the test of an unreachable Hub fails.
    transport_error: type[Exception] = getattr(errors, "HTTPError", ConnectionError)

    where = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        return _push(runs, repo_id, token, redactor, private, endpoint)
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            raise ShareError(
                f"the Hub refused HF_TOKEN ({status}) for {repo_id}: it needs write access to "
                f"{repo_id.split('/')[0]} (https://huggingface.co/settings/tokens)"
            ) from None
        raise ShareError(f"the Hub answered HTTP {status} for {repo_id}: {exc}") from None
    except (ShareError, KeyboardInterrupt):
        raise
    except OfflineModeIsEnabled:
        raise ShareError(
            f"could not push to {repo_id}: huggingface_hub is in offline mode (HF_HUB_OFFLINE "
            "is set); unset HF_HUB_OFFLINE to push"
        ) from None
    except (transport_error, ConnectionError, TimeoutError) as exc:
        raise ShareError(
            f"could not reach the Hub at {where} to push {repo_id} ({type(exc).__name__}: "
            f"{exc}); check the network and HF_ENDPOINT, then push again (pushing the same "
            "runs twice is safe)"
        ) from None
    except Exception as exc:
        log = _log_traceback(exc, log_dir, f"pushing to {repo_id} at {where}", redactor)
        raise ShareError(
            f"pushing to {repo_id} at {where} failed with an unexpected "
            f"{type(exc).__name__}: {exc}; not a network or token problem: {log}"
        ) from None


def _log_traceback(exc: Exception, log_dir: Path, what: str, redactor: Redactor) -> str:
    """Append ``exc``'s traceback, secrets replaced, to :data:`PUSH_LOG` in ``log_dir``; the
    words that point a reader to it."""
    import traceback
    from datetime import UTC, datetime

    path = log_dir / PUSH_LOG
    text = "".join(traceback.format_exception(exc))
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(f"{datetime.now(UTC).isoformat()} {what}\n{redactor.text(text)}\n")
    except OSError as error:
        return f"its traceback could not be written to {path} ({error})"
    return f"the traceback is in {path}"


def _push(
    runs: Sequence[SharedRun],
    repo_id: str,
    token: str,
    redactor: Redactor,
    private: bool,
    endpoint: str | None,
) -> PushResult:
    from huggingface_hub import CommitOperationAdd, HfApi

    check_repo_id(repo_id)
    latest = latest_per_config(runs)
    files: dict[str, bytes] = {}
    for run in latest.values():
        files.update(run_files(run))

    # HF_ENDPOINT is read here as well: huggingface_hub reads it once, when first imported.
    endpoint = endpoint or os.environ.get("HF_ENDPOINT", "").rstrip("/") or None
    api = HfApi(endpoint=endpoint, token=token, library_name="pytest-modal-eval")
    repo_url = str(api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True))
    head = api.dataset_info(repo_id).sha
    entries = [CardEntry(name, run.metadata, run.run_config) for name, run in latest.items()]
    entries += _remote_entries(api, repo_id, head, skip=set(latest))
    files["README.md"] = render_card(repo_id, entries).encode()
    for name, data in files.items():
        redactor.check(f"{repo_id}/{name}", data)

    remote = {
        item.path: item
        for item in api.get_paths_info(repo_id, sorted(files), repo_type=REPO_TYPE, revision=head)
    }
    changed = {
        path: data for path, data in sorted(files.items()) if not _same(remote.get(path), data)
    }
    result = PushResult(
        repo_id, repo_url, None, configs=list(latest), unchanged=sorted(set(files) - set(changed))
    )
    if not changed:
        return result
    with warnings.catch_warnings():
        # huggingface_hub's LFS upload passes bytes as `data=`, which its HTTP client deprecates;
        # under a project's `filterwarnings = error` that warning would fail the push.
        warnings.filterwarnings("ignore", LFS_UPLOAD_WARNING, DeprecationWarning)
        info = api.create_commit(
            repo_id,
            [CommitOperationAdd(path_in_repo=p, path_or_fileobj=d) for p, d in changed.items()],
            commit_message=_shorten(f"Evaluation results: {', '.join(latest)}"),
            repo_type=REPO_TYPE,
            parent_commit=head,
        )
    result.commit = info.oid
    result.uploaded = sorted(changed)
    return result


def _remote_entries(
    api: HfApi, repo_id: str, revision: str | None, skip: set[str]
) -> list[CardEntry]:
    """The configurations already in the repository and not being pushed now: folders holding
    both run files, read back so the card keeps listing them."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    paths = {
        item.path
        for item in api.list_repo_tree(
            repo_id, recursive=True, repo_type=REPO_TYPE, revision=revision
        )
    }
    folders = sorted({path.split("/", 1)[0] for path in paths if path.count("/") == 1} - skip)
    entries = []
    with tempfile.TemporaryDirectory(prefix="modal-eval-hub-") as cache:
        for folder in folders:
            if not all(f"{folder}/{name}" in paths for name in RUN_FILES):
                continue
            found: dict[str, Any] = {}
            for name in RUN_FILES:
                try:
                    local = hf_hub_download(
                        repo_id,
                        f"{folder}/{name}",
                        repo_type=REPO_TYPE,
                        revision=revision,
                        cache_dir=cache,
                        token=api.token,
                        endpoint=api.endpoint,
                    )
                    found[name] = json.loads(Path(local).read_text(encoding="utf-8"))
                except (EntryNotFoundError, HfHubHTTPError, ValueError) as exc:
                    raise ShareError(
                        f"{repo_id}: cannot read {folder}/{name} back for the dataset card "
                        f"({exc}); fix or delete that file in the repository"
                    ) from None
            entries.append(CardEntry(folder, found["metadata.json"], found["run_config.json"]))
    return entries


def _same(remote: Any, data: bytes) -> bool:
    if remote is None:
        return False
    if remote.lfs is not None:
        return bool(remote.lfs.sha256 == hashlib.sha256(data).hexdigest())
    return bool(remote.blob_id == git_blob_id(data))


def git_blob_id(data: bytes) -> str:
    """What git (and the Hub) names a regular file's content by."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

"""A local stand-in for the Hugging Face Hub: real HTTP on 127.0.0.1, the part of the Hub's API
that ``huggingface_hub`` uses to create a dataset repository, commit files to it and read them
back. Address it with ``HF_ENDPOINT``.

Endpoints (paths as ``huggingface_hub`` builds them; ``{repo}`` is ``org/name``):

- ``POST /api/repos/create``: a new repository whose first commit holds a ``.gitattributes``
  sending ``*.parquet`` (and other binary types) to LFS, as the Hub does; 409 if it exists.
- ``GET /api/datasets/{repo}[/revision/{rev}]``: repository info (``sha``, ``private``,
  ``siblings``).
- ``POST /api/validate-yaml``: the README's YAML front matter must parse to a mapping.
- ``POST /api/datasets/{repo}/preupload/{rev}``: ``uploadMode`` from ``.gitattributes``
  (``lfs`` for a matching path or a file over 10 MiB, else ``regular``), and the current ``oid``
  of an existing file unless :attr:`HubServer.preupload_oids` is false.
- ``POST /datasets/{repo}.git/info/lfs/objects/batch``: the Git LFS batch API, ``basic``
  transfer: an upload and a verify action for each object not stored yet.
- ``PUT /lfs/{oid}`` and ``POST /lfs/{oid}/verify``: the object store behind those actions;
  an upload whose sha256 is not its oid is refused.
- ``POST /api/datasets/{repo}/commit/{rev}``: the NDJSON commit (``file``, ``lfsFile``,
  ``deletedFile``), checking ``parentCommit``; an ``lfsFile`` must be in the store.
- ``POST /api/datasets/{repo}/paths-info/{rev}``, ``GET /api/datasets/{repo}/tree/{rev}[/{path}]``
  (``rev``: ``main`` or a commit id): file entries with the git blob id, and ``lfs``
  (sha256, size) for LFS files.
- ``HEAD``/``GET /datasets/{repo}/resolve/{rev}/{path}``: a file, with ``X-Repo-Commit``,
  ``ETag`` and, for LFS files, ``X-Linked-Etag``/``X-Linked-Size``.

Writes need ``Authorization: Bearer <token>``; a private repository is invisible (404) to any
other caller. Not spoken: Xet storage (clients must run with ``HF_HUB_DISABLE_XET=1``, which
makes ``huggingface_hub`` use the LFS path above), multi-part LFS uploads, pull requests,
branches other than ``main``, copies and folder deletions.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import yaml
from aiohttp import web

from tests.support.threaded_app import ThreadedApp

LFS_LIMIT = 10 * 1024 * 1024
#: The LFS part of the ``.gitattributes`` a new Hub dataset repository starts with (a subset).
GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in ("*.parquet", "*.arrow", "*.bin", "*.safetensors", "*.zip", "*.gz", "*.zst")
)


def git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    )


@dataclass(frozen=True)
class Entry:
    """One file in a commit: its bytes (regular) or the sha256 of an object in the LFS store."""

    content: bytes | None = None
    lfs_oid: str | None = None
    size: int = 0

    @property
    def pointer(self) -> bytes:
        return (
            self.content if self.content is not None else lfs_pointer(str(self.lfs_oid), self.size)
        )


@dataclass
class Commit:
    oid: str
    title: str
    files: dict[str, Entry]


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    commits: list[Commit] = field(default_factory=list)

    @property
    def head(self) -> Commit:
        return self.commits[-1]

    def at(self, revision: str) -> Commit:
        """``main`` or a commit id (or its start)."""
        if revision == "main":
            return self.head
        for commit in self.commits:
            if commit.oid.startswith(revision) and len(revision) >= 7:
                return commit
        raise _HubError(404, "RevisionNotFound", f"Revision {revision} not found")


class HubServer(ThreadedApp):
    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[tuple[str, str]] = []
        self.preupload_oids = True
        # When set, repository info answers this JSON instead: a Hub (or a mirror at
        # HF_ENDPOINT) answering what huggingface_hub cannot read.
        self.info_answer: Any = None
        self._lock = threading.Lock()

    # -- for tests ------------------------------------------------------------------------------
    def files(self, repo_id: str, repo_type: str = "dataset") -> dict[str, bytes]:
        """The head commit's files, LFS files resolved to their content."""
        repo = self.repos[(repo_type, repo_id)]
        return {path: self._content(entry) for path, entry in repo.head.files.items()}

    def stored_bytes(self) -> list[bytes]:
        """Every byte string the server holds: all commits' files and all LFS objects."""
        out = list(self.lfs.values())
        for repo in self.repos.values():
            for commit in repo.commits:
                out.extend(entry.pointer for entry in commit.files.values())
                out.append(commit.title.encode())
        return out

    # -- protocol -------------------------------------------------------------------------------
    def _content(self, entry: Entry) -> bytes:
        return entry.content if entry.content is not None else self.lfs[str(entry.lfs_oid)]

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    def _repo(self, request: web.Request, repo_type: str, repo_id: str) -> Repo | None:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not self._authorized(request)):
            return None
        return repo

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        path = unquote(request.raw_path.split("?", 1)[0])
        parts = path.strip("/").split("/")
        try:
            return await self._route(request, parts)
        except _HubError as error:
            return error.response()

    async def _route(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        method = request.method
        if parts[:3] == ["api", "repos", "create"] and method == "POST":
            return await self._create(request)
        if parts[:2] == ["api", "validate-yaml"] and method == "POST":
            return await self._validate_yaml(request)
        if parts[0] == "lfs" and len(parts) >= 2:
            return await self._lfs_object(request, parts[1], parts[2:])
        if parts[0] == "api" and len(parts) >= 4 and parts[1] in ("models", "datasets", "spaces"):
            repo_type, repo_id, rest = parts[1][:-1], "/".join(parts[2:4]), parts[4:]
            repo = self._repo(request, repo_type, repo_id)
            if repo is None:
                raise _HubError(404, "RepoNotFound", f"Repository {repo_id} not found")
            if not rest or rest[0] == "revision":
                return self._info(repo)
            action, revision, tail = rest[0], rest[1] if len(rest) > 1 else "main", rest[2:]
            at = repo.at(revision)
            if action in ("preupload", "commit") and revision != "main":
                raise _HubError(400, None, "only the main branch is written here")
            if action == "preupload" and method == "POST":
                return await self._preupload(request, repo)
            if action == "commit" and method == "POST":
                return await self._commit(request, repo)
            if action == "paths-info" and method == "POST":
                form = await request.post()
                paths = [str(p) for p in form.getall("paths", [])]
                return web.json_response(
                    [self._file_entry(p, at.files[p]) for p in paths if p in at.files]
                )
            if action == "tree" and method == "GET":
                return self._tree(request, at, "/".join(tail))
        if len(parts) >= 3 and parts[0] == "datasets" and parts[2].endswith(".git"):
            repo_id = f"{parts[1]}/{parts[2][:-4]}"
            if parts[3:] == ["info", "lfs", "objects", "batch"] and method == "POST":
                repo = self._repo(request, "dataset", repo_id)
                if repo is None or not self._authorized(request):
                    raise _HubError(404, "RepoNotFound", f"Repository {repo_id} not found")
                return await self._lfs_batch(request)
        if len(parts) >= 6 and parts[0] == "datasets" and parts[3] == "resolve":
            repo = self._repo(request, "dataset", f"{parts[1]}/{parts[2]}")
            if repo is None:
                raise _HubError(404, "RepoNotFound", "Repository not found")
            return self._resolve(request, repo, parts[4], "/".join(parts[5:]))
        raise _HubError(404, None, f"not spoken here: {method} {request.path}")

    async def _create(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            raise _HubError(401, None, "Invalid credentials in Authorization header")
        body = await request.json()
        repo_type = body.get("type") or "model"
        repo_id = f"{body['organization']}/{body['name']}"
        with self._lock:
            if (repo_type, repo_id) in self.repos:
                # The Hub's 409 carries the URL too; create_repo(exist_ok=True) reads it.
                return web.json_response(
                    {
                        "error": "You already created this repo",
                        "url": self._url(repo_type, repo_id),
                    },
                    status=409,
                )
            repo = Repo(repo_type, repo_id, private=body.get("visibility") == "private")
            files = {".gitattributes": Entry(GITATTRIBUTES.encode(), size=len(GITATTRIBUTES))}
            repo.commits.append(
                Commit(_commit_oid("", "initial commit", files), "initial commit", files)
            )
            self.repos[(repo_type, repo_id)] = repo
        return web.json_response({"url": self._url(repo_type, repo_id), "name": repo_id})

    def _url(self, repo_type: str, repo_id: str) -> str:
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        return f"{self.url}/{prefix}{repo_id}"

    def _info(self, repo: Repo) -> web.Response:
        if self.info_answer is not None:
            return web.json_response(self.info_answer)
        return web.json_response(
            {
                "id": repo.repo_id,
                "sha": repo.head.oid,
                "private": repo.private,
                "siblings": [{"rfilename": path} for path in sorted(repo.head.files)],
            }
        )

    async def _validate_yaml(self, request: web.Request) -> web.Response:
        body = await request.json()
        content = str(body.get("content", ""))
        errors: list[dict[str, str]] = []
        if content.startswith("---\n"):
            front = content[4:].split("\n---", 1)[0]
            try:
                data = yaml.safe_load(front)
            except yaml.YAMLError as error:
                errors.append({"message": f"invalid YAML: {error}"})
            else:
                if not isinstance(data, dict):
                    errors.append({"message": "the metadata must be a mapping"})
        if errors:
            return web.json_response({"errors": errors}, status=400)
        return web.json_response({"errors": [], "warnings": []})

    def _lfs_patterns(self, repo: Repo) -> list[str]:
        entry = repo.head.files.get(".gitattributes")
        text = self._content(entry).decode() if entry else ""
        return [line.split()[0] for line in text.splitlines() if "filter=lfs" in line]

    async def _preupload(self, request: web.Request, repo: Repo) -> web.Response:
        if not self._authorized(request):
            raise _HubError(401, None, "Invalid credentials in Authorization header")
        body = await request.json()
        patterns = self._lfs_patterns(repo)
        files = []
        for item in body["files"]:
            path, size = item["path"], int(item["size"])
            name = path.rsplit("/", 1)[-1]
            lfs = size > LFS_LIMIT or any(fnmatch.fnmatch(name, p) for p in patterns)
            info: dict[str, Any] = {
                "path": path,
                "uploadMode": "lfs" if lfs else "regular",
                "shouldIgnore": False,
            }
            current = repo.head.files.get(path)
            if self.preupload_oids and current is not None:
                info["oid"] = current.lfs_oid if current.lfs_oid else git_blob_id(current.pointer)
            files.append(info)
        return web.json_response({"files": files})

    async def _lfs_batch(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("operation") != "upload" or "basic" not in body.get("transfers", ["basic"]):
            raise _HubError(400, None, "only basic uploads are spoken here")
        objects = []
        for obj in body["objects"]:
            oid, size = obj["oid"], int(obj["size"])
            entry: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
            if oid not in self.lfs:
                entry["actions"] = {
                    "upload": {"href": f"{self.url}/lfs/{oid}", "header": {}},
                    "verify": {"href": f"{self.url}/lfs/{oid}/verify", "header": {}},
                }
            objects.append(entry)
        return web.json_response({"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

    async def _lfs_object(self, request: web.Request, oid: str, rest: list[str]) -> web.Response:
        if request.method == "PUT" and not rest:
            data = await request.read()
            if hashlib.sha256(data).hexdigest() != oid:
                raise _HubError(400, None, f"content does not match oid {oid}")
            self.lfs[oid] = data
            return web.Response(status=200)
        if request.method == "POST" and rest == ["verify"]:
            body = await request.json()
            stored = self.lfs.get(oid)
            if stored is None or len(stored) != int(body["size"]):
                raise _HubError(404, None, f"object {oid} not stored")
            return web.json_response({"ok": True})
        raise _HubError(405, None, "method not allowed")

    async def _commit(self, request: web.Request, repo: Repo) -> web.Response:
        if not self._authorized(request):
            raise _HubError(401, None, "Invalid credentials in Authorization header")
        lines = [json.loads(line) for line in (await request.read()).splitlines() if line.strip()]
        header = lines[0]["value"] if lines and lines[0]["key"] == "header" else {}
        with self._lock:
            parent = header.get("parentCommit")
            if parent and not repo.head.oid.startswith(parent):
                raise _HubError(
                    412, None, "A commit has happened since. Please refresh and try again."
                )
            files = dict(repo.head.files)
            for line in lines[1:]:
                key, value = line["key"], line["value"]
                if key == "file":
                    content = base64.b64decode(value["content"])
                    files[value["path"]] = Entry(content, size=len(content))
                elif key == "lfsFile":
                    stored = self.lfs.get(value["oid"])
                    if stored is None:
                        raise _HubError(400, None, f"LFS object {value['oid']} was not uploaded")
                    files[value["path"]] = Entry(lfs_oid=value["oid"], size=len(stored))
                elif key == "deletedFile":
                    if files.pop(value["path"], None) is None:
                        raise _HubError(404, "EntryNotFound", "A file with this name doesn't exist")
                else:
                    raise _HubError(400, None, f"operation {key} is not spoken here")
            title = str(header.get("summary", ""))
            oid = _commit_oid(repo.head.oid, title, files)
            repo.commits.append(Commit(oid, title, files))
        url = self._url(repo.repo_type, repo.repo_id)
        return web.json_response({"commitUrl": f"{url}/commit/{oid}", "commitOid": oid})

    def _file_entry(self, path: str, entry: Entry) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "file",
            "path": path,
            "size": entry.size,
            "oid": git_blob_id(entry.pointer),
        }
        if entry.lfs_oid:
            out["lfs"] = {
                "oid": entry.lfs_oid,
                "size": entry.size,
                "pointerSize": len(entry.pointer),
            }
        return out

    def _tree(self, request: web.Request, at: Commit, base: str) -> web.Response:
        recursive = request.query.get("recursive", "false").lower() == "true"
        prefix = f"{base}/" if base else ""
        out: list[dict[str, Any]] = []
        folders: set[str] = set()
        for path in sorted(at.files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            for i in range(rest.count("/")):
                folder = prefix + "/".join(rest.split("/")[: i + 1])
                if folder not in folders and (recursive or i == 0):
                    folders.add(folder)
                    out.append(
                        {"type": "directory", "path": folder, "oid": git_blob_id(folder.encode())}
                    )
            if recursive or "/" not in rest:
                out.append(self._file_entry(path, at.files[path]))
        if base and not out:
            raise _HubError(404, "EntryNotFound", f"{base} does not exist")
        return web.json_response(out)

    def _resolve(self, request: web.Request, repo: Repo, revision: str, path: str) -> web.Response:
        at = repo.at(revision)
        entry = at.files.get(path)
        if entry is None:
            raise _HubError(404, "EntryNotFound", f"{path} does not exist", commit=at.oid)
        content = self._content(entry)
        headers = {"X-Repo-Commit": at.oid, "ETag": f'"{git_blob_id(entry.pointer)}"'}
        if entry.lfs_oid:
            headers |= {"X-Linked-Etag": f'"{entry.lfs_oid}"', "X-Linked-Size": str(entry.size)}
        return web.Response(body=content, headers=headers)


def _commit_oid(parent: str, title: str, files: dict[str, Entry]) -> str:
    tree = sorted((path, git_blob_id(entry.pointer)) for path, entry in files.items())
    return hashlib.sha1(json.dumps([parent, title, tree]).encode()).hexdigest()


class _HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, commit: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.commit = status, code, message, commit

    def response(self) -> web.Response:
        headers = {"X-Error-Message": self.message}
        if self.code:
            headers["X-Error-Code"] = self.code
        if self.commit:
            headers["X-Repo-Commit"] = self.commit
        return web.json_response({"error": self.message}, status=self.status, headers=headers)

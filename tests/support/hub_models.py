"""The part of the Hugging Face Hub API that ``HfApi.model_info`` uses, on 127.0.0.1, with the
commit each revision resolves to set directly by the test (the repository stand-in for pushes
is ``hub_server.HubServer``).

``GET /api/models/{org}/{name}`` and ``GET /api/models/{org}/{name}/revision/{revision}``
answer ``{"id": ..., "sha": ...}`` from ``commits`` (``{repo_id: {revision: sha}}``), 404 for
an unknown repository or revision, as the Hub does; ``pushes`` move a revision right after an
answer, the way a push lands between two lookups; ``delays`` hold a repository's answers back.
Point ``HF_ENDPOINT`` at ``url``.
"""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

from aiohttp import web

from tests.support.threaded_app import ThreadedApp


class FakeHub(ThreadedApp):
    def __init__(self) -> None:
        super().__init__()
        self.commits: dict[str, dict[str, str]] = {}
        self.requests: list[str] = []
        # Pushes that land right after an answer: (repo_id, revision, sha), first one first.
        self.pushes: list[tuple[str, str, str]] = []
        self.delays: dict[str, float] = {}  # repo_id -> seconds before answering

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request.path)
        parts = request.path.strip("/").split("/")
        if request.method != "GET" or parts[:2] != ["api", "models"] or len(parts) < 4:
            return web.json_response({"error": "not found"}, status=404)
        repo_id = "/".join(parts[2:4])
        revision = unquote(parts[5]) if len(parts) >= 6 and parts[4] == "revision" else "main"
        if repo_id in self.delays:
            await asyncio.sleep(self.delays[repo_id])
        sha = self.commits.get(repo_id, {}).get(revision)
        if sha is None:
            # The Hub's error codes, which huggingface_hub maps to its exceptions.
            code = "RepoNotFound" if repo_id not in self.commits else "RevisionNotFound"
            return web.json_response(
                {"error": f"{repo_id}@{revision} not found"},
                status=404,
                headers={"X-Error-Code": code},
            )
        if self.pushes:
            pushed_repo, pushed_revision, pushed_sha = self.pushes.pop(0)
            self.commits.setdefault(pushed_repo, {})[pushed_revision] = pushed_sha
        return web.json_response({"id": repo_id, "modelId": repo_id, "sha": sha})

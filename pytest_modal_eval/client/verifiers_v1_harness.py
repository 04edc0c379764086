"""The harness the plugin runs verifiers v1 tasks with: one chat request, made in-process.

A v1 harness is normally a program launched per rollout in a runtime (verifiers' ``null`` and
``bash`` harnesses are PEP 723 scripts that ``uv`` installs from PyPI on first use). This one
runs its loop in this process, as verifiers' ``Harness.launch`` contract allows ("a harness may
run its loop in-process ... as long as every model call goes through ``endpoint`` +
``secret``"): it sends the task's prompt once to the rollout's interception endpoint and
returns. No program, no package installation, no network beyond 127.0.0.1.

Harness id: ``pytest-modal-eval-chat`` (the top-level ``pytest_modal_eval_chat`` module).
Importing this module needs verifiers 0.4 (``verifiers.v1``).
"""

from __future__ import annotations

from typing import Any

import httpx
import verifiers.v1 as vf
from verifiers.v1.runtimes import ProgramResult

HARNESS_ID = "pytest-modal-eval-chat"


class ChatHarnessConfig(vf.HarnessConfig):  # type: ignore[misc]
    id: str = HARNESS_ID


class ChatHarness(vf.Harness[ChatHarnessConfig]):  # type: ignore[misc]
    APPENDS_SYSTEM_PROMPT = True  # the system prompt is its own message, as in the classic API
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    _client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        """One HTTP client for all rollouts (a client per rollout cost ~0.1 s of CPU each).

        The interception endpoint is plain HTTP on 127.0.0.1: no proxy, no certificates. The
        interception server applies the model and sampling; the plugin's client behind it owns
        timeouts and retries, so this hop waits as long as that takes.
        """
        if self._client is None:
            self._client = httpx.AsyncClient(trust_env=False, verify=False, timeout=None)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [m.model_dump(mode="json", exclude_none=True) for m in prompt or []]
        answer = await self.client().post(
            endpoint.rstrip("/") + "/chat/completions",
            json={"model": ctx.model, "messages": messages},
            headers={"Authorization": f"Bearer {secret}"},
        )
        if answer.status_code != 200:
            return ProgramResult(1, "", f"HTTP {answer.status_code}: {answer.text[:2000]}")
        return ProgramResult(0, "", "")

"""The harness the plugin runs verifiers v1 tasks with: a chat loop with tools, in-process.

A v1 harness is normally a program launched per rollout in a runtime (verifiers' ``null`` and
``bash`` harnesses are PEP 723 scripts that ``uv`` installs from PyPI on first use). This one
runs its loop in this process, as verifiers' ``Harness.launch`` contract allows ("a harness may
run its loop in-process ... as long as every model call goes through ``endpoint`` +
``secret``"). No program, no package installation, no network beyond 127.0.0.1.

The loop is the one verifiers' own chat program runs (``harnesses/utils/core.py``,
``run_chat_loop``), without streaming and context compaction: send the conversation with the
task's tools to the rollout's interception endpoint; if the reply calls tools, call each on its
MCP server and append the results, then ask again; the rollout ends at a reply without tool
calls, or when the interception refuses a turn (a ``@vf.stop``, a limit), which verifiers
records as the rollout's stop condition. Tools are the MCP servers verifiers brought up for the
rollout (``mcp_urls``: the task's ``toolsets`` and the taskset's shared ones), listed and called
with verifiers' own MCP client (``MCPConnection``, ``call_mcp``), so tool names
(``<server>_<tool>``) and results are those its chat program sees.

The messages of each request are built only from the task, the replies and the tool results,
so a rollout asks the same bytes again after a resume and the answer journal replays its turns.

Harness id: ``pytest-modal-eval-chat`` (the top-level ``pytest_modal_eval_chat`` module).
Importing this module needs verifiers 0.4 (``verifiers.v1``).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack
from contextvars import ContextVar
from typing import Any

import httpx
import verifiers.v1 as vf

# verifiers' MCP client (what its null/bash chat program calls tools with). Not part of
# ``verifiers.v1``'s top-level names: this is the one module that uses it, and the tool tests
# (tests/test_verifiers_v1_tools.py) fail when it changes.
from verifiers.v1.harnesses.utils.mcp import MCPConnection, call_mcp

from pytest_modal_eval.client.observe import current_observer, current_rollout

HARNESS_ID = "pytest-modal-eval-chat"

#: The run's HTTP client to the interception endpoint, shared by every rollout's harness (an
#: ``Env`` builds a harness object per episode and never closes it).
_RUN_CLIENT: ContextVar[httpx.AsyncClient | None] = ContextVar("chat_run_client", default=None)


@contextlib.asynccontextmanager
async def run_client() -> AsyncIterator[None]:
    """One HTTP client for the harnesses of the rollouts started inside, closed at the end."""
    client = httpx.AsyncClient(trust_env=False, verify=False, timeout=None)
    token = _RUN_CLIENT.set(client)
    try:
        yield
    finally:
        _RUN_CLIENT.reset(token)
        await client.aclose()


class ChatHarnessConfig(vf.HarnessConfig):  # type: ignore[misc]
    id: str = HARNESS_ID


class ChatHarness(vf.Harness[ChatHarnessConfig]):  # type: ignore[misc]
    APPENDS_SYSTEM_PROMPT = True  # the system prompt is its own message, as in the classic API
    SUPPORTS_MCP = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    _client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        """One HTTP client for all rollouts (a client per rollout cost ~0.1 s of CPU each).

        The interception endpoint is plain HTTP on 127.0.0.1: no proxy, no certificates. The
        interception server applies the model and sampling; the plugin's client behind it owns
        timeouts and retries, so this hop waits as long as that takes.
        """
        shared = _RUN_CLIENT.get()
        if shared is not None:
            return shared
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
    ) -> vf.ProgramResult:
        messages = self.initial_messages(data)
        async with AsyncExitStack() as stack:
            tools, dispatch, servers = await self.connect_tools(mcp_urls, stack)
            while True:
                body: dict[str, Any] = {"model": ctx.model, "messages": messages}
                if tools:
                    body["tools"] = tools
                answer = await self.client().post(
                    endpoint.rstrip("/") + "/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {secret}"},
                )
                if answer.status_code != 200:
                    # A refused turn (a @stop, a limit) is recorded on the trace as its stop
                    # condition, and verifiers then treats this exit as clean.
                    return vf.ProgramResult(
                        1, "", f"HTTP {answer.status_code}: {answer.text[:2000]}"
                    )
                message = {
                    k: v for k, v in answer.json()["choices"][0]["message"].items() if v is not None
                }
                messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    return vf.ProgramResult(0, "", "")
                for call in calls:
                    content = await observed_tool_call(
                        call, self.call_tool(call, servers, dispatch)
                    )
                    name = call.get("function", {}).get("name", "")
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call.get("id", ""),
                            "content": content,
                            "name": name,
                        }
                    )

    async def connect_tools(
        self, mcp_urls: dict[str, str], stack: AsyncExitStack
    ) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]], dict[str, Any]]:
        """The tools of the rollout's MCP servers as the request's ``tools``, which server
        and tool each name calls, and the open connections (closed with ``stack``); verifiers'
        ``connect_mcp``, with its connections made as below."""
        tools: list[dict[str, Any]] = []
        dispatch: dict[str, tuple[str, str]] = {}
        servers: dict[str, Any] = {}
        for name, url in mcp_urls.items():
            server = servers[name] = _connection({"url": url, "timeout": self.config.tool_timeout})
            stack.push_async_callback(server.aclose)
            listed = await server.run(lambda client: client.list_tools())
            for tool in listed.tools:
                full = f"{name}_{tool.name}" if name else tool.name
                if full in dispatch:
                    raise ValueError(f"two tool servers offer a tool named {full!r}")
                tools.append(
                    {
                        "type": "function",
                        "function": {
                            "name": full,
                            "description": tool.description or "",
                            "parameters": tool.input_schema,
                        },
                    }
                )
                dispatch[full] = (name, tool.name)
        return tools, dispatch, servers

    def initial_messages(self, data: vf.TaskData) -> list[dict[str, Any]]:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [m.model_dump(mode="json", exclude_none=True) for m in prompt or []]
        return messages

    @staticmethod
    async def call_tool(
        call: dict[str, Any], servers: dict[str, Any], dispatch: dict[str, tuple[str, str]]
    ) -> Any:
        """The tool's result as the message content, or an error the model can read (as
        verifiers' chat program words them)."""
        function = call.get("function") or {}
        name = function.get("name", "")
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError as exc:
            return f"error: invalid JSON in tool arguments ({exc}); resend the call with valid JSON"
        if not isinstance(arguments, dict):
            return (
                f"error: tool arguments must be a JSON object, got {type(arguments).__name__}; "
                "resend as an object"
            )
        if name not in dispatch:
            return f"error: unknown tool {name!r}"
        return await call_mcp(servers, dispatch, name, arguments)


async def observed_tool_call(call: dict[str, Any], result: Awaitable[Any]) -> Any:
    """``result`` awaited, told to the run's observer (traces) when there is one."""
    observer = current_observer.get()
    if observer is None:
        return await result
    function = call.get("function") or {}
    watch = observer.tool_call(
        str(function.get("name", "")),
        str(call.get("id", "")),
        str(function.get("arguments") or ""),
        current_rollout.get(),
    )
    try:
        content = await result
    except BaseException as exc:
        watch.failed(exc)
        raise
    watch.returned(content)
    return content


def _connection(spec: dict[str, Any]) -> Any:
    """verifiers' ``MCPConnection``. Its constructor passes tenacity a deprecated argument
    (tenacity 9.1 warns), and under a project's ``filterwarnings = error`` that warning would
    fail every tool-using rollout: ignored here, where nothing else runs (no ``await``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "The 'initial' parameter is deprecated", DeprecationWarning
        )
        return MCPConnection(spec)

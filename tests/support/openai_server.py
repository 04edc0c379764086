"""A deterministic OpenAI-compatible chat server for tests: real HTTP on 127.0.0.1.

It knows the answers (from JSONL files given with ``--answers``, or by doing the
arithmetic in "What is A + B?"), and answers correctly for a controllable fraction of
questions: question q is answered right when hash(salt, q) < accuracy, so a run is
reproducible and changing ``salt`` simulates sampling noise. ``models`` serves further models,
each with its own settings over the top-level ones (``{"b": {"accuracy": 0.6}}``), so one
server stands in for several models of different quality. ``fail_rate`` makes a
deterministic fraction of questions answer HTTP 500 (``fail_first``: the first N requests;
``echo_auth``: the failure, and the model list, echo the request's ``Authorization`` header, as
some gateways do).
``replies`` answers a question containing a given text with a fixed reply (a judge's verdict).
With ``ask_system_question`` it plays a modeled user: it asks the "What is A + B?" question of
its system prompt (the scenario a user-simulating ``Env`` gives it), unless ``replies`` answers.
With ``call_tools`` it plays a model that
uses tools: a request offering ``tools`` whose question ("What is the value of KEY?") has no
tool result yet is answered with a call of the first tool, ``{"key": KEY}``; once the result is
in the conversation, the answer is that result (right or wrong as ``accuracy`` says).
``/admin/config`` (POST JSON) changes any setting at run time and ``/admin/stats`` counts
requests (``requests``: every one but ``/admin``'s, to any path, answered or not), the most ever
in flight at once among them; with ``record_bodies``, ``/admin/bodies`` lists each chat
request's JSON body.

Run: ``python -m tests.support.openai_server --model test-model [--answers F.jsonl]``;
it prints ``listening on http://127.0.0.1:PORT`` once ready.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

ARITHMETIC = re.compile(r"What is (-?\d+) \+ (-?\d+)\?")
LOOKUP = re.compile(r"What is the value of (\S+)\?")


#: Settings a fresh server starts with (and the tests reset to).
DEFAULT_SETTINGS: dict[str, Any] = {
    "model": "test-model",
    "accuracy": 1.0,
    "salt": "",
    "fail_rate": 0.0,
    "fail_status": 500,
    "delay": 0.0,
    # A continuously batching server (vLLM): a request joins the batch at the next step of
    # batch_step seconds and is answered batch_steps steps later, with every request that
    # joined with it. 0: answered at once.
    "batch_step": 0.0,
    "batch_steps": 0,
    "hold_repeats": 0.0,  # seconds to hold a question asked before (a second rollout, ...)
    # Hold every request while set (and its client stays connected); in ``models``, that
    # model's requests.
    "hold": False,
    # Hold every chat request after the first N (counted as chat_requests counts them) while
    # its client stays connected; None: no limit.
    "hold_after": None,
    "fail_repeats": False,  # answer 500 to a question asked before
    "right_when_seed_even": False,  # right answer exactly when the request's seed is even
    "salt_per_rollout": False,
    "require_key": None,  # when set, requests need "Authorization: Bearer <key>"
    "models": {},  # further served model name -> its settings over these (accuracy, salt, ...)
    "root": None,  # what /v1/models reports as the served model's root (vLLM: the path loaded)
    "call_tools": False,  # call the offered tool before answering (see the module docstring)
    "tool_loop": False,  # with call_tools: call the tool on every turn, never answer
    "hold_tool_results": 0.0,  # seconds to hold a request that carries a tool result
    # text -> the reply to a question containing it (a judge's verdict, ...): its content, or
    # {"content": ..., "finish_reason": ..., other message fields} (content may be null)
    "replies": {},
    "record_bodies": False,  # keep each chat request's JSON body (GET /admin/bodies)
    "ask_system_question": False,  # reply with the "What is A + B?" of the system prompt
    "fail_first": 0,  # answer fail_status to the first N chat requests
    "fail_message": "injected failure",  # the error message of those answers
    # A hostile gateway: a failure's message and headers, and the model list, echo the
    # request's Authorization header.
    "echo_auth": False,
}


class FakeModel:
    def __init__(self, model: str, answers: dict[str, str]) -> None:
        self.settings: dict[str, Any] = {**DEFAULT_SETTINGS, "model": model}
        self.answers = answers
        self.stats: Counter[str] = Counter()
        self.by_question: Counter[str] = Counter()
        self.seeds_by_question: dict[str, list[Any]] = {}  # the "seed" of each request
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[Any] = []  # with record_bodies: each chat request's body, in order

    def answer_for(self, question: str) -> str | None:
        if question in self.answers:
            return self.answers[question]
        match = ARITHMETIC.search(question)
        return str(int(match[1]) + int(match[2])) if match else None

    def fraction(self, *parts: str) -> float:
        digest = hashlib.sha256("\x00".join(parts).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def settings_for(self, model: Any) -> dict[str, Any] | None:
        """The settings answering ``model``, or None when it is not served."""
        if model == self.settings["model"]:
            return self.settings
        extra = self.settings["models"].get(model) if isinstance(model, str) else None
        return None if extra is None else {**self.settings, **extra}

    def unauthorized(self, request: web.Request) -> web.Response | None:
        key = self.settings["require_key"]
        if key and request.headers.get("Authorization") != f"Bearer {key}":
            self.stats["unauthorized"] += 1
            return web.json_response({"error": {"message": "bad key"}}, status=401)
        return None

    async def models(self, request: web.Request) -> web.Response:
        self.stats["models_requests"] += 1
        if (refused := self.unauthorized(request)) is not None:
            return refused
        entries = []
        for name in [self.settings["model"], *self.settings["models"]]:
            entry: dict[str, Any] = {
                "id": name,
                "object": "model",
                # vLLM sets "created" anew in every response.
                "created": int(time.time() * 1000) + self.stats["models_requests"],
            }
            root = {**self.settings, **self.settings["models"].get(name, {})}["root"]
            if root is not None:
                entry["root"] = root
            entries.append(entry)
        if self.settings["echo_auth"]:  # a model list that names the caller's key
            auth = request.headers.get("Authorization", "")
            entries.append({"id": f"echo {auth}", "object": "model", "created": 0})
        return web.json_response({"object": "list", "data": entries})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """A chat completion; with ``"stream": true`` the same answer as server-sent events
        (what verifiers' own harness programs ask for)."""
        answer = await self.answer(request)
        body = await request.json()
        if not body.get("stream") or answer.status != 200 or not isinstance(answer, web.Response):
            return answer
        return await _stream(request, json.loads(answer.text or "{}"), body)

    def _held(self, number: int, model: Any) -> bool:
        """Whether request ``number`` for ``model`` is held now: read afresh on every look, so
        that a change of settings (``hold`` of one model in ``models``) releases it."""
        settings = self.settings_for(model) or self.settings
        limit = settings["hold_after"]
        return bool(settings["hold"]) or (limit is not None and number > int(limit))

    async def answer(self, request: web.Request) -> web.Response:
        if (refused := self.unauthorized(request)) is not None:
            return refused
        body = await request.json()
        self.stats["chat_requests"] += 1
        number = self.stats["chat_requests"]
        self.stats[f"chat_requests:{body.get('model')}"] += 1
        settings = self.settings_for(body.get("model"))
        if settings is None:
            return web.json_response(
                {
                    "error": {
                        "message": f"The model `{body.get('model')}` does not exist.",
                        "type": "NotFoundError",
                        "code": 404,
                    }
                },
                status=404,
            )
        if settings["record_bodies"]:
            self.bodies.append(body)
        question = next(
            (m.get("content", "") for m in reversed(body["messages"]) if m["role"] == "user"), ""
        )
        self.by_question[question] += 1
        self.seeds_by_question.setdefault(question, []).append(body.get("seed"))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if settings["delay"]:
                await asyncio.sleep(float(settings["delay"]))
            if settings["batch_step"]:
                await _in_batches(float(settings["batch_step"]), settings["batch_steps"])
            while self._held(number, body.get("model")) and not _gone(request):
                await asyncio.sleep(0.05)
            if (
                settings["hold_repeats"]
                and self.by_question[question] > 1
                and await _hold(request, float(settings["hold_repeats"]))
            ):
                return web.Response(status=499)
            repeat_fails = settings["fail_repeats"] and self.by_question[question] > 1
            early = self.stats["chat_requests"] <= int(settings["fail_first"])
            if (
                repeat_fails
                or early
                or self.fraction("fail", question) < float(settings["fail_rate"])
            ):
                self.stats["failed_requests"] += 1
                return _failure(
                    request,
                    int(settings["fail_status"]),
                    settings["echo_auth"],
                    str(settings["fail_message"]),
                )
            reply = next((r for text, r in settings["replies"].items() if text in question), None)
            if reply is not None:
                self.stats["completed_requests"] += 1
                if not isinstance(reply, dict):
                    reply = {"content": reply}
                completion = _completion(
                    body["model"], reply.get("content"), reply.get("finish_reason", "stop"), 1
                )
                message = completion["choices"][0]["message"]
                message.update(
                    {k: v for k, v in reply.items() if k not in ("content", "finish_reason")}
                )
                return web.json_response(completion)
            asked = _system_question(body["messages"]) if settings["ask_system_question"] else None
            if asked is not None:
                self.stats["completed_requests"] += 1
                return web.json_response(_completion(body["model"], asked, "stop", 1))
            if settings["call_tools"]:
                return await self.tool_turn(request, body, question, settings)
            salt = str(settings["salt"])
            if settings["salt_per_rollout"]:
                salt += f"/{self.by_question[question]}"
            right = self.fraction(salt, question) < float(settings["accuracy"])
            if settings["right_when_seed_even"]:
                right = isinstance(body.get("seed"), int) and body["seed"] % 2 == 0
            expected = self.answer_for(question)
            if expected is None:
                content = "I do not know."
            elif right:
                content = f"The answer is \\boxed{{{expected}}}."
            else:
                content = f"The answer is \\boxed{{{_wrong(expected)}}}."
            finish = "stop"
            max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
            words = content.split()
            if max_tokens is not None and int(max_tokens) < len(words):
                content, finish = " ".join(words[: int(max_tokens)]), "length"
            self.stats["completed_requests"] += 1
            return web.json_response(_completion(body["model"], content, finish, len(words)))
        finally:
            self.in_flight -= 1

    async def tool_turn(
        self, request: web.Request, body: dict[str, Any], question: str, settings: dict[str, Any]
    ) -> web.Response:
        """A turn of a model that looks the answer up with the offered tool."""
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m for m in messages[last_user:] if m["role"] == "tool"]
        if results and settings["hold_tool_results"]:
            self.stats["held_tool_results"] += 1
            if await _hold(request, float(settings["hold_tool_results"])):
                return web.Response(status=499)
        tools = body.get("tools") or []
        key = LOOKUP.search(question)
        self.stats["completed_requests"] += 1
        if tools and key and (settings["tool_loop"] or not results):
            self.stats["tool_calls"] += 1
            name = tools[0]["function"]["name"]
            call_id = (
                "call_" + hashlib.sha256(f"{question}/{len(results)}".encode()).hexdigest()[:12]
            )
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps({"key": key[1]})},
            }
            return web.json_response(
                _completion(body["model"], None, "tool_calls", 5, tool_calls=[call])
            )
        if results:
            self.stats["tool_result_requests"] += 1
            found = str(results[-1].get("content", ""))
            right = self.fraction(str(settings["salt"]), question) < float(settings["accuracy"])
            content = f"The answer is \\boxed{{{found if right else _wrong(found)}}}."
        else:
            content = "I do not know."
        return web.json_response(_completion(body["model"], content, "stop", len(content.split())))

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                **self.stats,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "by_question": dict(self.by_question),
                "seeds_by_question": self.seeds_by_question,
            }
        )

    async def get_bodies(self, request: web.Request) -> web.Response:
        return web.json_response(self.bodies)

    async def set_config(self, request: web.Request) -> web.Response:
        update = await request.json()
        unknown = set(update) - set(self.settings) - {"reset_stats"}
        if unknown:
            return web.json_response({"error": f"unknown settings {sorted(unknown)}"}, status=400)
        if update.pop("reset_stats", False):
            self.stats.clear()
            self.by_question.clear()
            self.seeds_by_question.clear()
            self.bodies.clear()
            self.max_in_flight = self.in_flight
        self.settings.update(update)
        return web.json_response(self.settings)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")


async def _in_batches(step: float, steps: int) -> None:
    """Wait as a request in a batching server: requests joining at the same step boundary have
    the same deadline, so their timers fire, and their answers are written, together."""
    now = asyncio.get_running_loop().time()
    joins = math.ceil(now / step) * step
    await asyncio.sleep(joins + int(steps) * step - now)


def _gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()


async def _hold(request: web.Request, seconds: float) -> bool:
    """Sleep, but only while the client is still connected (aiohttp does not cancel a handler
    whose client went away, and a held handler would delay the server's shutdown). True when
    the client went away: its request is abandoned, neither answered nor counted."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if _gone(request):
            return True
        await asyncio.sleep(0.05)
    return False


def _failure(request: web.Request, status: int, echo_auth: bool, message: str) -> web.Response:
    """An injected failure saying ``message``; with ``echo_auth``, as a careless gateway
    answers: the request's ``Authorization`` header in the error message and in the response's
    own headers."""
    if not echo_auth:
        return web.json_response(
            {"error": {"message": message, "type": "InternalServerError"}},
            status=status,
        )
    auth = request.headers.get("Authorization", "")
    # The upstream's own error body, quoted as text: written by encoders that escape more
    # than Python's (PHP: / as \/; Go: <, > and & as \u003c, \u003e, \u0026).
    php = json.dumps(auth).replace("/", "\\/")
    go = json.dumps(auth, ensure_ascii=False)
    for char in "<>&":
        go = go.replace(char, f"\\u{ord(char):04x}")
    message = f"upstream refused Authorization: {auth} (upstream said {php}, then {go})"
    return web.json_response(
        {"error": {"message": message, "type": "Gateway"}},
        status=status,
        headers={"X-Echo-Authorization": auth, "WWW-Authenticate": f"Bearer realm={auth}"},
    )


def _system_question(messages: list[dict[str, Any]]) -> str | None:
    """The first "What is A + B?" of the conversation's system messages, if any."""
    for message in messages:
        content = message.get("content")
        if message.get("role") == "system" and isinstance(content, str):
            found = ARITHMETIC.search(content)
            if found is not None:
                return found.group(0)
    return None


def _wrong(expected: str) -> str:
    try:
        return str(int(expected) + 1)
    except ValueError:
        return expected + " (not)"


def _completion(
    model: str,
    content: str | None,
    finish: str,
    tokens: int,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
    }


async def _stream(
    request: web.Request, completion: dict[str, Any], body: dict[str, Any]
) -> web.StreamResponse:
    """``completion`` as OpenAI's chat-completion chunks: the message in one delta, then the
    finish reason, then the usage when ``stream_options.include_usage`` asks for it."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    choice = completion["choices"][0]
    delta = dict(choice["message"])
    for index, call in enumerate(delta.get("tool_calls") or []):
        call["index"] = index
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    for chunk in chunks:
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def build_app(fake: FakeModel) -> web.Application:
    @web.middleware
    async def count(request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith("/admin/"):
            fake.stats["requests"] += 1
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application(middlewares=[count])
    app.router.add_get("/v1/models", fake.models)
    app.router.add_post("/v1/chat/completions", fake.chat)
    app.router.add_get("/health", fake.health)
    app.router.add_get("/admin/stats", fake.get_stats)
    app.router.add_get("/admin/bodies", fake.get_bodies)
    app.router.add_post("/admin/config", fake.set_config)
    return app


def load_answers(paths: list[str]) -> dict[str, str]:
    answers: dict[str, str] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                answers[str(record["question"])] = str(record["answer"])
    return answers


async def serve(args: argparse.Namespace) -> None:
    fake = FakeModel(args.model, load_answers(args.answers))
    fake.settings.update(json.loads(args.settings))
    runner = web.AppRunner(build_app(fake), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    await until_stop_signal()
    await runner.cleanup()


async def until_stop_signal() -> None:
    """Return on SIGINT or SIGTERM (a server's way to stop cleanly when its parent says so)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="test-model")
    parser.add_argument("--answers", action="append", default=[])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--settings", default="{}", help="initial settings as JSON")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()

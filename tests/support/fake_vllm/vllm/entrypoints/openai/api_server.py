"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` in the fast tests.

With ``tests/support/fake_vllm`` and the repository root on ``PYTHONPATH``, ``--backend local``
starts this module instead of vLLM, through all of the local backend's real code (supervisor,
readiness probe, log, port-clash retry, stop). It:

- accepts vLLM's command line: ``--model``, ``--served-model-name``, ``--host`` and ``--port``
  are used, every other argument is ignored (as vLLM would accept it);
- appends one JSON line per start (pid, model, served name, port, full argv, and the command
  lines ``/proc`` shows for it and for its parent, the supervisor) to the file named by
  ``FAKE_VLLM_STARTS``, so a test counts server starts and sees what each was given and what
  any local user could read;
- serves the OpenAI API of ``tests/support/openai_server.py`` (its ``FakeModel``/``build_app``:
  arithmetic answered right, ``/admin/*`` controls) on that host and port;
- stops cleanly on SIGTERM/SIGINT, which is how the supervisor stops vLLM.

Test-only controls:

- ``--fake-exit-code N`` (e.g. from a benchmark's ``vllm.extra_args``, so it is per server
  profile): after recording the start, print an error and exit with code N, the way vLLM exits
  on a bad flag or a model that cannot load;
- ``FAKE_VLLM_STOPS``: a file to which each clean stop appends a JSON line (pid, port, time),
  and each start record also carries its time (``t``), so a test sees which servers were up
  at once;
- ``FAKE_VLLM_STARTUP_S``: seconds to wait before binding, like vLLM loading a model, which
  widens the window in which concurrent benchmarks could start a second server; meanwhile it
  logs vLLM's start-up steps (loading the model, then capturing graphs, half-way);
- ``--enable-log-requests`` with ``VLLM_LOGGING_LEVEL=DEBUG``: each chat request's JSON body
  is printed as it arrives, as vLLM logs it (``Request chatcmpl-N JSON body: {...}``): the
  prompts, and whatever a benchmark put in them, reach the server's log;
- ``FAKE_VLLM_SETTINGS``: a JSON object of ``tests/support/openai_server.py`` settings the
  server starts with (``{"fail_rate": 0.3}``: a server that answers some requests with errors);
- ``FAKE_VLLM_PRINT_ENV``: names of environment variables (space-separated) whose values it
  prints at start, with its full argv, on stdout and on stderr, as a server that logs its
  settings or quotes them in an error would; a value of several lines is printed as it is
  (over several lines) and once more a line at a time, each behind a prefix of its own, as a
  logger that writes a message per line would.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from tests.support.openai_server import FakeModel, build_app, until_stop_signal


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="vllm.entrypoints.openai.api_server", allow_abbrev=False)
    parser.add_argument("--model", required=True)
    # vLLM accepts several names; the first is the one reported by /v1/models here.
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--fake-exit-code", type=int, default=None)
    parser.add_argument("--enable-log-requests", action="store_true")
    return parser.parse_known_args(argv)


def record_start(args: argparse.Namespace, served: str, argv: list[str]) -> None:
    append_line(
        "FAKE_VLLM_STARTS",
        {
            "pid": os.getpid(),
            "model": args.model,
            "served_model_name": served,
            "port": args.port,
            "argv": argv,
            "cmdline": _cmdline(os.getpid()),
            "parent_cmdline": _cmdline(os.getppid()),
            "t": time.time(),
        },
    )


def _cmdline(pid: int) -> list[str]:
    """What ``/proc`` shows every local user of a process's command line."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return [part.decode(errors="replace") for part in fh.read().split(b"\0") if part]


def append_line(variable: str, record: dict[str, object]) -> None:
    path = os.environ.get(variable)
    if not path:
        return
    line = json.dumps(record)
    # One write on an O_APPEND descriptor: concurrent starts never interleave their lines.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


#: vLLM's request ids, ``chatcmpl-1``, ``chatcmpl-2``, ...
REQUEST_NUMBERS = itertools.count(1)


@web.middleware
async def log_request_bodies(request: web.Request, handler: Handler) -> web.StreamResponse:
    """vLLM's request logging at DEBUG: each chat request's body, as it arrives."""
    if request.path == "/v1/chat/completions":
        body = json.dumps(await request.json(), ensure_ascii=False)
        number = next(REQUEST_NUMBERS)
        print(f"DEBUG fake vLLM: Request chatcmpl-{number} JSON body: {body}", flush=True)
    return await handler(request)


async def serve(
    host: str, port: int, served: str, startup_s: float, log_requests: bool = False
) -> None:
    if startup_s:
        # vLLM's own start-up steps, as its log names them (the plugin shows the latest).
        print(f"INFO fake vLLM: Starting to load model {served}...", flush=True)
        await asyncio.sleep(startup_s / 2)
        print("INFO fake vLLM: Loading weights took 0.01 seconds", flush=True)
        print("INFO fake vLLM: Capturing CUDA graphs (mixed prefill-decode)", flush=True)
        await asyncio.sleep(startup_s / 2)
    model = FakeModel(served, {})
    model.settings.update(json.loads(os.environ.get("FAKE_VLLM_SETTINGS") or "{}"))
    app = build_app(model)
    if log_requests:
        app.middlewares.append(log_request_bodies)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    # A taken port raises "[Errno 98] ... address already in use" here, as vLLM's bind does.
    await web.TCPSite(runner, host, port).start()
    print(f"fake vLLM: serving {served!r} on http://{host}:{port}", flush=True)
    await until_stop_signal()
    print("fake vLLM: shutting down", flush=True)
    await runner.cleanup()
    append_line("FAKE_VLLM_STOPS", {"pid": os.getpid(), "port": port, "t": time.time()})


def main(argv: list[str]) -> int:
    args, _ignored = parse_args(argv)
    served = args.served_model_name[0] if args.served_model_name else args.model
    record_start(args, served, argv)
    if names := os.environ.get("FAKE_VLLM_PRINT_ENV", "").split():
        shown = " ".join(f"{name}={os.environ.get(name, '')}" for name in names)
        print(f"fake vLLM: args {argv} env {shown}", flush=True)
        print(f"fake vLLM: warning: settings {shown}", file=sys.stderr, flush=True)
        for name in names:
            lines = os.environ.get(name, "").splitlines()
            if len(lines) > 1:
                for line in lines:
                    print(f"fake vLLM: INFO {name} | {line}", flush=True)
    if args.fake_exit_code is not None:
        print(
            f"fake vLLM: ValueError: cannot load model {args.model!r} "
            f"(--fake-exit-code {args.fake_exit_code})",
            file=sys.stderr,
            flush=True,
        )
        return int(args.fake_exit_code)
    startup_s = float(os.environ.get("FAKE_VLLM_STARTUP_S") or 0)
    log_requests = args.enable_log_requests and os.environ.get("VLLM_LOGGING_LEVEL") == "DEBUG"
    asyncio.run(serve(args.host, args.port, served, startup_s, log_requests))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The model relay that runs inside a Modal sandbox (standard library only: any image with
``python3`` runs it).

A sandbox cannot open a connection to the machine running pytest, and that machine opens none
into the sandbox's network but Modal's own ``exec`` stream. So the harness's model endpoint
inside the sandbox is this relay: it listens on 127.0.0.1, writes each HTTP request it gets
to its stdout as one JSON line, and answers it with the JSON line the plugin writes to its
stdin (:mod:`pytest_modal_eval.client.modal_sandbox` pumps both through ``Sandbox.exec``).

Lines the relay writes: ``{"port": N}`` once, then ``{"id", "port", "method", "path",
"headers", "body"}`` per request (``port``: the host port the request is for, the first path
segment; ``body`` base64). Lines it reads: ``{"id", "status", "headers", "body"}`` (an
answer) and ``{"beat": true}`` (the host is alive: the lease file's time is renewed).

The lease is what ends a sandbox whose pytest was killed: the sandbox's main command exits
when the lease file is older than the lease, and Modal ends a sandbox whose main command
exits. The relay renews it on each beat and stops on end of input.

Run as ``python3 sandbox_relay.py LEASE_FILE``.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from queue import Queue
from typing import Any

#: Seconds a request waits for its answer before the relay answers 504 itself.
ANSWER_TIMEOUT = 3600.0
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}

_out_lock = threading.Lock()
_waiting: dict[int, Queue[dict[str, Any]]] = {}
_ids = itertools.count(1)


def _send(message: dict[str, Any]) -> None:
    line = json.dumps(message, separators=(",", ":")) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _relay(self) -> None:
        head, _, rest = self.path.lstrip("/").partition("/")
        if not head.isdigit():
            self.send_error(404, "unknown relay target")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request_id = next(_ids)
        answer: Queue[dict[str, Any]] = Queue(maxsize=1)
        _waiting[request_id] = answer
        _send(
            {
                "id": request_id,
                "port": int(head),
                "method": self.command,
                "path": "/" + rest,
                "headers": [[k, v] for k, v in self.headers.items()],
                "body": base64.b64encode(body).decode(),
            }
        )
        try:
            reply = answer.get(timeout=ANSWER_TIMEOUT)
        except Exception:  # queue.Empty: the host never answered
            reply = {"status": 504, "headers": [], "body": ""}
        finally:
            _waiting.pop(request_id, None)
        data = base64.b64decode(reply.get("body") or "")
        self.send_response(int(reply["status"]))
        for key, value in reply.get("headers") or []:
            if key.lower() not in _HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay

    def log_message(self, format: str, *args: Any) -> None:
        pass  # stdout is the channel; stderr stays quiet


def _read_host(lease: str) -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("beat"):
            os.utime(lease)
            continue
        waiting = _waiting.get(int(message["id"]))
        if waiting is not None:
            waiting.put(message)
    # End of input: the host is gone. Without beats the lease runs out and the sandbox ends.
    os._exit(0)


def main() -> None:
    lease = sys.argv[1]
    with open(lease, "a"):
        pass
    os.utime(lease)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _send({"port": server.server_address[1]})
    _read_host(lease)


if __name__ == "__main__":
    main()

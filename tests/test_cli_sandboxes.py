"""``pytest-modal-eval stop --sandboxes`` against the local stand-in for Modal's sandbox API
(tests/support/fake_modal: a sandbox is a local process that ends on Modal's terms). Nothing
here reaches Modal, and nothing here needs verifiers.

Leftover sandboxes are made by a process that has exited (as a killed pytest leaves them),
with the tags ``client/modal_sandbox.py`` gives its sandboxes; one sandbox carries other tags
and must outlive every command here.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner, Result

from pytest_modal_eval.cli import main
from pytest_modal_eval.serving.modal.sandboxes import SESSION_TAG, session_tags
from tests.support.modal_stand_in import FAKE_MODAL, install_fake_modal, left_running

MAKE_SANDBOXES = """
import json, sys
import modal

app = modal.App.lookup("verifiers-v1", create_if_missing=True)
for tags in json.loads(sys.argv[1]):
    box = modal.Sandbox.create("sleep", "infinity", app=app, tags=tags, timeout=600)
    print(box.object_id)
"""


class Modal:
    """The stand-in as ``modal``, its server reachable, and what a test made in it."""

    def __init__(self, module: ModuleType, root: Path) -> None:
        self.module = module
        self.root = root

    def leave_sandboxes(self, *tags: dict[str, str]) -> list[str]:
        """Sandboxes with these tags, made by a process that then exits; their ids."""
        made = subprocess.run(
            [sys.executable, "-c", MAKE_SANDBOXES, json.dumps(list(tags))],
            env={**os.environ, "PYTHONPATH": str(FAKE_MODAL)},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return made.stdout.split()

    def ended(self) -> dict[str, str]:
        """Sandbox id -> why it ended ("" while it runs)."""
        return {
            box.name: (box / "ended").read_text() if (box / "ended").exists() else ""
            for box in sorted(self.root.glob("sb-*"))
        }


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Modal]:
    root = tmp_path / "sandboxes"
    root.mkdir()
    module = install_fake_modal(monkeypatch, root)
    with socket.create_server(("127.0.0.1", 0)) as server:  # Modal's server, reachable
        monkeypatch.setitem(
            module.config.config, "server_url", f"http://127.0.0.1:{server.getsockname()[1]}"
        )
        yield Modal(module, root)
    for box in module.sandboxes():
        (box / "terminate").touch()
    assert left_running(root) == []


def stop(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, ["stop", "--sandboxes", *args], input=stdin)


OTHERS = {"project": "someone-else"}


def test_stop_sandboxes_ends_this_tools_sandboxes_and_no_other(stand_in: Modal) -> None:
    a, b = session_tags("session-a"), session_tags("session-b")
    ours = stand_in.leave_sandboxes(a, a, b)
    (other,) = stand_in.leave_sandboxes(OTHERS)

    result = stop("-y")

    assert result.exit_code == 0, result.output
    for box in ours:
        assert f"ended {box}" in result.stdout
    assert f"{ours[0]}  (session session-a)" in result.stdout
    assert f"{ours[2]}  (session session-b)" in result.stdout
    assert other not in result.stdout
    assert stand_in.ended() == {**dict.fromkeys(ours, "terminated"), other: ""}
    # Ended sandboxes are no longer listed.
    assert "nothing to end" in stop("-y").stdout


def test_a_sandbox_that_cannot_be_ended_does_not_stop_the_others(
    stand_in: Modal, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = stand_in.leave_sandboxes(session_tags("s"), session_tags("s"))
    terminate = stand_in.module.Sandbox._terminate

    async def refuse_first(self: object, **kwargs: object) -> None:
        if getattr(self, "object_id", None) == first:
            raise RuntimeError("Modal refused")
        await terminate(self, **kwargs)

    monkeypatch.setattr(stand_in.module.Sandbox, "_terminate", refuse_first)
    result = stop("-y")

    assert result.exit_code == 1, result.output
    assert f"ended {second}" in result.stdout and f"ended {first}" not in result.stdout
    assert "1 of 2 sandbox(es) could not be ended" in result.output
    assert f"could not end Modal sandbox {first}: RuntimeError: Modal refused" in result.output
    assert stand_in.ended() == {first: "", second: "terminated"}


def test_dry_run_and_declining_end_nothing(stand_in: Modal) -> None:
    ours = stand_in.leave_sandboxes(session_tags("session-a"), session_tags("session-b"))

    listed = stop("--dry-run")
    assert listed.exit_code == 0, listed.output
    assert all(box in listed.stdout for box in ours) and "ended" not in listed.stdout
    declined = stop(stdin="n\n")
    assert declined.exit_code == 1 and "end 2 sandbox(es)?" in declined.stdout
    assert set(stand_in.ended().values()) == {""}


def test_session_ends_only_that_sessions_sandboxes(stand_in: Modal) -> None:
    first, second = stand_in.leave_sandboxes(session_tags("session-a"), session_tags("session-b"))

    result = stop("--session", "session-b", "-y")

    assert result.exit_code == 0, result.output
    assert first not in result.stdout
    assert stand_in.ended() == {first: "", second: "terminated"}


def test_what_modal_says_is_printed_escaped(stand_in: Modal) -> None:
    hostile = {**session_tags("x"), SESSION_TAG: "\x1b]52;c;ZXZpbA==\x07"}
    (box,) = stand_in.leave_sandboxes(hostile)

    result = stop("--dry-run")

    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert f"{box}  (session \\x1b]52;c;ZXZpbA==\\x07)" in result.stdout


def test_nothing_running(stand_in: Modal) -> None:
    stand_in.leave_sandboxes(OTHERS)
    result = stop("-y")
    assert result.exit_code == 0, result.output
    assert result.stdout == "nothing to end: no sandbox of pytest-modal-eval is running\n"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"token_id": None},
            "Error: no Modal token is configured: run `modal token new` "
            "(or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)\n",
        ),
        (
            {"server_url": "http://127.0.0.1:9"},
            "Error: Modal is not reachable: no connection to http://127.0.0.1:9; check the "
            "network (or MODAL_SERVER_URL) and try again\n",
        ),
        (
            {"token_secret": "as-revoked"},
            "Error: could not list Modal sandboxes: AuthError: Token ID is malformed or not "
            "recognized\n",
        ),
    ],
    ids=["no-token", "unreachable", "token-refused"],
)
def test_modal_not_usable_is_one_line(
    stand_in: Modal,
    monkeypatch: pytest.MonkeyPatch,
    config: dict[str, str | None],
    message: str,
) -> None:
    (box,) = stand_in.leave_sandboxes(session_tags("session-a"))
    for key, value in config.items():
        monkeypatch.setitem(stand_in.module.config.config, key, value)

    result = stop("-y")

    assert result.exit_code == 1
    assert result.output == message
    assert "as-revoked" not in result.output
    assert stand_in.ended() == {box: ""}


def test_usage() -> None:
    def usage_error(*args: str) -> str:
        result = CliRunner().invoke(main, ["stop", *args])
        assert result.exit_code == 2
        return result.output.splitlines()[-1]

    one_of = (
        "Error: give one of SESSION, -m MODEL (optionally with -b BENCHMARK), --all or --sandboxes"
    )
    assert usage_error("--sandboxes", "--all") == one_of
    assert usage_error("--sandboxes", "-m", "a/b") == one_of
    assert usage_error("20261128-184951-1d633c", "--all") == one_of
    assert usage_error("--all", "--session", "x") == "Error: --session needs --sandboxes"


def test_stand_in_listing_is_the_sdks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``stop --sandboxes`` calls has the real SDK's parameters in the stand-in."""
    # The real SDK, before the stand-in is put in its place.
    from modal.config import config as sdk_config
    from modal.sandbox._sandbox import _Sandbox

    stand_in = install_fake_modal(monkeypatch, tmp_path)

    def parameters(fn: object) -> list[tuple[str, object]]:
        signature = inspect.signature(fn)  # type: ignore[arg-type]
        return [(p.name, p.kind) for p in signature.parameters.values()]

    assert parameters(stand_in.Sandbox.list.aio) == parameters(_Sandbox.list)
    assert parameters(stand_in.Sandbox._terminate) == parameters(_Sandbox.terminate)
    assert parameters(stand_in.Sandbox._get_tags) == parameters(_Sandbox.get_tags)
    assert inspect.isasyncgenfunction(_Sandbox.list)
    assert inspect.isasyncgenfunction(stand_in.Sandbox.list.aio)
    # The SDK's configuration answers the keys the command reads, as the stand-in's does.
    assert str(sdk_config.get("server_url")).startswith("https://")
    assert {"token_id", "token_secret", "server_url"} <= set(stand_in.config.config)

"""The one rule every relay and proxy of the plugin forwards a path by
(``serving/forwarding.py``): the URL-parsing tricks that would reach another host or port are
refused, and the paths the plugin relays are not. Each forwarder plays the same list end to end
in its own tests (``test_verifiers_v1_modal_sandbox.py``, ``test_proxy.py``,
``test_modal_app.py``), against a private service that must never be reached."""

from __future__ import annotations

import pytest

from pytest_modal_eval.serving.forwarding import (
    ForwardRefused,
    forwarded_method,
    forwarded_target,
)

#: Request targets that, pasted after ``http://127.0.0.1:PORT`` or handed to a server or a
#: later hop, could reach ``OTHER`` (a private service's port) or leave the path.
TRICKS = [
    "@127.0.0.1:{other}/x",  # user info: the host and port before it become a user name
    "@localhost:{other}/x",
    "@localhost.:{other}/x",
    "@[::1]:{other}/x",
    "@127.1:{other}/x",
    "@0x7f.1:{other}/x",
    "@2130706433:{other}/x",
    ":{other}/x",
    "//127.0.0.1:{other}/x",  # a network-path reference
    "/\\127.0.0.1:{other}/x",  # a backslash some parsers read as a slash
    "\\\\127.0.0.1:{other}/x",
    "/%40127.0.0.1:{other}/x",  # percent-encoded '@'
    "/%2F%2F127.0.0.1:{other}/x",  # percent-encoded '//'
    "/%2f127.0.0.1:{other}/x",
    "/%5C127.0.0.1:{other}/x",
    "/%2e%2e/{other}/x",
    "/%252F%252F127.0.0.1:{other}/x",  # encoded twice
    "http://127.0.0.1:{other}/x",  # an absolute URL
    "http:/127.0.0.1:{other}/x",
    "https://[::1]:{other}/x",
    "/v1@127.0.0.1:{other}/x",
    "/v1/../../{other}/x",
    "/./{other}",
    "/x?next=@127.0.0.1:{other}",
    "/x#@127.0.0.1:{other}",
    "/x\r\nHost: 127.0.0.1:{other}",  # CR LF: a header of one's own
    "/x HTTP/1.1\r\n\r\nGET /",
    "/x\t",
    "/x\x00",
    "/\u0430pi",  # non-ASCII
    "/x%",
    "/x%zz",
    "",
    "x",
    "*",
]

#: What the plugin relays: OpenAI routes, verifiers' interception routes, Modal's result URLs.
PLAIN = [
    "/v1/chat/completions",
    "/rollout/3f2a/v1/chat/completions",
    "/v1/chat/completions?__modal_function_call_id=fc-01HZX",
    "/v1/models?a=b%20c&d=e",
    "/tools/kv:get",
    "/%7Euser/x",
    "/",
]


@pytest.mark.parametrize("trick", TRICKS)
def test_a_trick_is_refused_in_one_line(trick: str) -> None:
    target = trick.format(other=2222)
    with pytest.raises(ForwardRefused) as caught:
        forwarded_target(target)
    assert "\n" not in str(caught.value) and "\r" not in str(caught.value)
    assert caught.value.status == 400


@pytest.mark.parametrize("target", PLAIN)
def test_a_plain_path_is_forwarded_as_it_came(target: str) -> None:
    path, query = forwarded_target(target)
    assert path + (f"?{query}" if query else "") == target


@pytest.mark.parametrize("bad", [None, 7, b"/v1", ["/v1"]])
def test_a_path_that_is_not_text_is_refused(bad: object) -> None:
    with pytest.raises(ForwardRefused, match="not text"):
        forwarded_target(bad)


def test_only_plain_methods_are_relayed() -> None:
    assert forwarded_method("POST") == "POST"
    for bad in ("CONNECT", "TRACE", "post", "GET /x HTTP/1.1\r\n", None, 1):
        with pytest.raises(ForwardRefused):
            forwarded_method(bad)

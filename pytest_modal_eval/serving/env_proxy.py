"""An HTTP proxy from the environment, in the form aiohttp requests take it.

The plugin sends its requests with aiohttp sessions that do not read the environment
themselves (``trust_env=False``), so each caller decides once which proxy, if any, a
destination goes through and passes it with every request.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Mapping
from typing import Any

import aiohttp
from yarl import URL

from pytest_modal_eval.serving.endpoint_check import on_loopback

_logger = logging.getLogger(__name__)

#: aiohttp request options, and headers to add to each request.
ProxyOptions = tuple[dict[str, Any], dict[str, str]]


def env_proxy(url: str, environ: Mapping[str, str]) -> str | None:
    """The proxy ``environ`` names for ``url``: ``<scheme>_proxy``, else ``all_proxy`` (lower
    case first, as curl reads them), unless ``no_proxy`` covers the host or it is on loopback.
    Only ``http://`` proxies can be used (aiohttp's limit); another is ignored with a warning."""

    def get(name: str) -> str | None:
        return environ.get(name) or environ.get(name.upper()) or None

    target = URL(url)
    if not target.host or on_loopback(url):
        return None
    proxy = get(f"{target.scheme}_proxy") or get("all_proxy")
    no_proxy = get("no_proxy")
    if proxy and no_proxy and _bypass(target.host, {"no": no_proxy}):
        return None
    if proxy and URL(proxy).scheme != "http":
        shown = URL(proxy).with_user(None)
        _logger.warning("ignoring the proxy %s for %s: only http:// proxies work here", shown, url)
        return None
    return proxy


# The stdlib's NO_PROXY matching ("*", domains, leading dots, host:port); not in typeshed.
_bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]


def aiohttp_options(
    proxy: str | None,
    target: str,
    *,
    auth: tuple[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> ProxyOptions:
    """Request options that send ``target``'s requests through ``proxy`` (``({}, {})`` for
    none). Credentials come from ``auth`` or the proxy URL's user info. For an https target
    they go on the CONNECT; for plain http on each request, which goes to the proxy as it is
    (aiohttp sends ``proxy_headers`` only on a CONNECT)."""
    if proxy is None:
        return {}, {}
    url = URL(proxy)
    if auth is None and url.user is not None:
        auth = (url.user, url.password or "")
    extra = dict(headers or {})
    if auth is not None:
        extra["Proxy-Authorization"] = aiohttp.encode_basic_auth(*auth)
    bare = str(url.with_user(None))
    if URL(target).scheme == "https":
        return {"proxy": bare, "proxy_headers": extra}, {}
    return {"proxy": bare}, extra

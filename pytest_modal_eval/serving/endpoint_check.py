"""Fail fast, once, when the endpoint is down or does not serve the model."""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pytest_modal_eval import phases
from pytest_modal_eval.exceptions import EndpointError

if TYPE_CHECKING:
    from pytest_modal_eval.serving.endpoint import Endpoint


def on_loopback(url: str) -> bool:
    """Whether ``url`` is on this machine's loopback: such requests never go through an HTTP
    proxy from the environment (no proxy can reach them; the Modal backend's own proxy and a
    local vLLM live there)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key_hint(variable: str, environ: Mapping[str, str]) -> str:
    """Where the API key of a refused request came from, and how to fix it: an unset (or empty)
    variable sent no key at all, which a mistyped ``--api-key-env`` name explains."""
    if not environ.get(variable):
        return (
            f"${variable}, the variable --api-key-env names (default OPENAI_API_KEY), is not "
            f"set, so no API key was sent: export {variable}=<key>, or name the variable that "
            "holds the key with --api-key-env."
        )
    return f"The API key is read from ${variable} (set --api-key-env to use another variable)."


class EndpointChecker:
    """GET ``/models`` once per endpoint and session; later benchmarks reuse the verdict, and
    the served model's entry (its identity in the answer key, for ``--base-url``)."""

    def __init__(self) -> None:
        self._verdicts: dict[tuple[str, str], _Verdict] = {}
        self._lock = threading.Lock()

    def _verdict(self, endpoint: Endpoint, timeout: float) -> _Verdict:
        key = (endpoint.base_url, endpoint.model)
        with self._lock:
            if key not in self._verdicts:
                # Up to ``timeout``: an endpoint scaled to zero answers once it has started.
                with phases.phase(f"checking that {endpoint.base_url} serves {endpoint.model}"):
                    self._verdicts[key] = _probe(endpoint, timeout)
            return self._verdicts[key]

    def check(self, endpoint: Endpoint, timeout: float = 15.0) -> None:
        problem = self._verdict(endpoint, timeout).problem
        if problem is not None:
            raise EndpointError(problem)

    def served_model(
        self, endpoint: Endpoint, timeout: float = 15.0
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The ``/models`` entry of the served model, or None and why there is none. Raises
        :class:`EndpointError` when the endpoint listed its models without this one: then it
        is known to serve something else, not merely unchecked."""
        verdict = self._verdict(endpoint, timeout)
        if verdict.not_served:
            raise EndpointError(str(verdict.problem))
        return verdict.entry, verdict.problem


@dataclass(frozen=True)
class _Verdict:
    problem: str | None  # what is wrong, or None
    entry: dict[str, Any] | None = None  # the served model's entry in the list
    not_served: bool = False  # the list was read, and the model is not in it


def _probe(endpoint: Endpoint, timeout: float) -> _Verdict:
    import httpx

    url = endpoint.base_url.rstrip("/") + "/models"
    headers = dict(endpoint.headers)
    key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        response = httpx.get(
            url,
            headers=headers,
            timeout=timeout,
            trust_env=not on_loopback(url),
            # Plain HTTP has no certificates to check; the CA bundle's load costs ~0.1 s.
            verify=not url.startswith("http://"),
        )
    except httpx.HTTPError as exc:
        return _Verdict(
            f"endpoint {endpoint.base_url} is unreachable: GET {url} failed "
            f"({type(exc).__name__}: {exc}). Check that the server is running and the URL "
            "includes the API prefix (usually /v1).",
        )
    if response.status_code in (401, 403):
        return _Verdict(
            f"endpoint {endpoint.base_url} refused the credentials (HTTP {response.status_code} "
            f"on GET {url}). {api_key_hint(endpoint.api_key_env or 'OPENAI_API_KEY', os.environ)}"
        )
    if response.status_code != 200:
        return _Verdict(
            f"endpoint {endpoint.base_url} answered HTTP {response.status_code} on GET {url}; "
            "is this an OpenAI-compatible API base URL (usually ending in /v1)?",
        )
    try:
        entries = [m for m in response.json().get("data", []) if isinstance(m, dict)]
        served = [str(m.get("id")) for m in entries]
    except (ValueError, AttributeError):
        return _Verdict(
            f"endpoint {endpoint.base_url}: GET {url} did not return an OpenAI model list"
        )
    if served and endpoint.model not in served:
        return _Verdict(
            f"endpoint {endpoint.base_url} does not serve model {endpoint.model!r}; it serves: "
            f"{', '.join(served)}. Pass the served name with --model.",
            not_served=True,
        )
    entry = next((m for m in entries if str(m.get("id")) == endpoint.model), None)
    return _Verdict(None, entry)

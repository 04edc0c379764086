"""Whether a session exports traces, and where: the OTLP variables, ``--otel-endpoint`` and
ini ``modal_eval_otel_endpoint``, read without importing OpenTelemetry.

Traces are on when a collector is named: ``--otel-endpoint``, else
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as given), else ``OTEL_EXPORTER_OTLP_ENDPOINT``
(``v1/traces`` appended, as the specification says), else the ini key. They stay off with
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. Headers
(``OTEL_EXPORTER_OTLP_TRACES_HEADERS``, ``OTEL_EXPORTER_OTLP_HEADERS``: ``k=v,k2=v2``,
percent-encoded) are read by the exporter; their values are secrets of the session.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from pytest_modal_eval.exceptions import OptionError

if TYPE_CHECKING:
    import pytest

#: The workerinput key of the session span's W3C ``traceparent``, and the workeroutput key of
#: what became of a worker's spans (see traces/session.py).
TRACEPARENT_KEY = "modal_eval_traceparent"
REPORT_KEY = "modal_eval_traces"
ENDPOINT_DEST = "modal_eval_otel_endpoint"
ENDPOINT_INI = "modal_eval_otel_endpoint"
#: The path an OTLP/HTTP base URL gets for traces.
TRACES_PATH = "v1/traces"
#: What content capture values mean (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``):
#: the latest experimental GenAI conventions' modes, and the older boolean.
CAPTURE_ON = frozenset({"span_only", "span_and_event", "event_only", "true"})
HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


@dataclass(frozen=True)
class TraceSettings:
    """Where spans go and what they may hold."""

    endpoint: str  # the full traces URL (…/v1/traces)
    capture_content: bool  # prompts and completions on the spans (opt-in)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("modal-eval")
    group.addoption(
        "--otel-endpoint",
        dest=ENDPOINT_DEST,
        metavar="URL",
        type=_base_url,
        default=None,
        help="export OpenTelemetry traces of the session (session, benchmark, example, "
        "rollout, model request, tool call) over OTLP/HTTP to this base URL (v1/traces is "
        "appended), as OTEL_EXPORTER_OTLP_ENDPOINT does; headers from "
        "OTEL_EXPORTER_OTLP_HEADERS. Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "OTEL_EXPORTER_OTLP_ENDPOINT, ini modal_eval_otel_endpoint, else no traces.",
    )
    parser.addini(
        ENDPOINT_INI,
        "OTLP/HTTP base URL to export OpenTelemetry traces to when neither --otel-endpoint "
        "nor the OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variables name one. Default: none.",
        default="",
    )


def _base_url(value: str) -> str:
    """The option's ``type=``: an http(s) URL."""
    import argparse

    try:
        return check_url(value, "--otel-endpoint")
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_url(value: str, source: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OptionError(
            f"{source}: {value!r} is not an http(s) URL; give the collector's OTLP/HTTP base "
            "URL, e.g. http://localhost:4318 (Phoenix: http://localhost:6006)"
        )
    return value.strip()


def resolve(
    option: str | None, ini: str | None, environ: Mapping[str, str] | None = None
) -> TraceSettings | None:
    """The session's trace settings, or None when traces are off. Raises
    :class:`OptionError` for a setting that cannot work (a URL that is not one, gRPC)."""
    env = os.environ if environ is None else environ
    if _true(env.get("OTEL_SDK_DISABLED")) or env.get("OTEL_TRACES_EXPORTER", "").strip() in (
        "none",
    ):
        return None
    endpoint = _endpoint(option, ini, env)
    if endpoint is None:
        return None
    for name in PROTOCOL_VARIABLES:
        protocol = env.get(name, "").strip().lower()
        if protocol and protocol != "http/protobuf":
            raise OptionError(
                f"{name}={protocol}: pytest-modal-eval exports traces over OTLP/HTTP with "
                "protobuf only; set it to http/protobuf (or unset it) and point the endpoint "
                "at the collector's HTTP port (4318; Phoenix: 6006)"
            )
        if protocol:
            break
    capture = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return TraceSettings(endpoint=endpoint, capture_content=capture.strip().lower() in CAPTURE_ON)


def _endpoint(option: str | None, ini: str | None, env: Mapping[str, str]) -> str | None:
    if option:
        return _traces_url(option)
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return check_url(traces, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if base:
        return _traces_url(check_url(base, "OTEL_EXPORTER_OTLP_ENDPOINT"))
    if ini and ini.strip():
        return _traces_url(check_url(ini, f"ini {ENDPOINT_INI}"))
    return None


def _traces_url(base: str) -> str:
    return base.rstrip("/") + "/" + TRACES_PATH


def header_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the OTLP headers (an ``Authorization``'s ``Basic …``, an API key), as
    the exporter sends them: secrets of the session, redacted wherever they would show, and
    the credential part of a ``Scheme credential`` value on its own."""
    env = os.environ if environ is None else environ
    values: list[str] = []
    for name in HEADER_VARIABLES:
        for pair in env.get(name, "").split(","):
            _, sep, value = pair.partition("=")
            if not sep:
                continue
            value = unquote(value).strip()
            values.append(value)
            values.extend(value.split()[1:])
    return [value for value in values if value]


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"

"""Judge models of v1 tasks (``task.judges``): checked at load, called through the plugin's
client.

A v1 judge (``vf.Judge``) is an OpenAI-compatible endpoint described by its config
(``vf.JudgeConfig``: ``base_url``, ``model``, ``api_key_var``, ``headers``,
``headers_from_env``); ``Task.score`` runs the plugged ones after the task's own rewards, and
each call opens a client with ``verifiers.v1.judge.build_async_openai(config)``. verifiers'
defaults point a judge at Prime's cloud inference with a Prime model, and its client neither
retries nor times out a read. So:

- at load (:func:`check_judges`) every plugged judge must name its endpoint and model in the
  benchmark's ``env_args``, and may not carry a credential in a static header;
- before a run that has examples to evaluate (:func:`check_judge_endpoints`), each judge's
  endpoint is asked for its model list, so a judge that is down, refuses its key or does not
  serve its model fails the benchmark at once, before a model server is started for it;
- during a run (:func:`plugin_judge_clients`) that client is the plugin's own openai client
  (:func:`~pytest_modal_eval.client.direct_client.open_sdk_client`): the endpoint and model
  from the config, the key from the environment variable ``api_key_var`` names, the run's
  ``eval.request_timeout`` and ``eval.max_retries``, and a failure raised as
  :class:`JudgeCallError` naming the judge and its endpoint (verifiers records it as the
  rollout's scoring error). A judge that task code builds itself goes through the same
  client, and one without a ``base_url`` fails its rollout instead of reaching the default.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import openai
import verifiers.v1 as vf
import verifiers.v1.judge as judge_module
from verifiers.v1.configs.client import BaseClientConfig

from pytest_modal_eval.client.direct_client import open_sdk_client
from pytest_modal_eval.exceptions import EndpointError, EnvironmentLoadError
from pytest_modal_eval.redact import is_secret_name

#: The config fields that say where a judge is and which model answers.
ENDPOINT_FIELDS = ("base_url", "model")
#: verifiers' default key variable for a client config, the Prime CLI's.
PRIME_KEY_VAR = "PRIME_API_KEY"


class JudgeCallError(RuntimeError):
    """A judge's request failed after the plugin's retries."""


def judge_name(config: vf.JudgeConfig) -> str:
    """The judge's reward key, as verifiers names it (``name``, else ``id``)."""
    return str(config.name or config.id or type(config).__name__)


def check_judges(
    env_id: str, judges: Sequence[vf.JudgeConfig], env_args: Mapping[str, Any]
) -> None:
    """Refuse a plugged judge whose endpoint and model the benchmark's ``env_args`` do not name
    (verifiers' defaults, or the user's Prime CLI configuration, would pick them), or whose
    config holds a credential."""
    task = env_args.get("task")
    entries = task.get("judges") if isinstance(task, Mapping) else None
    for index, config in enumerate(judges):
        where = f"env_args.task.judges[{index}]"
        name = judge_name(config)
        entry = entries[index] if isinstance(entries, list) and index < len(entries) else None
        given = entry if isinstance(entry, Mapping) else {}
        missing = [field for field in ENDPOINT_FIELDS if field not in given]
        if missing:
            fields = " and ".join(f"{where}.{field}" for field in missing)
            raise EnvironmentLoadError(
                f"environment {env_id!r}: judge {name!r} names no "
                f"{' or '.join(missing)} in the benchmark's env_args, so verifiers would send "
                f"its calls to its default cloud endpoint; set {fields} (an OpenAI-compatible "
                "endpoint, e.g. http://127.0.0.1:8001/v1, and the model it serves); a key it "
                f"needs is read from the environment variable {where}.api_key_var names"
            )
        problem = client_config_problem(config, where)
        if problem:
            raise EnvironmentLoadError(f"environment {env_id!r}: judge {name!r}: {problem}")


def client_config_problem(
    config: BaseClientConfig, where: str, source: str = "the benchmark file"
) -> str | None:
    """Why a client config (a judge's, a seat's) given at ``where`` in ``source`` cannot be
    used as it stands: not an http(s) URL, a query or credentials in it, a credential in a static
    header; or None."""
    url = urlsplit(config.base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        return f"{where}.base_url {config.base_url!r} is not an http(s) URL"
    if url.query or url.fragment:
        return (
            f"{where}.base_url has a query string or fragment; clients add the API path after "
            "the base URL, so it would not reach the server as meant: give the endpoint only "
            f"(e.g. https://host/v1) and put a key in an environment variable named by "
            f"{where}.api_key_var"
        )
    if url.username or url.password:
        return (
            f"{where}.base_url holds credentials; put the key in an environment variable and "
            f"name it in {where}.api_key_var"
        )
    secret = sorted(header for header in config.headers if is_secret_name(header))
    if secret:
        return (
            f"{where}.headers sets {secret} in {source}; credentials come from the environment: "
            f"use {where}.headers_from_env (header name -> environment variable) or "
            f"{where}.api_key_var"
        )
    return None


@dataclass(frozen=True)
class _Transport:
    request_timeout: float
    max_retries: int
    #: (base_url, model) of the judges :func:`check_judges` passed.
    checked: frozenset[tuple[str, str]]


_transport: contextvars.ContextVar[_Transport | None] = contextvars.ContextVar(
    "pytest_modal_eval_judge_transport", default=None
)
_verifiers_client = judge_module.build_async_openai


class JudgeOpenAI(openai.AsyncOpenAI):
    """The openai client of a judge (or another model an environment names): a failure after
    the retries names it (``label``: ``judge 'x'``, ``seat 'y'``)."""

    label: str = ""

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().request(*args, **kwargs)
        except openai.APIError as exc:
            raise JudgeCallError(
                f"{self.label} at {self.base_url}: {type(exc).__name__}: {exc}"
            ) from exc


def client_headers(config: BaseClientConfig) -> dict[str, str]:
    """``config``'s static headers with those its ``headers_from_env`` variables set."""
    headers = dict(config.headers)
    for header, variable in config.headers_from_env.items():
        value = os.environ.get(variable)
        if value is not None:
            headers[header] = value
    return headers


def endpoint_client(
    config: BaseClientConfig, label: str, request_timeout: float, max_retries: int
) -> JudgeOpenAI:
    """An openai client for a verifiers client config: its endpoint, key variable and
    headers, the plugin's timeouts, retries and proxy rule."""
    client: JudgeOpenAI = open_sdk_client(
        config.base_url,
        api_key=os.environ.get(config.api_key_var),
        headers=client_headers(config),
        request_timeout=request_timeout,
        max_retries=max_retries,
        max_connections=8,
        sdk_class=JudgeOpenAI,
    )
    client.label = label
    return client


def judge_client(config: vf.JudgeConfig, request_timeout: float, max_retries: int) -> JudgeOpenAI:
    """The client one judge call uses (:func:`endpoint_client`)."""
    return endpoint_client(config, f"judge {judge_name(config)!r}", request_timeout, max_retries)


def check_judge_endpoints(judges: Sequence[vf.JudgeConfig], timeout: float) -> None:
    """GET ``/models`` from each plugged judge's endpoint (all at once), through the client its
    calls use, waiting up to ``timeout`` for an answer (a scaled-to-zero endpoint may take that
    long to start); raise :class:`EndpointError` naming the judge, its field and the fix when
    one is unreachable, refuses its key, or lists models without the judge's. A 404 on
    ``/models`` below a versioned API path (``.../v1``) is an endpoint that lists no models,
    and is not checked further; elsewhere it is a base_url without its API path."""
    problems = asyncio.run(_judge_problems(judges, timeout))
    if problems:
        raise EndpointError("; ".join(problems))


async def _judge_problems(judges: Sequence[vf.JudgeConfig], timeout: float) -> list[str]:
    wheres = [f"env_args.task.judges[{index}]" for index in range(len(judges))]
    asked = zip(judges, wheres, strict=True)
    found = await asyncio.gather(
        *(
            endpoint_problem(c, c.model, f"judge {judge_name(c)!r}", where, timeout)
            for c, where in asked
        )
    )
    return [
        f"judge {judge_name(config)!r} ({where}) at {config.base_url}: {problem}"
        for config, where, problem in zip(judges, wheres, found, strict=True)
        if problem is not None
    ]


#: The last segment of an OpenAI-compatible API path: v1, v2beta, ...
_VERSIONED = re.compile(r"/v\d+[a-z0-9]*/?$")


async def endpoint_problem(
    config: BaseClientConfig,
    model: str | None,
    label: str,
    where: str,
    timeout: float,
    model_field: str | None = None,
) -> str | None:
    """Why the endpoint ``config`` names cannot serve ``model`` (unreachable, refuses its key,
    does not list the model; ``None``: not checked), said with the fields under ``where``
    (``model_field``: where the model is named, else ``<where>.model``); or None when it
    can."""
    client = endpoint_client(config, label, request_timeout=timeout, max_retries=1)
    try:
        served = [entry.id async for entry in client.models.list()]
    except JudgeCallError as exc:
        cause = exc.__cause__
        if isinstance(cause, openai.NotFoundError):
            if _VERSIONED.search(urlsplit(config.base_url).path):
                return None
            return (
                "the endpoint answered 404 on /models; is the API path (usually /v1) missing "
                f"from {where}.base_url?"
            )
        if isinstance(cause, openai.AuthenticationError | openai.PermissionDeniedError):
            variable = config.api_key_var
            state = "is set" if os.environ.get(variable) else "is not set"
            return (
                f"the endpoint refused the key (HTTP {cause.status_code}); it is read from "
                f"${variable} ({where}.api_key_var), which {state}"
            )
        detail = f"{cause or exc}"
        if isinstance(cause, openai.APIConnectionError) and cause.__cause__ is not None:
            detail += f" {type(cause.__cause__).__name__}: {cause.__cause__}"
        noun = label.split(" ", 1)[0]  # judge, seat
        return f"GET /models failed ({detail}); check that the {noun}'s server is running"
    finally:
        await client.close()
    if served and model is not None and model not in served:
        return (
            f"the endpoint does not serve model {model!r}; it serves: "
            f"{', '.join(served)}. Set {model_field or f'{where}.model'} to the served name"
        )
    return None


def _build_judge_client(config: vf.JudgeConfig) -> Any:
    transport = _transport.get()
    if transport is None:  # a judge outside a plugin run: verifiers' own client
        return _verifiers_client(config)
    # With the Prime key variable, verifiers fills base_url from the Prime CLI configuration
    # and it counts as set; any other variable leaves an unset base_url unset.
    explicit = "base_url" in config.model_fields_set and config.api_key_var != PRIME_KEY_VAR
    if not explicit and (config.base_url, config.model) not in transport.checked:
        raise JudgeCallError(
            f"judge {judge_name(config)!r} names no base_url, so its calls would go to "
            "verifiers' default cloud endpoint; give the judge config a base_url, a model and "
            "the api_key_var naming its key's environment variable"
        )
    return judge_client(config, transport.request_timeout, transport.max_retries)


@contextlib.contextmanager
def plugin_judge_clients(
    judges: Sequence[vf.JudgeConfig], *, request_timeout: float, max_retries: int
) -> Iterator[None]:
    """While open, judges called in this context (and the asyncio tasks it starts) use
    :func:`judge_client`; ``judges`` are the plugged ones :func:`check_judges` passed."""
    if judge_module.build_async_openai is not _build_judge_client:
        judge_module.build_async_openai = _build_judge_client
    checked = frozenset((config.base_url, config.model) for config in judges)
    token = _transport.set(_Transport(request_timeout, max_retries, checked))
    try:
        yield
    finally:
        _transport.reset(token)

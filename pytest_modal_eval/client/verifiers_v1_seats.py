"""Seats an environment gives a model of their own (verifiers 0.4: ``AgentConfig.model``,
``AgentConfig.client``): who plays them, checked at load and before the run, and the plugin
client each such endpoint gets.

``vf-eval`` resolves a seat with verifiers' ``resolve_agent``: the seat's own ``model`` and
``client`` where it pins them, else the run's (``--model``, ``--client.*``). A modeled user
(``user-sim``'s ``user``) or a game's opponent is played that way by another model at another
endpoint while the benchmark's model plays the other seats. The plugin does the same: a
seat's pinned endpoint gets a plugin client of its own (:class:`SeatClients`: the run's
timeouts, retries, in-flight cap, answer journal and proxy rule; its key read from the
environment variable its ``api_key_var`` names), a seat that pins only a model sends that model
name to the benchmark's endpoint, as ``vf-eval`` does.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from verifiers.v1.configs.agent import AgentConfig
from verifiers.v1.configs.client import BaseClientConfig, TrainClientConfig

from pytest_modal_eval.client.verifiers_v1_judges import (
    client_config_problem,
    client_headers,
    endpoint_problem,
)
from pytest_modal_eval.exceptions import EndpointError, EnvironmentLoadError

#: The fields of a seat that say who plays it (model, endpoint, sampling over the run's).
PLAYER_FIELDS = ("model", "client", "sampling")


@dataclass(frozen=True)
class SeatPlayer:
    """A seat's own model and endpoint (``None``: the benchmark's) and where each was set:
    ``model_from`` ``env`` (the environment's config class) or ``benchmark`` (the YAML's
    ``agent.env.<seat>``); ``model_field`` and ``where`` (the client's field, without
    ``.client``) name them as the user finds them, ``source`` the file ``where`` is in."""

    seat: str
    model: str | None
    model_from: str
    model_field: str
    client: BaseClientConfig | None
    where: str
    source: str

    def describe(self, run_model: str | None) -> dict[str, Any]:
        """What ``metadata.json`` records of who played the seat."""
        if self.model is None:
            return {**run_player(run_model), "endpoint": self._endpoint()}
        return {"model": self.model, "model_from": self.model_from, "endpoint": self._endpoint()}

    def _endpoint(self) -> str | None:
        return self.client.base_url if self.client is not None else None


def run_player(run_model: str | None) -> dict[str, Any]:
    """:meth:`SeatPlayer.describe` of a seat that pins nothing: the benchmark's model plays."""
    return {"model": run_model, "model_from": "default", "endpoint": None}


def seat_players(
    config: Any, seats: Iterable[str], from_benchmark: Mapping[str, Mapping[str, Any]]
) -> dict[str, SeatPlayer]:
    """The seats of the built env ``config`` that pin a model or an endpoint;
    ``from_benchmark``: the seats' player fields the YAML's ``agent.env`` set."""
    config_class = type(config)
    try:
        source = inspect.getsourcefile(config_class) or config_class.__module__
    except TypeError:
        source = config_class.__module__
    players = {}
    for name in seats:
        spec: AgentConfig = getattr(config, name)
        if spec.model is None and spec.client is None:
            continue
        given = from_benchmark.get(name, {})
        in_env = f"{config_class.__name__}.{name}"
        in_yaml = f"agent.env.{name}"
        model_field = f"{in_yaml if 'model' in given else in_env}.model"
        players[name] = SeatPlayer(
            seat=name,
            model=spec.model,
            model_from="benchmark" if "model" in given else "env",
            model_field=model_field,
            client=spec.client,
            where=in_yaml if "client" in given else in_env,
            source="the benchmark file" if "client" in given else source,
        )
    return players


def check_players(env_id: str, players: Mapping[str, SeatPlayer]) -> None:
    """Refuse, in one line naming the file, the field and the fix, a seat endpoint the plugin
    cannot send to: a training client, verifiers' default cloud endpoint, credentials in the
    URL or in a static header."""
    for player in players.values():
        client = player.client
        if client is None:
            continue
        where = f"{player.where}.client"
        head = f"environment {env_id!r}: seat {player.seat!r} ({player.source}: {where})"
        if isinstance(client, TrainClientConfig):
            raise EnvironmentLoadError(
                f"{head} is a training client (type: train), which needs a vLLM engine's token "
                f"endpoint; give the seat an eval client ({where}.type: eval)"
            )
        if "base_url" not in client.model_fields_set:
            raise EnvironmentLoadError(
                f"{head} names no base_url, so verifiers would send the seat's calls to its "
                f"default cloud endpoint; set {where}.base_url (an OpenAI-compatible endpoint) "
                f"and {where}.api_key_var (the environment variable holding its key)"
            )
        problem = client_config_problem(client, where, player.source)
        if problem:
            raise EnvironmentLoadError(f"{head}: {problem}")


def secret_variables(players: Mapping[str, SeatPlayer]) -> list[str]:
    """The environment variables holding the seats' keys and secret headers."""
    return [
        name
        for player in players.values()
        if player.client is not None
        for name in (player.client.api_key_var, *player.client.headers_from_env.values())
    ]


def check_player_endpoints(players: Mapping[str, SeatPlayer], timeout: float) -> None:
    """GET ``/models`` from every seat's own endpoint (all at once), through the client its
    calls use; raise :class:`EndpointError` naming the seat, its file and field and the fix
    when one is unreachable, refuses its key or does not list the seat's model."""
    asked = [p for p in players.values() if p.client is not None]
    if asked:
        problems = asyncio.run(_problems(asked, timeout))
        if problems:
            raise EndpointError("; ".join(problems))


async def _problems(players: list[SeatPlayer], timeout: float) -> list[str]:
    found = await asyncio.gather(
        *(
            endpoint_problem(
                p.client,
                p.model,
                f"seat {p.seat!r}",
                f"{p.where}.client",
                timeout,
                model_field=p.model_field,
            )
            for p in players
        )
    )
    return [
        f"seat {p.seat!r} ({p.source}: {p.where}.client) at "
        f"{p.client.base_url if p.client else ''}: {problem}"
        for p, problem in zip(players, found, strict=True)
        if problem is not None
    ]


class SeatClients:
    """The model client of each endpoint a seat pins, made on first use by ``make`` (the
    endpoint, its key, its headers) and closed with :meth:`aclose`; the run's own endpoint
    (``run_client``) keeps the benchmark's client."""

    def __init__(
        self, run_client: BaseClientConfig, make: Callable[[str, str | None, dict[str, str]], Any]
    ) -> None:
        self._run = run_client.model_dump_json()
        self._make = make
        self._clients: dict[str, Any] = {}

    def for_config(self, config: BaseClientConfig) -> Any | None:
        """The client for a session's endpoint config, or None for the run's."""
        key = config.model_dump_json()
        if key == self._run:
            return None
        if key not in self._clients:
            self._clients[key] = self._make(
                config.base_url, os.environ.get(config.api_key_var), client_headers(config)
            )
        return self._clients[key]

    def opened(self) -> list[Any]:
        return list(self._clients.values())

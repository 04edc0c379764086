"""A v1 environment as verifiers' own evaluation builds it: its ``Env``, seats, harness, runtime.

``vf-eval <taskset>`` loads the environment's config (``env_config_type``: the taskset's own
``Env`` when its package exports one, else ``SingleAgentEnv``), builds the ``Env`` and plays
each task as one *episode* (``Env.run_episode``): the env's ``run()`` drives its seats (one
``agent`` for a plain taskset; a scripted user or a game engine in a ``SingleAgentEnv``
subclass; several agents in a two-player game), each seat's harness launched in its runtime.
The plugin does the same, with three things of its own:

- the model client: every seat's model calls go through the plugin's interception server
  (:class:`~pytest_modal_eval.client.verifiers_v1.PluginInterception`), so the in-flight cap,
  answer journal, seeds, retries and proxies apply;
- runtimes: a seat whose env does not pin a runtime runs in ``subprocess`` (verifiers'
  default, ``prime``, is a cloud sandbox behind a public tunnel), ``modal`` runs through a
  relay in each sandbox (:mod:`~pytest_modal_eval.client.modal_sandbox`), and a runtime this
  machine cannot provide is refused when the benchmark loads;
- the benchmark's ``agent`` section overrides harness and runtime (:class:`SeatPlan`) and
  may pair the taskset with a reusable ``Env`` by id (``agent.env``, ``vf-eval --env.id``).

A seat that pins its own model or endpoint is played by it (:mod:`.verifiers_v1_seats`).

``Env`` internals used here (``_shared_tools``, ``_interception``: what ``Env.serving`` sets)
are in :func:`serving` only; ``tests/test_verifiers_conformance.py`` fails when they change.
"""

from __future__ import annotations

import contextlib
import pkgutil
import shutil
import subprocess
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import verifiers.v1 as vf
from pydantic import ValidationError
from verifiers.v1.configs.agent import AgentConfig
from verifiers.v1.utils.loaders import env_config_type, load_environment

from pytest_modal_eval.client import modal_sandbox
from pytest_modal_eval.client.verifiers_v1_seats import (
    PLAYER_FIELDS,
    SeatPlayer,
    check_players,
    run_player,
    seat_players,
)
from pytest_modal_eval.exceptions import EnvironmentLoadError

#: Container runtimes whose daemon must answer on this machine: runtime -> (command, how to
#: get it).
CONTAINER_RUNTIMES = {
    "docker": ("docker", "install Docker and start its daemon (`docker info` must answer)"),
    "podman": ("podman", "install Podman (`podman info` must answer)"),
    "apptainer": ("apptainer", "install Apptainer (`apptainer --version` must answer)"),
}

#: Runtimes the plugin cannot offer: the harness there reaches the plugin's interception
#: server only through a public tunnel (verifiers' is Prime's, which needs a Prime login).
#: ``modal`` runs through a relay in the sandbox instead (client/modal_sandbox.py).
REMOTE_RUNTIMES = ("prime", "e2b")


@dataclass(frozen=True)
class SeatPlan:
    """How one seat is played: its harness and runtime (as verifiers configs, JSON-able),
    and where each came from (``env``: the environment declares it; ``benchmark``: the
    YAML's ``agent`` section; ``default``: verifiers' default harness, the plugin's default
    runtime ``subprocess``)."""

    harness: dict[str, Any] | None
    runtime: dict[str, Any]
    harness_from: str
    runtime_from: str

    def describe(self, resolved_harness: str) -> dict[str, Any]:
        return {
            "harness": resolved_harness,
            "harness_from": self.harness_from,
            "runtime": self.runtime.get("type", "subprocess"),
            "runtime_from": self.runtime_from,
        }


@dataclass
class LoadedEnv:
    """An ``Env`` built for the benchmark, with how each seat is played and by whom
    (``players``: the seats that pin a model or endpoint of their own); ``env_ref``: the
    reusable ``Env`` the benchmark paired with the taskset (``agent.env``), if any."""

    env: vf.Env[Any]
    seats: dict[str, SeatPlan] = field(default_factory=dict)
    players: dict[str, SeatPlayer] = field(default_factory=dict)
    env_ref: str | None = None

    def played(self, run_model: str | None = None) -> dict[str, dict[str, Any]]:
        """Seat -> harness, runtime and model used, recorded in ``metadata.json``;
        ``run_model`` is the benchmark's model (what plays a seat that pins none)."""
        harnesses = self.env.config.agent_harnesses()
        return {
            name: {
                **plan.describe(harnesses[name].id if harnesses.get(name) else ""),
                **(
                    self.players[name].describe(run_model)
                    if name in self.players
                    else run_player(run_model)
                ),
            }
            for name, plan in self.seats.items()
        }


def seat_defaults(config_type: type[Any]) -> dict[str, AgentConfig]:
    """The seats an env config declares (each ``AgentConfig`` field with its default)."""
    return {
        name: info.default
        for name, info in config_type.model_fields.items()
        if isinstance(info.default, AgentConfig)
    }


def _as_config(value: str | Mapping[str, Any] | None, key: str) -> dict[str, Any] | None:
    if value is None:
        return None
    return {key: value} if isinstance(value, str) else dict(value)


def plan_seats(
    declared: Mapping[str, AgentConfig],
    harness: str | Mapping[str, Any] | None,
    runtime: str | Mapping[str, Any] | None,
) -> dict[str, SeatPlan]:
    """Each seat's harness and runtime: the benchmark's ``agent.runtime`` for every seat;
    its ``agent.harness`` for every seat whose env does not pin one (a scripted user on
    verifiers' ``null`` harness keeps it); else what the env declares; else verifiers'
    default harness and the ``subprocess`` runtime."""
    plans = {}
    for name, spec in declared.items():
        pinned = spec.harness is not None
        if pinned:
            seat_harness: dict[str, Any] | None = spec.harness.model_dump(mode="json")
            harness_from = "env"
        elif harness is not None:
            seat_harness, harness_from = _as_config(harness, "id"), "benchmark"
        else:
            seat_harness, harness_from = None, "default"
        if runtime is not None:
            seat_runtime, runtime_from = _as_config(runtime, "type") or {}, "benchmark"
        elif "runtime" in spec.model_fields_set:
            seat_runtime, runtime_from = spec.runtime.model_dump(mode="json"), "env"
        else:
            seat_runtime, runtime_from = {"type": "subprocess"}, "default"
        plans[name] = SeatPlan(seat_harness, seat_runtime, harness_from, runtime_from)
    return plans


def runtime_problem(runtime: Mapping[str, Any], where: str) -> str | None:
    """Why the runtime cannot be used on this machine (one line, with what to set), or None."""
    kind = str(runtime.get("type", "subprocess"))
    if kind == "subprocess":
        return None
    if kind in CONTAINER_RUNTIMES:
        command, how = CONTAINER_RUNTIMES[kind]
        probe = [command, "--version"] if kind == "apptainer" else [command, "info"]
        fix = f"{how}, or set agent.runtime: subprocess"
        if shutil.which(command) is None:
            return f"{where} runtime {kind!r}: `{command}` is not installed; {fix}"
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{where} runtime {kind!r}: `{' '.join(probe)}` failed ({exc}); {fix}"
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            reason = said[-1] if said else f"exit status {done.returncode}"
            return f"{where} runtime {kind!r}: `{' '.join(probe)}` failed ({reason}); {fix}"
        return None
    if kind == modal_sandbox.RUNTIME:
        return modal_sandbox.runtime_problem(where)
    if kind in REMOTE_RUNTIMES:
        return (
            f"{where} runtime {kind!r}: a harness in a remote sandbox reaches the model only "
            "through a public tunnel to the plugin's interception server, which "
            "pytest-modal-eval does not open; set agent.runtime: modal (a relay in the "
            "sandbox, no tunnel), subprocess, or docker/podman where a daemon runs"
        )
    return f"{where} runtime {kind!r} is unknown; set agent.runtime: subprocess"


#: Env config fields the plugin sets itself, which ``agent.env`` may not.
PLUGIN_ENV_FIELDS = ("id", "taskset", "interception")


def known_envs() -> list[str]:
    """The ids of the reusable ``Env`` classes verifiers ships (``verifiers.v1.envs``)."""
    from verifiers.v1 import envs

    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(envs.__path__))


def _env_choice(env: str | Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """``agent.env`` as (its id, its config values): a bare id, or ``{id: ..., ...}``."""
    if env is None:
        return "", {}
    if isinstance(env, str):
        return env, {}
    knobs = dict(env)
    ident = knobs.pop("id", None)
    if not isinstance(ident, str) or not ident:
        raise EnvironmentLoadError(
            "agent.env names no id; set agent.env: <id> or agent.env: {id: <id>, ...} with "
            f"one of: {', '.join(known_envs())}"
        )
    return ident, knobs


def _config_type(env_id: str, env_ref: str) -> type[Any]:
    """``vf-eval``'s env config class: ``agent.env``'s ``Env`` when set (an unknown id is
    refused naming the known ones), else the taskset's own, else ``SingleAgentEnv``'s."""
    config_type: type[Any]
    if not env_ref:
        config_type = env_config_type(env_id)
        return config_type
    try:
        config_type = env_config_type(env_id, env_ref)
    except (ModuleNotFoundError, AttributeError, TypeError, ValueError) as exc:
        reason = str(exc).splitlines()[0]
        if isinstance(exc, ModuleNotFoundError):
            # verifiers' error chains the import's: the id's own module, or one it imports.
            cause = exc.__cause__
            lacking = getattr(cause, "name", None) or ""
            own = env_ref.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()
            ours = lacking.split(".")[-1] == own or lacking == f"verifiers.v1.envs.{own}"
            reason = (
                "no such package is installed"
                if ours or not lacking
                else f"importing it failed: {cause}"
            )
        raise EnvironmentLoadError(
            f"environment {env_id!r}: agent.env {env_ref!r} is not a verifiers Env ({reason}); "
            f"set agent.env to one verifiers ships ({', '.join(known_envs())}) or to an "
            "installed package exporting an Env in its __all__"
        ) from None
    return config_type


def build_env(
    env_id: str,
    taskset_args: dict[str, Any],
    *,
    harness: str | Mapping[str, Any] | None,
    runtime: str | Mapping[str, Any] | None,
    max_turns: int | None,
    env: str | Mapping[str, Any] | None = None,
) -> LoadedEnv:
    """The ``Env`` for taskset ``env_id`` as ``vf-eval`` resolves it (with ``env``, the
    benchmark's ``agent.env``: the reusable ``Env`` paired with it, as ``--env.id``, and its
    config values), with the seats planned by :func:`plan_seats`, ``max_turns`` for every seat
    that sets no limit of its own, and the seats that pin their own model checked
    (:func:`~.verifiers_v1_seats.check_players`)."""
    env_ref, knobs = _env_choice(env)
    config_type = _config_type(env_id, env_ref)
    declared = seat_defaults(config_type)
    seats = plan_seats(declared, harness, runtime)
    players_given = _seat_players_given(env_id, knobs, declared)
    fixed = sorted(set(knobs) & set(PLUGIN_ENV_FIELDS))
    if fixed:
        raise EnvironmentLoadError(
            f"environment {env_id!r}: agent.env sets {', '.join(fixed)}, which the plugin "
            "sets itself (the taskset is env_id with env_args); remove them"
        )
    data: dict[str, Any] = {
        **knobs,
        "taskset": {**taskset_args, "id": env_id},
        # One interception server on 127.0.0.1; the plugin replaces it (see serving()).
        "interception": {"type": "server"},
    }
    if env_ref:
        data["id"] = env_ref
    for name, plan in seats.items():
        seat: dict[str, Any] = {"runtime": plan.runtime, **players_given.get(name, {})}
        if plan.harness is not None and plan.harness_from != "env":
            seat["harness"] = plan.harness
        if declared[name].max_turns is None and max_turns is not None:
            seat["max_turns"] = max_turns
        data[name] = seat
    try:
        config = config_type.model_validate(data)
    except ValidationError as exc:
        raise EnvironmentLoadError(_problem(env_id, exc, set(declared))) from None
    for name, plan in seats.items():
        problem = runtime_problem(plan.runtime, f"environment {env_id!r}: seat {name!r}:")
        if problem:
            raise EnvironmentLoadError(problem)
    players = seat_players(config, seats, players_given)
    check_players(env_id, players)
    return LoadedEnv(load_environment(config), seats, players, env_ref or None)


def _seat_players_given(
    env_id: str, knobs: dict[str, Any], declared: Mapping[str, AgentConfig]
) -> dict[str, dict[str, Any]]:
    """The seats' player fields (model, client, sampling) set under ``agent.env.<seat>``,
    taken out of ``knobs``; a seat's other fields have keys of their own."""
    given: dict[str, dict[str, Any]] = {}
    for name in [key for key in knobs if key in declared]:
        values = knobs.pop(name)
        if not isinstance(values, Mapping):
            raise EnvironmentLoadError(
                f"environment {env_id!r}: agent.env.{name} must be a mapping of "
                f"{', '.join(PLAYER_FIELDS)}"
            )
        other = sorted(set(values) - set(PLAYER_FIELDS))
        if other:
            raise EnvironmentLoadError(
                f"environment {env_id!r}: agent.env.{name} sets {', '.join(other)}; a seat "
                f"there takes only {', '.join(PLAYER_FIELDS)} (its harness and runtime are "
                "agent.harness and agent.runtime, its turn cap eval.max_turns)"
            )
        given[name] = dict(values)
        client = values.get("client")
        if isinstance(client, Mapping) and "type" not in client:
            # verifiers' client config is a union tagged by type; eval is its default.
            given[name]["client"] = {**client, "type": "eval"}
    return given


def _problem(env_id: str, exc: ValidationError, seats: set[str]) -> str:
    """Rejected fields, named as the benchmark writes them: ``env_args.*`` (the taskset's),
    ``agent.*`` (a seat's harness and runtime), ``agent.env.*`` (the env's own values and a
    seat's player fields)."""
    problems = []
    for error in exc.errors():
        loc = [str(p) for p in error["loc"]]
        if loc[:1] == ["taskset"]:
            path = ".".join(["env_args", *loc[1:]])
        elif loc[:1] and loc[0] in seats and not (loc[1:2] and loc[1] in PLAYER_FIELDS):
            path = ".".join(["agent", *loc[1:]])
        else:
            path = ".".join(["agent", "env", *loc])
        problems.append(f"{path}: {error['msg']}")
    return f"environment {env_id!r} rejected its configuration: {'; '.join(problems)}"


@contextlib.asynccontextmanager
async def serving(env: vf.Env[Any], interception: Any, shared: Any) -> AsyncIterator[None]:
    """``Env.serving`` with the plugin's interception server: the env's agents borrow
    ``shared`` tool servers and ``interception`` for the run; the env's own ``start``/
    ``stop`` run around it."""
    env._shared_tools = dict(shared)
    env._interception = interception
    try:
        with modal_sandbox.relayed_modal_runtimes():
            await env.start()
            yield
    finally:
        try:
            await env.stop()
        finally:
            env._shared_tools = {}
            env._interception = None

"""verifiers' v1 API (0.4.x): the implementation :mod:`.verifiers_adapter` picks there.

An environment id names a v1 *taskset*: an installed package (``owner/name@version`` ->
module ``name`` with ``-`` -> ``_``) exporting a ``vf.Taskset`` subclass in ``__all__``; its
``env_args`` are the taskset config's fields. ``file-qa`` is the plugin's own
(:mod:`pytest_modal_eval.envs.file_qa_v1`).

Each rollout is one episode of the environment's own ``Env``
(:mod:`.verifiers_v1_env`: its seats, harness and runtime as ``vf-eval`` resolves them, the
benchmark's ``agent`` section over them), with the plugin attached where it must be:

- an interception server on 127.0.0.1 (:class:`PluginInterception`) whose model client is the
  plugin's :class:`~pytest_modal_eval.client.direct_client.DirectOpenAI`, so the in-flight cap,
  the answer journal, per-rollout seeds, retries, timeouts and proxy settings are the same as
  with the classic API (streamed turns included);
- the taskset's shared tool servers (MCP) started once per run here, a task's own started per
  rollout by verifiers;
- judge models (``task.judges``) called through the plugin's openai client, at the endpoint
  and model the benchmark names (:mod:`.verifiers_v1_judges`);
- a seat that pins its own endpoint sends its calls there through a plugin client of its own
  (:mod:`.verifiers_v1_seats`), checked before the benchmark's model server is started;
- nothing is uploaded (results go to the plugin's checkpoint, as with the classic API).

The bundled tasksets (``file-qa``, ``lookup-qa``) are played by ``vf.Agent`` directly with
the plugin's in-process harness ``pytest-modal-eval-chat`` (:mod:`.verifiers_v1_harness`) in
the ``subprocess`` runtime. What cannot run here is refused when the benchmark loads, saying
why and what to set (:func:`load_environment`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import importlib.util
import math
import os
import statistics
import sys
from array import array
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import verifiers.v1 as vf
from pydantic import ValidationError
from pydantic_core import from_json
from verifiers.v1.clients import ModelContext
from verifiers.v1.clients.client import RelayReply
from verifiers.v1.dialects import Dialect
from verifiers.v1.envs.single_agent import SingleAgentEnv
from verifiers.v1.errors import model_error
from verifiers.v1.interception import InterceptionServer
from verifiers.v1.mcp import SharedToolServer, serve_shared
from verifiers.v1.session import RolloutSession
from verifiers.v1.utils.loaders import taskset_config_type

from pytest_modal_eval.client import modal_sandbox, verifiers_v1_judges
from pytest_modal_eval.client.answer_journal import AnswerJournal, current_example
from pytest_modal_eval.client.direct_client import DirectOpenAI, open_direct_client, slot_waits
from pytest_modal_eval.client.environment_errors import (
    interpreter_dirs,
    load_failure,
    not_installed,
    under,
)
from pytest_modal_eval.client.rollout_seeds import ROLLOUT_COLUMN, SLOT_WAIT_COLUMN, seeded
from pytest_modal_eval.client.verifiers_v1_env import LoadedEnv, build_env, runtime_problem, serving
from pytest_modal_eval.client.verifiers_v1_harness import HARNESS_ID, run_client
from pytest_modal_eval.client.verifiers_v1_judges import check_judges, plugin_judge_clients
from pytest_modal_eval.client.verifiers_v1_seats import (
    SeatClients,
    check_player_endpoints,
    run_player,
)
from pytest_modal_eval.client.verifiers_v1_seats import secret_variables as seat_secrets
from pytest_modal_eval.client.workers import Intake, run_workers
from pytest_modal_eval.exceptions import EnvironmentLoadError, RunAborted
from pytest_modal_eval.serving.endpoint import Endpoint

#: How to install a v1 taskset from the Prime environment hub.
INSTALL_HINT = (
    "install it into the environment pytest runs in, from the Prime environment hub: "
    "`prime env install {env_id}` or `uv pip install {env_id} "
    "--extra-index-url https://hub.primeintellect.ai/primeintellect/simple/` (any package that "
    "makes the module `{module}` importable and exports a verifiers v1 Taskset in its __all__; "
    "verifiers {version} is installed, which has only the v1 API)"
)

ExampleCallback = Callable[[int, list[dict[str, Any]]], None]


def module_name(env_id: str) -> str:
    """The module verifiers v1 imports for ``env_id`` (``owner/name@version`` -> ``name``)."""
    return env_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


#: Tasksets shipped with the plugin: env id -> (module, taskset class, its config class).
BUNDLED = {
    "file-qa": ("pytest_modal_eval.envs.file_qa_v1", "FileQATaskset", "FileQATasksetConfig"),
    "lookup-qa": ("pytest_modal_eval.envs.lookup_qa_v1", "LookupTaskset", "LookupTasksetConfig"),
}


#: Config fields the plugin fills itself (the env id, a bundled taskset's benchmark directory).
HIDDEN_CONFIG_FIELDS = ("id", "base_dir")


def missing_environment(env_id: str) -> str | None:
    """Why ``env_id`` cannot be loaded here (not installed), or None; imports nothing new."""
    if env_id in BUNDLED:
        return None
    module = module_name(env_id)
    if importlib.util.find_spec(f"verifiers.v1.tasksets.{module}") or importlib.util.find_spec(
        module
    ):
        return None
    from verifiers import __version__

    return not_installed(
        env_id, BUNDLED, INSTALL_HINT.format(env_id=env_id, module=module, version=__version__)
    )


@dataclass
class V1Environment:
    """A loaded taskset and its tasks (``tasks[i]`` is example ``i``); ``played`` is the
    environment's ``Env`` and how its seats are played (None for the bundled tasksets, which
    the plugin's own harness plays in-process)."""

    env_id: str
    taskset: vf.Taskset[Any, Any]
    tasks: list[vf.Task[Any, Any, Any]]
    played: LoadedEnv | None = None
    scored_seat: str | None = None

    @property
    def seats(self) -> list[str]:
        """The seats an episode records, one record each, in the environment's order (the
        bundled tasksets' one agent is ``agent``)."""
        return list(self.played.seats) if self.played is not None else ["agent"]

    def metadata(self, model: str | None = None) -> dict[str, Any]:
        """What ``metadata.json`` records about how the environment was played; ``model`` is
        the benchmark's, which plays every seat that pins no model of its own."""
        if self.played is None:
            return {
                "env": "SingleAgentEnv",
                "env_from": "plugin",
                "seats": {
                    "agent": {
                        "harness": HARNESS_ID,
                        "harness_from": "plugin",
                        "runtime": "subprocess",
                        "runtime_from": "plugin",
                        **run_player(model),
                    }
                },
            }
        env = self.played.env
        if self.played.env_ref:
            env_from = "benchmark"
        else:
            env_from = "default" if type(env) is SingleAgentEnv else "taskset"
        return {
            "env": type(env).__name__,
            "env_id": self.played.env_ref,
            "env_from": env_from,
            "seats": self.played.played(model),
            "scored_seat": self.scored_seat,
        }


def load_environment(
    env_id: str,
    env_args: dict[str, Any],
    base_dir: Path,
    *,
    agent: Mapping[str, Any] | None = None,
    num_examples: int | None = None,
    max_turns: int | None = None,
) -> V1Environment:
    """Load the v1 environment ``env_id`` with ``env_args`` as its taskset's config: its own
    ``Env`` and seats, harness and runtime as verifiers' evaluation resolves them, with the
    benchmark's ``agent`` section over them; refused, saying why and what to set, where it
    cannot run here. An infinite taskset runs its first ``num_examples`` tasks."""
    problem = missing_environment(env_id)
    if problem:
        raise EnvironmentLoadError(problem)
    agent = dict(agent or {})
    # verifiers' config validators replace parts of the data they are given (``task.judges``
    # entries become config objects); the caller's env_args stay plain JSON.
    given = copy.deepcopy(env_args)
    played: LoadedEnv | None = None
    scored_seat: str | None = None
    if env_id in BUNDLED:
        if any(agent.get(key) for key in ("harness", "runtime", "seat", "env")):
            raise EnvironmentLoadError(
                f"environment {env_id!r} is bundled with pytest-modal-eval and played by its "
                "own in-process harness; remove the benchmark's agent section"
            )
        module_path, taskset_name, config_name = BUNDLED[env_id]
        module = importlib.import_module(module_path)
        try:
            bundled_config = getattr(module, config_name).model_validate(
                {"base_dir": str(base_dir), **given}
            )
        except ValidationError as exc:
            raise EnvironmentLoadError(
                _config_problem(env_id, exc, getattr(module, config_name))
            ) from None
        taskset: vf.Taskset[Any, Any] = getattr(module, taskset_name)(bundled_config)
    else:
        own = module_name(env_id)
        try:
            config_type = taskset_config_type(env_id)
        except Exception as exc:  # the module's own code runs here
            raise load_failure(env_id, "importing its taskset module", exc, own) from None
        try:
            config_type.model_validate({**given, "id": env_id})
        except ValidationError as exc:
            raise EnvironmentLoadError(_config_problem(env_id, exc, config_type)) from None
        try:
            played = build_env(
                env_id,
                given,
                harness=agent.get("harness"),
                runtime=agent.get("runtime"),
                max_turns=max_turns,
                env=agent.get("env"),
            )
        except EnvironmentLoadError:
            raise
        except Exception as exc:
            raise load_failure(env_id, "building its taskset", exc, own) from None
        taskset = played.env.taskset
        scored_seat = _scored_seat(env_id, list(played.seats), agent.get("seat"))
    _check_runnable(env_id, taskset, played)
    check_judges(env_id, judges(taskset), env_args)
    if not taskset.bounded:
        if num_examples is None:
            raise EnvironmentLoadError(
                f"environment {env_id!r} has infinitely many tasks; set eval.num_examples to "
                "the number to run"
            )
        taskset = taskset.take(num_examples)
    try:
        tasks = list(taskset)
    except Exception as exc:
        if env_id in BUNDLED and isinstance(exc, ValueError):  # FileQAError: file, line, field
            raise EnvironmentLoadError(str(exc)) from None
        raise load_failure(env_id, "loading its tasks", exc, module_name(env_id)) from None
    if not tasks:
        raise EnvironmentLoadError(f"environment {env_id!r} has no tasks")
    if played is None or all(p.runtime.get("type") == "subprocess" for p in played.seats.values()):
        opener = played is not None and type(played.env) is not SingleAgentEnv
        _check_tasks(env_id, tasks, user_opens=opener)
    return V1Environment(env_id, taskset, tasks, played, scored_seat)


def _scored_seat(env_id: str, seats: list[str], named: str | None) -> str | None:
    """The seat ``agent.seat`` names (checked), the only one, or None: several seats and no
    name, each gated only when the benchmark asks for every seat (``gate.every_seat``)."""
    if named is not None:
        if named not in seats:
            raise EnvironmentLoadError(
                f"environment {env_id!r} has no seat {named!r} (agent.seat); its seats: "
                f"{', '.join(seats)}"
            )
        return named
    return seats[0] if len(seats) == 1 else None


def judges(taskset: vf.Taskset[Any, Any]) -> list[vf.JudgeConfig]:
    """The judges plugged into the taskset's tasks (``task.judges``)."""
    return list(getattr(taskset.config.task, "judges", None) or [])


def secret_variables(env: V1Environment) -> list[str]:
    """See :meth:`~pytest_modal_eval.client.verifiers_adapter.VerifiersAPI.secret_variables`."""
    players = env.played.players if env.played is not None else {}
    return [
        *(
            name
            for config in judges(env.taskset)
            for name in (config.api_key_var, *config.headers_from_env.values())
        ),
        *seat_secrets(players),
    ]


def check_judge_endpoints(env: V1Environment, timeout: float) -> None:
    """See :func:`~pytest_modal_eval.client.verifiers_v1_judges.check_judge_endpoints`; the
    endpoints seats pin are checked the same way
    (:func:`~pytest_modal_eval.client.verifiers_v1_seats.check_player_endpoints`)."""
    found = judges(env.taskset)
    if found:
        verifiers_v1_judges.check_judge_endpoints(found, timeout)
    if env.played is not None:
        check_player_endpoints(env.played.players, timeout)


def _config_problem(env_id: str, exc: ValidationError, config_type: type[Any]) -> str:
    """Each rejected field with pydantic's reason; an unknown one with the fields there are."""
    problems = []
    for error in exc.errors():
        path = ".".join(str(p) for p in error["loc"])
        problem = f"env_args.{path}: {error['msg']}" if path else f"env_args: {error['msg']}"
        if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
            known = sorted(set(config_type.model_fields) - set(HIDDEN_CONFIG_FIELDS))
            problem += f" (fields: {', '.join(known)})"
        problems.append(problem)
    return f"environment {env_id!r} rejected env_args: {'; '.join(problems)}"


def _check_tasks(
    env_id: str, tasks: Sequence[vf.Task[Any, Any, Any]], *, user_opens: bool = False
) -> None:
    """Refuse tasks a local process cannot play (verifiers would fail each of their
    rollouts, or raise before one starts). ``user_opens``: the environment's ``Env`` may open
    a prompt-less task itself (a scripted or simulated user)."""
    for index, task in enumerate(tasks):
        data = task.data
        if data.prompt is None and not user_opens:
            raise EnvironmentLoadError(
                f"environment {env_id!r}: task {index} has no prompt; such a task is opened by "
                "a user, and a plain taskset (SingleAgentEnv) has none: its prompt opens the "
                "rollout; give every task a prompt, or export an Env that opens it (as "
                "verifiers' user-sim env does)"
            )
        if data.image is not None:
            raise EnvironmentLoadError(
                f"environment {env_id!r}: task {index} runs in the container image "
                f"{data.image!r}, which the subprocess runtime cannot give it: set "
                "agent.runtime: docker (or podman) where a daemon runs"
            )
        if "*" not in data.network_allow or data.network_block:
            raise EnvironmentLoadError(
                f"environment {env_id!r}: task {index} asks for a network policy "
                "(network_allow / network_block), which only verifiers' container runtimes "
                "enforce: set agent.runtime: docker (or podman) where a daemon runs"
            )


def _toolsets(taskset: vf.Taskset[Any, Any]) -> list[Any]:
    """The tool servers a taskset's rollouts use: its tasks' own and its shared ones."""
    task_type = type(taskset).task_type()
    return [*task_type.toolsets(taskset.config.task), *type(taskset).toolsets(taskset.config)]


def _check_runnable(
    env_id: str, taskset: vf.Taskset[Any, Any], played: LoadedEnv | None = None
) -> None:
    """Refuse tasks that need what the seats' runtimes cannot give them, and tool servers
    in a runtime this machine does not have."""
    task_type = type(taskset).task_type()
    runtimes = (
        {p.runtime.get("type", "subprocess") for p in played.seats.values()}
        if played
        else {"subprocess"}
    )
    if task_type.NEEDS_CONTAINER and "subprocess" in runtimes:
        raise EnvironmentLoadError(
            f"environment {env_id!r}: its tasks ({task_type.__name__}) need a container "
            "runtime, and the subprocess runtime is not one: set agent.runtime: docker (or "
            "podman) where a daemon runs"
        )
    for toolset in _toolsets(taskset):
        config = toolset.config
        runtime = getattr(config, "runtime", None)
        if getattr(config, "url", None) is not None or runtime is None:
            continue
        if runtime.type == modal_sandbox.RUNTIME:
            raise EnvironmentLoadError(
                f"environment {env_id!r}: tool server {toolset.server_name!r}: runtime "
                "'modal': a tool server in a Modal sandbox reaches its rollouts' state on this "
                "machine only through a public tunnel, which pytest-modal-eval does not open; "
                "set that toolset config's `runtime` to `{type: subprocess}` or its `url` to a "
                "server already running"
            )
        problem = runtime_problem(
            runtime.model_dump(mode="json"),
            f"environment {env_id!r}: tool server {toolset.server_name!r}:",
        )
        if problem:
            raise EnvironmentLoadError(
                problem.replace(
                    "set agent.runtime: subprocess",
                    "set that toolset config's `runtime` to "
                    "`{type: subprocess}` or its `url` to a server already running",
                )
            )


def dataset_rows(env: V1Environment, num_examples: int | None) -> V1Rows:
    tasks = env.tasks if num_examples is None else env.tasks[:num_examples]
    return V1Rows(tasks)


def prompt_messages(data: vf.TaskData) -> list[dict[str, Any]]:
    """The task's prompt as chat messages, as the harness sends them (system message first)."""
    messages: list[dict[str, Any]] = []
    if data.system_prompt:
        messages.append({"role": "system", "content": data.system_prompt})
    if isinstance(data.prompt, str):
        messages.append({"role": "user", "content": data.prompt})
    elif data.prompt is not None:
        messages += [m.model_dump(mode="json", exclude_none=True) for m in data.prompt]
    return messages


def task_row(example_id: int, task: vf.Task[Any, Any, Any]) -> dict[str, Any]:
    data = task.data
    return {
        "example_id": example_id,
        "prompt": prompt_messages(data),
        "answer": getattr(data, "answer", None),
        "info": getattr(data, "info", None),
    }


class V1Rows(Sequence[dict[str, Any]]):
    """The tasks as plain rows (``example_id`` = the task's position, ``prompt``, ``answer``,
    ``info``), made as they are read."""

    def __init__(self, tasks: Sequence[vf.Task[Any, Any, Any]], start: int = 0) -> None:
        self._tasks = tasks
        self._start = start

    def __len__(self) -> int:
        return len(self._tasks)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> V1Rows: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | V1Rows:
        if isinstance(index, slice):
            positions = range(len(self))[index]
            if positions.step != 1:
                raise ValueError("rows are sliced contiguously")
            return V1Rows(self._tasks[index], self._start + positions.start)
        position = range(len(self))[index]
        return task_row(self._start + position, self._tasks[position])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for position, task in enumerate(self._tasks):
            yield task_row(self._start + position, task)

    def example_ids(self) -> array[int]:
        return array("q", range(self._start, self._start + len(self)))


@dataclass
class _Rollout:
    example_id: int
    index: int
    waits: list[float]


class PluginClient(vf.Client):  # type: ignore[misc]
    """The model client behind verifiers' interception server: the plugin's
    :class:`DirectOpenAI` sends each request, seeded for its rollout and keyed for the answer
    journal by its example."""

    def __init__(self, direct: DirectOpenAI, rollouts: dict[str, _Rollout] | None = None) -> None:
        self.direct = direct
        # trace id -> its rollout (shared by the clients of one run's endpoints)
        self.rollouts: dict[str, _Rollout] = {} if rollouts is None else rollouts
        self._http = direct._http

    async def get_response(
        self,
        dialect: Dialect,
        body: dict[str, Any],
        sampling: vf.SamplingConfig,
        session_id: str | None = None,
        turn: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> vf.Response:
        rollout = self.rollouts.get(session_id or "")
        if rollout is not None:
            body = dict(seeded(body, rollout.index))
        example_token = current_example.set(rollout.example_id if rollout else None)
        waits_token = slot_waits.set(rollout.waits if rollout else None)
        try:
            answer = await self.direct.post(
                dialect.upstream_path, body=body, cast_to=self._http.Response, options={}
            )
        except Exception as exc:
            raise _provider_error(exc) from exc
        finally:
            slot_waits.reset(waits_token)
            current_example.reset(example_token)
        try:
            raw = from_json(answer.content)
            response = dialect.parse_response(dialect.validate_response(raw))
        except (ValueError, ValidationError) as exc:
            raise model_error(
                f"malformed upstream response: {type(exc).__name__}: {exc}", status_code=502
            ) from exc
        response.raw = raw
        return response

    async def relay(
        self,
        dialect: Dialect,
        body: dict[str, Any],
        session_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> RelayReply:
        """A streamed turn (verifiers' harness programs stream): asked whole through
        :meth:`get_response` (so it is capped, journaled, seeded and retried like any other)
        and handed back as the dialect's server-sent events, which the interception server
        reads to the end before it serves the turn anyway."""
        whole = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        response = await self.get_response(
            dialect, whole, vf.SamplingConfig(), session_id=session_id, headers=headers
        )
        events = list(dialect.stream_events(response.raw or {}))

        async def chunks() -> AsyncIterator[bytes]:
            for event in events:
                yield event

        async def close() -> None:
            pass

        return RelayReply(content_type="text/event-stream", chunks=chunks(), close=close)

    async def close(self) -> None:
        pass  # closed by the run, which owns it


def _provider_error(exc: Exception) -> Exception:
    """openai's exception as verifiers' ``ProviderError`` (recorded on the trace as such)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        error: Exception = model_error(str(exc), status_code=exc.status_code)
        return error
    if isinstance(exc, openai.APITimeoutError):
        error = model_error(str(exc) or "request timed out", status_code=504)
        return error
    if isinstance(exc, openai.APIConnectionError):
        error = model_error(str(exc) or "connection error", status_code=503)
        return error
    return exc


class PluginInterception(InterceptionServer):  # type: ignore[misc]
    """verifiers' interception server on 127.0.0.1 whose rollouts use ``client``, but those
    of a seat that pins an endpoint of its own: the client ``seat_clients`` gives for it.

    ``shared_tools`` are the taskset's tool servers started for the run: those that keep
    per-rollout state reach it here with their own secret."""

    def __init__(
        self,
        client: PluginClient,
        shared_tools: Mapping[str, SharedToolServer] = {},
        seat_clients: SeatClients | None = None,
    ) -> None:
        super().__init__(
            requires_tunnel=False,
            state_service_secrets=tuple(
                server.state_secret for server in shared_tools.values() if server.state_secret
            ),
        )
        self.plugin_client = client
        self.seat_clients = seat_clients

    def register(self, session: RolloutSession) -> tuple[str, str]:
        secrets: tuple[str, str] = super().register(session)
        own = self.seat_clients.for_config(session.ctx.client) if self.seat_clients else None
        session.client = own or self.plugin_client
        return secrets


#: The stop condition verifiers records when the agent's ``max_turns`` refused a turn.
TURN_CAP_STOP = "max_turns"


def turn_cap_error(trace: vf.Trace, max_turns: int | None) -> dict[str, str]:
    """The error recorded for a rollout stopped by ``eval.max_turns``: not a finish the
    taskset decided, so not scored."""
    return {
        "error": "MaxTurnsReached",
        "message": f"the rollout was stopped after {trace.num_turns} model turns, "
        f"eval.max_turns ({max_turns}), before the model answered or the taskset's own stop "
        "conditions ended it; raise eval.max_turns, or give the taskset a @vf.stop that ends "
        "such rollouts (and scores them)",
    }


def prompt_length(
    messages: Sequence[Mapping[str, Any]], prompt: Sequence[Mapping[str, Any]]
) -> int:
    """Where the model's part of a rollout's messages begins: after the task's prompt, which
    may itself hold assistant turns (a few-shot conversation), found by role and content even
    when a harness put messages of its own before it; by role at the start when a harness
    reshaped the contents; else at the first assistant message."""

    def same(message: Mapping[str, Any], asked: Mapping[str, Any], content: bool) -> bool:
        return message.get("role") == asked.get("role") and (
            not content or message.get("content") == asked.get("content")
        )

    n = len(prompt)
    if n:
        for start in range(len(messages) - n + 1):
            window = messages[start : start + n]
            if all(same(m, q, True) for m, q in zip(window, prompt, strict=True)):
                return start + n
        if len(messages) >= n and all(
            same(m, q, False) for m, q in zip(messages[:n], prompt, strict=True)
        ):
            return n
    return next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))


def rollout_output(
    example_id: int,
    task: vf.Task[Any, Any, Any],
    trace: vf.Trace,
    rollout: _Rollout,
    max_turns: int | None = None,
    own: vf.TaskData | None = None,
) -> dict[str, Any]:
    """A finished rollout in the shape the plugin records (verifiers 0.3's rollout output).

    ``own``: the task a seat of an episode played (its trace's ``task.data``), which may not be
    the episode's (a game hands each seat a question of its own): its ``answer`` and ``info``
    are the record's, and its prompt when it has one (a modeled user's seat has none)."""
    data = own if own is not None else task.data
    messages = (
        [m.model_dump(mode="json", exclude_none=True) for m in trace.branches[-1].messages]
        if trace.branches
        else []
    )
    prompt = prompt_messages(data if data.prompt is not None else task.data)
    first_reply = prompt_length(messages, prompt)
    error: dict[str, str] | None = None
    if not trace.ok and trace.last_error is not None:
        error = {"error": trace.last_error.type, "message": trace.last_error.message}
    elif trace.stop_condition == TURN_CAP_STOP:
        error = turn_cap_error(trace, max_turns)
    metrics: dict[str, Any] = {
        name: reward.score for name, reward in trace.rewards.items() if reward is not None
    }
    metrics.update({name: value for name, value in trace.metrics.items() if value is not None})
    timing = trace.timing
    ends = [span.end for span in (timing.agent, timing.finalize, timing.scoring) if span.end]
    usage = trace.usage
    return {
        "example_id": example_id,
        "prompt": messages[:first_reply] or prompt,
        "completion": messages[first_reply:],
        "answer": getattr(data, "answer", None),
        "info": getattr(data, "info", None),
        "reward": trace.reward,
        "metrics": metrics,
        "error": error,
        "timing": {
            "generation": {"duration": timing.agent.duration},
            "scoring": {"duration": timing.scoring.duration},
            "total": max(ends) - timing.start if ends else 0.0,
        },
        "is_truncated": any(call.finish_reason == "length" for call in trace.calls),
        "stop_condition": trace.stop_condition,
        "token_usage": usage.model_dump(mode="json") if usage is not None else None,
        ROLLOUT_COLUMN: rollout.index,
        SLOT_WAIT_COLUMN: sum(rollout.waits),
    }


def _trace_result(trace: vf.Trace) -> dict[str, Any]:
    """A trace's outcome: its reward, metrics, stop condition and error type."""
    return {
        "reward": trace.reward,
        "metrics": {n: r.score for n, r in trace.rewards.items() if r is not None}
        | {n: v for n, v in trace.metrics.items() if v is not None},
        "stop_condition": trace.stop_condition,
        "error": trace.last_error.type if not trace.ok and trace.last_error is not None else None,
    }


def _mean_result(results: list[dict[str, Any]]) -> tuple[float, dict[str, float]]:
    """The mean reward of ``results`` and the mean of each metric over those that have it."""
    reward = statistics.fmean(float(r["reward"] or 0.0) for r in results)
    names = dict.fromkeys(name for r in results for name in r["metrics"])
    metrics = {
        name: statistics.fmean(float(r["metrics"][name]) for r in results if name in r["metrics"])
        for name in names
    }
    return reward, metrics


def _play_attempts(output: dict[str, Any], traces: list[vf.Trace]) -> None:
    """A seat the episode played several times (best-of-n's attempts, a solver fanned out):
    its record's reward and metrics are the means over its traces, as ``vf-eval`` averages
    every trace, and ``attempts`` holds each trace's outcome. One attempt that errored errors
    the record, as one seat errors its episode."""
    results = [_trace_result(t) for t in traces]
    output["attempts"] = results
    output["reward"], output["metrics"] = _mean_result(results)
    failed = next((t for t in traces if not t.ok and t.last_error is not None), None)
    if failed is not None and output["error"] is None and failed.last_error is not None:
        output["error"] = {"error": failed.last_error.type, "message": failed.last_error.message}


def _seat_result(traces: list[vf.Trace]) -> dict[str, Any]:
    """Another seat's outcome beside a record: its trace's, or over several attempts the mean
    reward and metrics, the first error and each attempt's outcome under ``attempts``."""
    results = [_trace_result(t) for t in traces]
    if len(results) == 1:
        return results[0]
    reward, metrics = _mean_result(results)
    return {
        "reward": reward,
        "metrics": metrics,
        "stop_condition": results[-1]["stop_condition"],
        "error": next((r["error"] for r in results if r["error"]), None),
        "attempts": results,
    }


def episode_outputs(
    example_id: int,
    task: vf.Task[Any, Any, Any],
    episode: Any,
    seats: Sequence[str],
    rollout: _Rollout,
    max_turns: int | None = None,
) -> list[dict[str, Any]]:
    """An episode of the environment's ``Env`` as one rollout record per seat: each seat's
    trace (``agent`` names the seat) and the task it played, with the other seats' results
    beside it under ``seats``. A seat the episode played several times is one record of the
    means over its plays, each play under ``attempts``.

    The seats of one episode are finished or errored together: an episode whose
    ``run()``/``finalize()`` raised, or one seat of which errored or never played, errors
    every seat's record, so a retried rollout replays the whole episode and the records of
    one rollout never mix two episodes (a game's payoffs belong together).
    """
    traces = list(episode.traces)
    outputs: list[dict[str, Any]] = []
    for seat in seats:
        named = [t for t in traces if t.agent is not None and t.agent.name == seat]
        # One seat takes the episode's traces whatever their names; of several, each seat
        # takes only the traces of its own name.
        if not named and len(seats) == 1:
            named = traces
        mine = named[-1] if named else None
        if mine is not None:
            output = rollout_output(example_id, task, mine, rollout, max_turns, mine.task.data)
        else:
            unplayed = vf.Trace(
                task=vf.TraceTask(type=type(task).__name__, data=task.data),
                agent=vf.AgentInfo(config=vf.AgentConfig(), name=seat),
            )
            output = rollout_output(example_id, task, unplayed, rollout, max_turns)
            output["error"] = {
                "error": "NoTrace",
                "message": f"the episode ran no agent in seat {seat!r}",
            }
        if len(named) > 1:
            _play_attempts(output, named)
        # The episode's own error says more than "no trace" when it failed before the seat
        # played (a task's setup, the Env's run()).
        if episode.errors and (output["error"] is None or mine is None):
            last = episode.errors[-1]
            output["error"] = {"error": last.type, "message": last.message}
        output["agent"] = seat
        others: dict[str, list[vf.Trace]] = {}
        for i, t in enumerate(traces):
            if not any(t is m for m in named):
                name = (t.agent.name if t.agent is not None else "") or str(i)
                others.setdefault(name, []).append(t)
        if others:
            output["seats"] = {name: _seat_result(played) for name, played in others.items()}
        outputs.append(output)
    failed = next((o for o in outputs if o["error"] is not None), None)
    if failed is not None:
        for output in outputs:
            if output["error"] is None:
                output["error"] = {
                    "error": "SeatError",
                    "message": f"seat {failed['agent']!r} of the same episode errored: "
                    f"{failed['error'].get('message') or failed['error'].get('error')}",
                }
    return outputs


async def run_examples(
    env: V1Environment,
    rows: Iterable[dict[str, Any]],
    *,
    endpoint: Endpoint,
    sampling_args: dict[str, Any],
    rollouts: int,
    max_concurrent_requests: int,
    request_timeout: float,
    max_retries: int,
    on_example: ExampleCallback,
    should_stop: Callable[[], str | None] = lambda: None,
    extra_headers: dict[str, str] | None = None,
    prefetch: int = 0,
    journal: AnswerJournal | None = None,
    rollout_indexes: Callable[[int], Sequence[int]] | None = None,
    max_turns: int | None = None,
    intake: Intake | None = None,
) -> None:
    """See :meth:`pytest_modal_eval.client.verifiers_adapter.VerifiersAPI.run_examples`."""
    api_key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    direct = open_direct_client(
        endpoint.base_url,
        api_key=api_key,
        headers={**dict(endpoint.headers), **(extra_headers or {})},
        request_timeout=request_timeout,
        max_retries=max_retries,
        max_connections=max(64, max_concurrent_requests * 2),
        max_in_flight=max_concurrent_requests,
        journal=journal,
        intake=intake,
    )
    client = PluginClient(direct)
    opened: list[DirectOpenAI] = []

    def seat_client(base_url: str, api_key: str | None, headers: dict[str, str]) -> PluginClient:
        """The client of an endpoint a seat pins: the run's settings, its own key."""
        seat_direct = open_direct_client(
            base_url,
            api_key=api_key,
            headers=headers,
            request_timeout=request_timeout,
            max_retries=max_retries,
            max_connections=max(64, max_concurrent_requests * 2),
            max_in_flight=max_concurrent_requests,
            journal=journal,
            intake=intake,
        )
        opened.append(seat_direct)
        return PluginClient(seat_direct, client.rollouts)

    agent_config = vf.AgentConfig(
        harness={"id": HARNESS_ID},
        runtime=vf.SubprocessConfig(),
        model=endpoint.model,
        # Never contacted: every request goes through ``client``. A key variable of our own
        # keeps verifiers from reading the Prime CLI's configuration for its default one.
        client=vf.EvalClientConfig(
            base_url=endpoint.base_url, api_key_var="PYTEST_MODAL_EVAL_NO_KEY"
        ),
        sampling=vf.SamplingConfig.model_validate(sampling_args),
        # Refuses the turn after max_turns; the rollout ends with stop_condition "max_turns".
        max_turns=max_turns,
    )
    slots = max(1, math.ceil(max_concurrent_requests / rollouts)) * (1 + prefetch)
    pending = iter(rows)

    try:
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(
                plugin_judge_clients(
                    judges(env.taskset), request_timeout=request_timeout, max_retries=max_retries
                )
            )
            stack.enter_context(_tool_servers_import_like_this_process(env))
            await stack.enter_async_context(run_client())
            shared = await stack.enter_async_context(_shared_tools(env))
            seats = SeatClients(agent_config.client, seat_client)
            interception = await stack.enter_async_context(
                PluginInterception(client, shared, seats)
            )
            if env.played is None:
                agent = vf.Agent(agent_config, interception=interception)
                stack.push_async_callback(agent.harness.aclose)
            else:
                await stack.enter_async_context(serving(env.played.env, interception, shared))
            context = ModelContext(
                model=endpoint.model,
                client=agent_config.client,
                sampling=agent_config.sampling,
            )

            async def run_one(
                example_id: int, task: Any, rollout: _Rollout
            ) -> list[dict[str, Any]]:
                minted_ids: list[str] = []

                def minted(trace: vf.Trace) -> None:
                    client.rollouts[trace.id] = rollout
                    minted_ids.append(trace.id)

                try:
                    if env.played is None:
                        trace = await agent.run(task, tools=shared, on_trace=minted)
                        return [rollout_output(example_id, task, trace, rollout, max_turns)]
                    episode = await env.played.env.run_episode(task, context, on_trace=minted)
                    return episode_outputs(example_id, task, episode, env.seats, rollout, max_turns)
                finally:
                    for trace_id in minted_ids:
                        client.rollouts.pop(trace_id, None)

            async def worker() -> None:
                for row in pending:
                    example_id = int(row["example_id"])
                    if intake is not None and not intake.take(example_id):
                        return
                    task = env.tasks[example_id]
                    indexes = rollout_indexes(example_id) if rollout_indexes else range(rollouts)
                    group = [_Rollout(example_id, i, []) for i in list(indexes)[:rollouts]]
                    episodes = await asyncio.gather(*(run_one(example_id, task, r) for r in group))
                    on_example(example_id, [output for seats in episodes for output in seats])
                    if intake is not None:
                        intake.finished(example_id)
                    reason = should_stop()
                    if reason is not None:
                        raise RunAborted(reason)

            await run_workers(worker, slots)
    finally:
        for seat_direct in opened:
            await seat_direct.close()
        await direct.close()


def _import_roots(classes: Iterable[type]) -> list[str]:
    """The ``sys.path`` entries the classes' top-level packages were imported from, but the
    interpreter's own (a process of the same interpreter searches those anyway)."""
    interpreter = interpreter_dirs()
    roots: list[str] = []
    for cls in classes:
        top = sys.modules.get(cls.__module__.split(".", 1)[0])
        origin = getattr(top, "__file__", None)
        if origin is None:
            continue
        # As imported (not resolved): a symlinked module's directory is the one on sys.path.
        where = Path(os.path.abspath(origin)).parent
        root = where.parent if Path(origin).name == "__init__.py" else where
        for entry in sys.path:
            if not entry or Path(os.path.abspath(entry)) != root:
                continue
            if not under(root.resolve(), interpreter) and entry not in roots:
                roots.append(entry if os.path.isabs(entry) else str(root))
            break
    return roots


@contextlib.contextmanager
def _tool_servers_import_like_this_process(env: V1Environment) -> Iterator[None]:
    """Tool servers are ``python -m <toolset module>`` processes started in a working
    directory of their own; directories this process imports the taskset from by
    ``sys.path`` alone (pytest's ``pythonpath``, the rootdir) reach them through
    ``PYTHONPATH`` while the run lasts."""
    tools = _toolsets(env.taskset)
    task_type = type(env.taskset).task_type()
    roots = _import_roots([type(env.taskset), task_type, *(type(t) for t in tools)])
    if not tools or not roots:
        yield
        return
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([*roots, *([previous] if previous else [])])
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


@contextlib.asynccontextmanager
async def _shared_tools(env: V1Environment) -> AsyncIterator[Mapping[str, SharedToolServer]]:
    """The taskset's shared tool servers, started once for the run, each a local process, as
    verifiers' own ``Env.shared_tools`` starts them; a server that does not start ends the run
    with what it said."""
    toolsets = type(env.taskset).toolsets(env.taskset.config)
    try:
        async with serve_shared(toolsets, harness_is_local=True) as shared:
            yield shared
            return
    except vf.ToolsetError as exc:
        raise RunAborted(
            f"environment {env.env_id!r}: a tool server did not start: {exc}"
        ) from None

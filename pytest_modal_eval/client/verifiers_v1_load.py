"""Loading a verifiers v1 (0.4.x) environment: the taskset an id names, its ``Env`` and seats,
checked for what cannot run here (:func:`load_environment`).

An environment id names a v1 *taskset*: an installed package (``owner/name@version`` ->
module ``name`` with ``-`` -> ``_``) exporting a ``vf.Taskset`` subclass in ``__all__``; its
``env_args`` are the taskset config's fields. ``lookup-qa`` is the plugin's own
(:mod:`pytest_modal_eval.envs.lookup_qa_v1`), as is ``file-qa``'s taskset
(:mod:`pytest_modal_eval.envs.file_qa_v1`) for ``vf-eval``.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import ValidationError
from verifiers.v1.envs.single_agent import SingleAgentEnv
from verifiers.v1.utils.loaders import taskset_config_type

from pytest_modal_eval.client import modal_sandbox, verifiers_v1_judges
from pytest_modal_eval.client.environment_errors import load_failure
from pytest_modal_eval.client.installed_envs import BUNDLED_V1, missing_v1, v1_module
from pytest_modal_eval.client.verifiers_v1_env import LoadedEnv, build_env, runtime_problem
from pytest_modal_eval.client.verifiers_v1_harness import HARNESS_ID
from pytest_modal_eval.client.verifiers_v1_judges import check_judges
from pytest_modal_eval.client.verifiers_v1_seats import check_player_endpoints, run_player
from pytest_modal_eval.client.verifiers_v1_seats import secret_variables as seat_secrets
from pytest_modal_eval.exceptions import EnvironmentLoadError

#: The module verifiers v1 imports for an id, and why an id cannot be loaded (not installed):
#: told without importing verifiers (see :mod:`.installed_envs`).
module_name = v1_module
missing_environment = missing_v1

#: Tasksets shipped with the plugin: env id -> (module, taskset class, its config class).
BUNDLED = {
    "file-qa": ("pytest_modal_eval.envs.file_qa_v1", "FileQATaskset", "FileQATasksetConfig"),
    "lookup-qa": ("pytest_modal_eval.envs.lookup_qa_v1", "LookupTaskset", "LookupTasksetConfig"),
}
assert tuple(BUNDLED) == BUNDLED_V1


#: Config fields the plugin fills itself (the env id, a bundled taskset's benchmark directory).
HIDDEN_CONFIG_FIELDS = ("id", "base_dir")


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


def toolsets(taskset: vf.Taskset[Any, Any]) -> list[Any]:
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
    for toolset in toolsets(taskset):
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

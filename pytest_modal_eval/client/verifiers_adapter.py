"""The one interface the plugin uses to talk to ``verifiers``, whichever API is installed.

verifiers changed its API between releases: 0.3.x has the *classic* API (an environment is a
module with ``load_environment(**env_args)`` returning e.g. a ``SingleTurnEnv``), 0.4.x only the
*v1* API (a taskset package exporting a ``Taskset``; rollouts run by an ``Agent`` whose harness
reaches the model through verifiers' interception server). The plugin supports both, and picks
the implementation from the installed verifiers' version:

- :mod:`pytest_modal_eval.client.verifiers_classic` for 0.3.x,
- :mod:`pytest_modal_eval.client.verifiers_v1` for 0.4.x.

Each implements :class:`VerifiersAPI`; the rest of the plugin calls only the functions below.
See docs/verifiers.md for what each API needs to run offline and what differs.

The bundled ``file-qa`` environment is run by a third implementation whatever verifiers is
installed, :mod:`pytest_modal_eval.client.native`, which imports no framework: its records are
those the installed verifiers gives (``tests/test_verifiers_native_parity.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, overload

from pytest_modal_eval.client.installed_envs import FILE_QA_ARGS, NATIVE

# Which verifiers is installed, and its API: read from its version, importing nothing.
from pytest_modal_eval.client.installed_envs import ApiName as ApiName
from pytest_modal_eval.client.installed_envs import api_for as api_for
from pytest_modal_eval.client.installed_envs import installed_api as installed_api
from pytest_modal_eval.client.installed_envs import installed_version as installed_version

if TYPE_CHECKING:
    from array import array

    from pytest_modal_eval.client.answer_journal import AnswerJournal
    from pytest_modal_eval.client.workers import Intake
    from pytest_modal_eval.serving.endpoint import Endpoint

#: Environments shipped with the plugin, resolved without a separate installation
#: (``lookup-qa`` with verifiers 0.4 only).
BUNDLED = ("file-qa", "lookup-qa")

ExampleCallback = Callable[[int, list[dict[str, Any]]], None]


class EvalRowsLike(Protocol):
    """The evaluation dataset as plain rows (``example_id``, ``prompt``, ``answer``, ``info``):
    a sequence whose slices are again such rows, read lazily."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> EvalRowsLike: ...

    def example_ids(self) -> array[int]: ...


class VerifiersAPI(Protocol):
    """What each implementation provides (module-level functions of the same names)."""

    def missing_environment(self, env_id: str) -> str | None:
        """Why ``env_id`` cannot be loaded here (not installed), or None; imports nothing."""

    def import_framework(self) -> None:
        """Import what loading an environment imports of the framework (seconds), so that it
        can be done ahead (beside a server's start-up); nothing for the plugin's own."""

    def load_environment(
        self,
        env_id: str,
        env_args: dict[str, Any],
        base_dir: Path,
        *,
        agent: dict[str, Any] | None = None,
        num_examples: int | None = None,
        max_turns: int | None = None,
    ) -> Any:
        """The environment, with errors (:class:`EnvironmentLoadError`) that say how to fix
        them. ``agent`` is the benchmark's agent section (harness, runtime, seat: v1 only);
        ``num_examples`` bounds an infinite taskset; ``max_turns`` caps each v1 seat's turns
        where the environment sets no limit."""

    def dataset_rows(self, env: Any, num_examples: int | None) -> EvalRowsLike:
        """The evaluation rows, ``example_id`` ascending from 0 as the dataset orders them."""

    def secret_variables(self, env: Any) -> list[str]:
        """Names of the environment variables the environment's judges and the seats that
        pin their own endpoint read credentials from (v1 ``api_key_var``,
        ``headers_from_env``): their values are redacted from outputs."""

    def check_judge_endpoints(self, env: Any, timeout: float) -> None:
        """Raise :class:`~pytest_modal_eval.exceptions.EndpointError` when a judge model the
        environment's benchmark configures (v1 ``task.judges``), or the model a seat pins at
        an endpoint of its own, cannot answer within ``timeout`` seconds; a classic
        environment's judge clients are its own."""

    async def run_examples(
        self,
        env: Any,
        rows: Iterable[dict[str, Any]],
        *,
        endpoint: Endpoint,
        sampling_args: dict[str, Any],
        rollouts: int,
        max_concurrent_requests: int,
        request_timeout: float,
        max_retries: int,
        on_example: ExampleCallback,
        should_stop: Callable[[], str | None] = ...,
        extra_headers: dict[str, str] | None = None,
        prefetch: int = 0,
        journal: AnswerJournal | None = None,
        rollout_indexes: Callable[[int], Sequence[int]] | None = None,
        max_turns: int | None = None,
        intake: Intake | None = None,
    ) -> None:
        """Run ``rollouts`` rollouts of each row, ``on_example(example_id, outputs)`` as each
        example finishes. Outputs are dicts in verifiers 0.3's rollout-output shape (see
        :func:`pytest_modal_eval.runs.record.rollout_record`) with the rollout index and slot
        wait in the :mod:`~pytest_modal_eval.client.rollout_seeds` state columns. At most
        ``max_concurrent_requests`` requests wait for an answer at once; rollout ``r`` asks with
        ``seed + r``; with a ``journal``, answers are recorded and replayed after a resume.
        ``max_turns`` caps a v1 rollout's model turns (a rollout stopped there is errored);
        the classic API's environments keep their own. An ``intake``
        (:class:`~pytest_modal_eval.client.workers.Intake`) is told of each example taken and
        recorded, and asked before each request: once it closes, no example starts and those
        that sent nothing are dropped."""


def runs_natively(
    env_id: str | None, env_args: Mapping[str, Any] | None, agent: Mapping[str, Any] | None
) -> bool:
    """Whether the plugin plays ``env_id`` with these settings itself (see :data:`NATIVE`)."""
    if env_id not in NATIVE or any((agent or {}).values()):
        return False
    return set(env_args or {}) <= set(FILE_QA_ARGS)


def implementation(
    env_id: str | None = None,
    env_args: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
) -> VerifiersAPI:
    """The implementation that loads ``env_id`` with ``env_args`` and ``agent``: the plugin's
    own where it runs them itself (:func:`runs_natively`), else the installed verifiers'."""
    module = implementation_module(env_id, env_args, agent)
    return cast(VerifiersAPI, importlib.import_module(module))


def implementation_module(
    env_id: str | None = None,
    env_args: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
) -> str:
    """The module :func:`implementation` imports (found without importing it)."""
    if runs_natively(env_id, env_args, agent):
        return "pytest_modal_eval.client.native"
    return {
        "classic": "pytest_modal_eval.client.verifiers_classic",
        "v1": "pytest_modal_eval.client.verifiers_v1",
    }[installed_api()]


def has_own_endpoints(
    env_id: str | None = None,
    env_args: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
) -> bool:
    """Whether the environment may bring endpoints of its own, which are checked before the
    model's server is asked for (:func:`check_judge_endpoints`): told without importing the
    framework, so never ruled out for an installed v1 environment (its config may pin judges
    or seats' servers). The classic API builds its judge clients itself (nothing is checked);
    a bundled taskset has them only where ``env_args`` plugs judges or an agent section names
    how it is played."""
    if runs_natively(env_id, env_args, agent) or installed_api() == "classic":
        return False
    if env_id not in BUNDLED or any((agent or {}).values()):
        return True
    task = (env_args or {}).get("task")
    return isinstance(task, Mapping) and bool(task.get("judges"))


#: Implementations (module names) whose framework this process has imported.
_FRAMEWORKS: set[str] = set()


def framework_imported(
    env_id: str | None = None,
    env_args: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
) -> bool:
    """Whether loading ``env_id`` here imports no framework: the plugin plays it itself, or
    :func:`import_framework` has imported it."""
    if runs_natively(env_id, env_args, agent):
        return True
    return implementation_module(env_id, env_args, agent) in _FRAMEWORKS


def import_framework(
    env_id: str | None = None,
    env_args: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
) -> None:
    """Import the implementation for ``env_id`` and the framework it loads environments with."""
    implementation(env_id, env_args, agent).import_framework()
    _FRAMEWORKS.add(implementation_module(env_id, env_args, agent))


def _of(env: Any) -> VerifiersAPI:
    """The implementation that loaded ``env``."""
    from pytest_modal_eval.client import native

    if isinstance(env, native.NativeEnvironment):
        return cast(VerifiersAPI, native)
    return implementation()


def missing_environment(env_id: str) -> str | None:
    """Why ``env_id`` cannot be loaded here (not installed), or None. Cheap: it imports neither
    verifiers nor the environment (:mod:`.installed_envs`), so ``--collect-only`` may ask it of
    every benchmark."""
    from pytest_modal_eval.client import installed_envs

    if env_id in NATIVE:
        return None
    if installed_api() == "classic":
        return installed_envs.missing_classic(env_id)
    return installed_envs.missing_v1(env_id)


def load_environment(env_id: str, env_args: dict[str, Any], base_dir: Path, **options: Any) -> Any:
    """The environment (see :meth:`VerifiersAPI.load_environment`); imports verifiers only
    for an environment the plugin does not run itself."""
    chosen = implementation(env_id, env_args, options.get("agent"))
    return chosen.load_environment(env_id, env_args, base_dir, **options)


def played(env: Any, model: str | None = None) -> dict[str, Any] | None:
    """How the environment is played (its Env, each seat's harness, runtime and model and
    where they came from; ``model`` is the benchmark's), for ``metadata.json``; None for the
    classic API."""
    if installed_api() != "v1" or not hasattr(env, "metadata"):
        return None
    return cast("dict[str, Any]", env.metadata(model))


def seats(env: Any) -> tuple[list[str], str | None]:
    """The seats that each have a record of their own per rollout, in the environment's order,
    and the one ``agent.seat`` names (None: not named); ``([], None)`` for an environment with
    one seat, whose one record per rollout is keyed by the rollout alone."""
    if installed_api() != "v1" or len(getattr(env, "seats", ())) < 2:
        return [], None
    return list(env.seats), env.scored_seat


def dataset_rows(env: Any, num_examples: int | None) -> EvalRowsLike:
    return _of(env).dataset_rows(env, num_examples)


def secret_variables(env: Any) -> list[str]:
    return _of(env).secret_variables(env)


def check_judge_endpoints(env: Any, timeout: float) -> None:
    _of(env).check_judge_endpoints(env, timeout)


async def run_examples(env: Any, rows: Iterable[dict[str, Any]], **options: Any) -> None:
    """See :meth:`VerifiersAPI.run_examples`."""
    await _of(env).run_examples(env, rows, **options)

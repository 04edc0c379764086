"""verifiers' classic API (0.3.x): the implementation :mod:`.verifiers_adapter` picks there.

What the rest of the plugin sees (through the adapter): :func:`load_environment`,
:func:`dataset_rows`, and :func:`run_examples`, which runs groups of rollouts with a bound on
*requests* in flight and hands each finished example to a callback as soon as it completes
(nothing is accumulated here).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
from array import array
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from pytest_modal_eval.client.answer_journal import AnswerJournal, current_example
from pytest_modal_eval.client.environment_errors import environment_frame, load_failure
from pytest_modal_eval.client.installed_envs import (
    BUNDLED_CLASSIC,
    classic_module,
    missing_classic,
)
from pytest_modal_eval.client.rollout_seeds import (
    ROLLOUT_COLUMN,
    SLOT_WAIT_COLUMN,
    GroupRollouts,
    current_group,
)
from pytest_modal_eval.client.workers import Intake, run_workers
from pytest_modal_eval.exceptions import EnvironmentLoadError, RunAborted
from pytest_modal_eval.serving.endpoint import Endpoint

#: Environments shipped with the plugin, resolved without a separate installation.
BUNDLED = {"file-qa": "pytest_modal_eval.envs.file_qa"}
assert tuple(BUNDLED) == BUNDLED_CLASSIC

#: The module the classic API imports for an id, and why an id cannot be loaded (not
#: installed): told without importing verifiers (see :mod:`.installed_envs`).
module_name = classic_module
missing_environment = missing_classic


def import_framework() -> None:
    """Import verifiers' classic API, as loading an environment does (``import verifiers``
    alone imports almost nothing: the classic modules load when one is first touched)."""
    import verifiers as vf

    vf.Environment  # noqa: B018 (touched to be loaded)


def load_environment(
    env_id: str,
    env_args: dict[str, Any],
    base_dir: Path,
    *,
    agent: dict[str, Any] | None = None,
    num_examples: int | None = None,
    max_turns: int | None = None,
) -> Any:
    """Load a verifiers environment by id, with errors that say how to fix them.
    ``num_examples`` and ``max_turns`` are the runner's business here (a classic environment
    keeps its own turn limits)."""
    import verifiers as vf

    if agent:
        raise EnvironmentLoadError(
            f"environment {env_id!r}: the benchmark's agent section ({', '.join(agent)}) "
            "chooses how a verifiers 0.4 environment is played; the installed verifiers "
            f"{vf.__version__} has the classic API, whose environments play themselves: remove "
            "it, or install verifiers>=0.4,<0.5"
        )

    _quiet_datasets()
    args = dict(env_args)
    if env_id in BUNDLED:
        # Our own environment resolves data paths against the benchmark's directory.
        args.setdefault("base_dir", str(base_dir))
        module = importlib.import_module(BUNDLED[env_id])
        env = _call_loader(env_id, module.load_environment, args)
    else:
        problem = missing_environment(env_id)
        if problem:
            raise EnvironmentLoadError(problem)
        env = _call_loader(env_id, lambda **kw: vf.load_environment(env_id, **kw), args)
    pin_signatures(env)
    return env


def pin_signatures(env: Any) -> None:
    """Give the functions verifiers introspects on every rollout their signature, once.

    For each rollout verifiers calls ``inspect.signature`` on every stop condition, cleanup
    handler and reward function (about ten times for a single-turn rollout: ~15 % of the CPU a
    request costs). ``inspect.signature`` returns a function's ``__signature__`` when it has one
    (PEP 362), so setting it to the signature inspect derives gives the same answer without the
    work. Functions that already have one, or that take no attributes, are left alone; an
    environment without these attributes (another verifiers version) is left as it is.
    """
    functions = [*getattr(env, "_stop_conditions", ()), *getattr(env, "_cleanup_handlers", ())]
    rubrics = [getattr(env, "rubric", None)]
    while rubrics:
        rubric = rubrics.pop()
        functions.extend(getattr(rubric, "funcs", ()))
        rubrics.extend(getattr(rubric, "rubrics", ()))
    for function in functions:
        target = getattr(function, "__func__", function)  # a bound method's function
        if getattr(target, "__signature__", None) is not None:
            continue
        try:
            target.__signature__ = inspect.signature(target)
        except (AttributeError, TypeError, ValueError):  # builtins, C callables, no signature
            continue


def _call_loader(env_id: str, loader: Callable[..., Any], args: dict[str, Any]) -> Any:
    try:
        return loader(**args)
    except Exception as exc:
        raise _load_error(env_id, exc) from None


def _load_error(env_id: str, exc: Exception) -> EnvironmentLoadError:
    """``exc`` from loading ``env_id`` as a message naming its cause and the fix."""
    module = module_name(env_id)
    if env_id in BUNDLED and isinstance(exc, ValueError):  # FileQAError: file, line, field
        return EnvironmentLoadError(str(exc))
    # verifiers' loader re-raises what the environment raised as a ValueError (failed import)
    # or RuntimeError (anything else), with the original as the cause.
    cause = exc.__cause__ if isinstance(exc, ValueError | RuntimeError) else None
    original = cause if isinstance(cause, Exception) else exc
    if isinstance(original, AttributeError) and "does not expose load_environment" in str(original):
        return EnvironmentLoadError(
            f"environment {env_id!r}: module {module!r} has no load_environment(), the classic "
            f"API's entry point (verifiers {_version()} is installed). If it is a verifiers v1 "
            "taskset, it needs verifiers 0.4: `uv pip install 'verifiers>=0.4,<0.5'`"
        )
    if isinstance(original, TypeError) and environment_frame(original, module) is None:
        return EnvironmentLoadError(
            f"environment {env_id!r} rejected env_args: {original}{_arguments_taken(env_id)}"
        )
    return load_failure(env_id, "loading it", original, module)


def _arguments_taken(env_id: str) -> str:
    """``; the env_args it takes: path, seed``: the keyword arguments of the environment's
    ``load_environment()`` (the fix for a rejected one); nothing when it takes any
    (``**kwargs``) or its signature cannot be read."""
    try:
        module = importlib.import_module(BUNDLED.get(env_id, module_name(env_id)))
        parameters = list(inspect.signature(module.load_environment).parameters.values())
    except Exception:  # the message is complete without it
        return ""
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return ""
    names = [
        p.name
        for p in parameters
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        # a bundled environment's base_dir is the benchmark's directory, given by the plugin
        and not (env_id in BUNDLED and p.name == "base_dir")
    ]
    return f"; the env_args it takes: {', '.join(names) or 'none'}"


def _version() -> str:
    from importlib.metadata import version

    return version("verifiers")


def dataset_rows(env: Any, num_examples: int | None) -> EvalRows:
    """The evaluation dataset as plain rows (``example_id``, ``prompt``, ``answer``, ...)."""
    dataset = env.get_eval_dataset()
    if dataset is None:
        raise EnvironmentLoadError("the environment has no evaluation dataset")
    if num_examples is not None:
        dataset = dataset.select(range(min(num_examples, len(dataset))))
    return EvalRows(dataset)


class EvalRows(Sequence[dict[str, Any]]):
    """A dataset's rows as plain dicts, decoded a batch at a time, never all at once.

    Rows are exactly what ``Dataset.to_list()`` gives (that is how each batch is decoded), but
    a 100,000-example dataset never becomes 100,000 dicts held for the whole run (~700
    bytes each). Slicing gives another lazy view; :meth:`example_ids` reads one column only.
    """

    batch_size = 1000

    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset

    def __len__(self) -> int:
        return len(self._dataset)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> EvalRows: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | EvalRows:
        if isinstance(index, slice):
            return EvalRows(self._dataset.select(range(len(self))[index]))
        row: dict[str, Any] = self._dataset.select([range(len(self))[index]]).to_list()[0]
        return row

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for start in range(0, len(self), self.batch_size):
            stop = min(start + self.batch_size, len(self))
            yield from self._dataset.select(range(start, stop)).to_list()

    def example_ids(self) -> array[int]:
        """Every row's ``example_id``, in order (8 bytes each, not a list of int objects)."""
        return array("q", self._dataset.with_format("arrow")["example_id"].to_pylist())


ExampleCallback = Callable[[int, list[dict[str, Any]]], None]

#: State columns each rollout's output carries (see :mod:`.seeded_client`): its rollout index,
#: and the seconds its requests waited for a free request slot (``eval.prefetch``).


def secret_variables(env: Any) -> list[str]:
    """A classic environment's judge clients are its own: it names no key variables."""
    return []


def check_judge_endpoints(env: Any, timeout: float) -> None:
    """Nothing to check: a classic environment builds its judge clients itself."""


async def run_examples(
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
    should_stop: Callable[[], str | None] = lambda: None,
    extra_headers: dict[str, str] | None = None,
    prefetch: int = 0,
    journal: AnswerJournal | None = None,
    rollout_indexes: Callable[[int], Sequence[int]] | None = None,
    max_turns: int | None = None,
    intake: Intake | None = None,
) -> None:
    """Run ``rollouts`` rollouts of each row; call ``on_example`` as each example finishes.

    At most ``max_concurrent_requests`` requests wait for an answer at once. verifiers' own
    ``max_concurrent`` counts groups, not requests; here a group holds ``rollouts`` requests, so
    ceil(limit / rollouts) groups are in flight, and ``prefetch`` times as many more are started
    ahead: they wait with their request ready, so it goes out the moment an answer frees a
    slot instead of after that answer is scored (the server otherwise idles while the client
    scores a batch of answers that finished together). With a ``journal``, answers that arrived
    for unfinished examples are recorded and replayed after a resume, so starting examples
    ahead does not add requests sent twice. Rows are pulled lazily so memory stays flat however
    large the dataset. ``should_stop`` is polled after each example; a non-None return cancels
    the rest (e.g. the endpoint is down) and is raised as :class:`RunAborted`. Rollout ``r`` of
    an example samples with ``seed + r`` (see :mod:`pytest_modal_eval.client.rollout_seeds`); which
    ``r`` an example still needs is ``rollout_indexes(example_id)``, else ``range(rollouts)``.
    ``max_turns`` is not used: a classic environment's turns are its own (``MultiTurnEnv``'s
    ``max_turns``). With an ``intake``, examples it drops are not run and no example starts
    once it is closed (:class:`~pytest_modal_eval.client.workers.Intake`).
    """
    client = chat_client(
        endpoint,
        request_timeout=request_timeout,
        max_retries=max_retries,
        max_connections=max(64, max_concurrent_requests * 2),
        max_in_flight=max_concurrent_requests,
        extra_headers=extra_headers,
        journal=journal,
        intake=intake,
    )
    slots = max(1, math.ceil(max_concurrent_requests / rollouts)) * (1 + prefetch)
    pending = iter(rows)
    parse = answer_parser(env)

    async def worker() -> None:
        # Each worker pulls the next row when it is free: rows are read lazily, in order, and
        # finishing an example costs O(1), not a scan of everything in flight.
        for row in pending:
            example_id = int(row["example_id"])
            if intake is not None and not intake.take(example_id):
                return
            # Read by the client in this task and the rollout tasks verifiers starts from it.
            current_example.set(example_id)  # the journal's key
            indexes = rollout_indexes(example_id) if rollout_indexes else range(rollouts)
            current_group.set(GroupRollouts(indexes))
            outputs = await env.run_group(
                [dict(row) for _ in range(rollouts)],
                client,
                endpoint.model,
                sampling_args,
                state_columns=[ROLLOUT_COLUMN, SLOT_WAIT_COLUMN],
            )
            finished = [dict(output) for output in outputs]
            if parse is not None:
                for output in finished:
                    output["parsed_answer"] = parse(output.get("completion"))
            on_example(example_id, finished)
            if intake is not None:
                intake.finished(example_id)
            reason = should_stop()
            if reason is not None:
                raise RunAborted(reason)

    try:
        await run_workers(worker, slots)
    finally:
        await _close(client)


def answer_parser(env: Any) -> Callable[[Any], str | None] | None:
    """The environment's own parser's ``parse_answer`` (what its rubric compares with the
    answer), made safe: a parser that raises reads as no answer. None for verifiers' base
    ``Parser``, whose "answer" is the whole last message (no parse of its own), and for an
    environment without a parser."""
    import verifiers as vf

    parser = getattr(env, "parser", None)
    if parser is None or type(parser) is vf.Parser:
        return None

    def parse(completion: Any) -> str | None:
        try:
            answer = parser.parse_answer(completion)
        except Exception:  # the environment's code: a failure is no parsed answer, not an error
            return None
        return None if answer is None else str(answer)

    return parse


def chat_client(
    endpoint: Endpoint,
    *,
    request_timeout: float,
    max_retries: int,
    max_connections: int,
    extra_headers: dict[str, str] | None = None,
    max_in_flight: int | None = None,
    journal: AnswerJournal | None = None,
    intake: Intake | None = None,
) -> Any:
    """verifiers' chat-completions client, its requests sent by :class:`DirectOpenAI`.

    The ``AsyncOpenAI`` built here (on openai's aiohttp transport: httpx's connection pool
    scans every connection for every request, which capped a run at ~90 requests/s) holds the
    key, headers, retries and timeouts; :class:`DirectOpenAI` sends verifiers' per-rollout
    request with exactly those and passes every other call to it. Key and headers are resolved
    exactly as verifiers resolves them.
    """
    from verifiers.types import ClientConfig
    from verifiers.utils.client_utils import _build_headers_and_api_key

    from pytest_modal_eval.client.direct_client import open_direct_client
    from pytest_modal_eval.client.seeded_client import SeededChatClient

    config = ClientConfig(
        api_base_url=endpoint.base_url,
        api_key_var=endpoint.api_key_env or "PYTEST_MODAL_EVAL_NO_KEY",
        extra_headers={**dict(endpoint.headers), **(extra_headers or {})},
    )
    headers, api_key = _build_headers_and_api_key(config)
    return SeededChatClient(
        open_direct_client(
            endpoint.base_url,
            api_key=api_key,
            headers=headers,
            request_timeout=request_timeout,
            max_retries=max_retries,
            max_connections=max_connections,
            max_in_flight=max_in_flight,
            journal=journal,
            intake=intake,
        )
    )


async def _close(client: Any) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        result = close()
        if isinstance(result, Awaitable):
            await result


def _quiet_datasets() -> None:
    # datasets prints a progress bar for every map(); it would interleave with pytest's output.
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()

"""verifiers_classic.pin_signatures: the same signatures, the same scores, less work per rollout."""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any

import verifiers as vf
from datasets import Dataset

from pytest_modal_eval.client import verifiers_classic
from pytest_modal_eval.serving.endpoint import Endpoint
from tests.conftest import FakeServer, arithmetic_rows


def make_env() -> Any:
    """A verifiers environment whose reward functions take every shape verifiers inspects:
    named arguments only, ``**kwargs``, a bound method, and a group function (plural names)."""
    parser = vf.Parser(extract_fn=vf.extract_boxed_answer)

    def correct(completion: Any, answer: str) -> float:
        return 1.0 if parser.parse_answer(completion) == answer else 0.0

    def length(completion: Any, **kwargs: Any) -> float:
        return float(len(str(completion[-1]["content"])))

    class Scorer:
        def __init__(self, bonus: float) -> None:
            self.bonus = bonus

        def bonus_if_short(self, completion: Any, answer: str, state: Any) -> float:
            return self.bonus if len(str(completion[-1]["content"])) < 40 else 0.0

    def group_share(completions: list[Any], answers: list[str]) -> list[float]:
        return [1.0 / len(completions)] * len(completions)

    rows = [
        {"question": r["question"], "answer": r["answer"], "example_id": i}
        for i, r in enumerate(arithmetic_rows(6))
    ]
    rubric = vf.RubricGroup(
        [
            vf.Rubric(
                funcs=[correct, length, Scorer(0.5).bonus_if_short],
                weights=[1.0, 0.0, 0.0],
                parser=parser,
            ),
            vf.Rubric(funcs=[group_share], weights=[0.0]),
        ]
    )
    return vf.SingleTurnEnv(
        eval_dataset=Dataset.from_list(rows),
        system_prompt="Put the final answer in \\boxed{}.",
        parser=parser,
        rubric=rubric,
    )


def introspected(env: Any) -> list[Any]:
    # verifiers adds a monitor rubric (num_turns) to the group: its function is inspected too.
    funcs = [*env._stop_conditions, *env._cleanup_handlers]
    for rubric in env.rubric.rubrics:
        funcs.extend(rubric.funcs)
    return funcs


def scores(env: Any, server: FakeServer, rollouts: int = 2) -> dict[int, list[Any]]:
    results: dict[int, list[Any]] = {}

    def keep(example_id: int, outputs: list[dict[str, Any]]) -> None:
        results[example_id] = [
            (o["reward"], o["metrics"], o.get("error"), o["completion"]) for o in outputs
        ]

    asyncio.run(
        verifiers_classic.run_examples(
            env,
            verifiers_classic.dataset_rows(env, None),
            endpoint=Endpoint(f"{server.url}/v1", "test-model"),
            sampling_args={"temperature": 0.0, "max_tokens": 32},
            rollouts=rollouts,
            max_concurrent_requests=4,
            request_timeout=30,
            max_retries=0,
            on_example=keep,
        )
    )
    return results


def test_pinned_signatures_are_the_ones_inspect_derives() -> None:
    env = make_env()
    before = [inspect.signature(f) for f in introspected(env)]
    assert len(before) >= 7  # stop conditions, cleanup handlers, five reward functions

    verifiers_classic.pin_signatures(env)

    for function, signature in zip(introspected(env), before, strict=True):
        target = getattr(function, "__func__", function)
        assert "__signature__" in vars(target), function
        assert inspect.signature(function) == signature
    group, single = env.rubric.rubrics[1].funcs[0], env.rubric.rubrics[0].funcs[0]
    assert env.rubric.rubrics[1]._is_group_func(group)
    assert not env.rubric.rubrics[0]._is_group_func(single)


def test_a_pinned_environment_scores_exactly_as_before(fake_server: FakeServer) -> None:
    fake_server.configure(accuracy=0.5)  # some right, some wrong: rewards that differ
    plain = scores(make_env(), fake_server)
    env = make_env()
    verifiers_classic.pin_signatures(env)
    pinned = scores(env, fake_server)

    assert pinned == plain
    rewards = {reward for outputs in plain.values() for reward, *_ in outputs}
    assert rewards == {0.0, 1.0}
    metrics = next(iter(plain.values()))[0][1]
    assert set(metrics) == {"correct", "length", "bonus_if_short", "group_share", "num_turns"}
    assert metrics["group_share"] == 0.5  # seen as a group function: 1 / 2 rollouts


def test_other_callables_and_other_objects() -> None:
    def base(a: int, b: int = 2, **kwargs: Any) -> int:
        return a + b

    class Call:
        def __call__(self, x: int, *, y: str = "") -> str:
            return y * x

    partial, call = functools.partial(base, b=5), Call()
    expected = [inspect.signature(partial), inspect.signature(call), inspect.signature(len)]
    env = type("Env", (), {"_stop_conditions": [partial, call, len], "rubric": None})()

    verifiers_classic.pin_signatures(env)

    assert [inspect.signature(f) for f in (partial, call, len)] == expected
    verifiers_classic.pin_signatures(object())  # not an environment of this verifiers: left alone

"""The verifiers adapter: which implementation is picked, and the v1 (0.4.x) implementation run
against the real test server on 127.0.0.1 (these run when verifiers 0.4 is installed:
`uv run --with verifiers==0.4.0 pytest tests/test_verifiers_adapter.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_modal_eval.client.verifiers_adapter import api_for, installed_api
from pytest_modal_eval.exceptions import EnvironmentLoadError
from tests.conftest import BenchmarkProject, FakeServer, classic_only
from tests.support.v1_runs import run_v1

v1_only = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")


@pytest.mark.parametrize(
    ("version", "api"),
    [("0.3.1", "classic"), ("0.3.2.dev1", "classic"), ("0.4.0", "v1"), ("0.4.1rc2", "v1")],
)
def test_api_follows_the_installed_version(version: str, api: str) -> None:
    assert api_for(version) == api


def test_a_newer_verifiers_is_refused_with_the_supported_range() -> None:
    with pytest.raises(EnvironmentLoadError, match=r"verifiers>=0.3.1,<0.5"):
        api_for("0.5.0")


JUDGE = {"id": "reference", "base_url": "http://127.0.0.1:9/v1", "model": "m"}


@pytest.mark.parametrize(
    ("env_id", "env_args", "agent", "under_v1"),
    [
        ("file-qa", {"path": "x.jsonl"}, {}, False),  # played natively: never
        ("lookup-qa", {"path": "x.jsonl"}, {}, False),
        ("lookup-qa", {"path": "x.jsonl", "task": {"judges": [JUDGE]}}, {}, True),
        ("lookup-qa", {"path": "x.jsonl"}, {"runtime": "subprocess"}, True),
        ("someones-env", {}, {}, True),  # its config may pin judges: unknown before import
    ],
)
def test_which_environments_may_have_endpoints_to_check_before_the_server(
    env_id: str, env_args: dict[str, object], agent: dict[str, object], under_v1: bool
) -> None:
    """What decides whether a first run may ask for its server before loading (and checking)
    its environment: only an environment with no judge or seat endpoint of its own may."""
    from pytest_modal_eval.client.verifiers_adapter import has_own_endpoints

    expected = under_v1 and installed_api() == "v1"
    assert has_own_endpoints(env_id, env_args, agent) is expected


@classic_only()
def test_the_classic_api_refuses_an_agent_section(tmp_path: Path) -> None:
    """Harness, runtime and seat choose how a verifiers 0.4 environment is played; a classic
    environment plays itself, so the section is refused rather than ignored."""
    from pytest_modal_eval.client import verifiers_classic

    with pytest.raises(EnvironmentLoadError) as refused:
        verifiers_classic.load_environment(
            "file-qa", {"path": "x.jsonl"}, tmp_path, agent={"harness": "null"}
        )
    assert str(refused.value) == (
        "environment 'file-qa': the benchmark's agent section (harness) chooses how a "
        "verifiers 0.4 environment is played; the installed verifiers 0.3.1 has the classic "
        "API, whose environments play themselves: remove it, or install verifiers>=0.4,<0.5"
    )


@classic_only()
def test_lookup_qa_under_the_classic_api_names_the_verifiers_it_needs() -> None:
    from pytest_modal_eval.client.verifiers_adapter import missing_environment

    problem = missing_environment("lookup-qa")
    assert problem is not None
    assert "'lookup-qa' is bundled for verifiers' v1 API (0.4.x) only" in problem
    assert "verifiers 0.3.1 (classic API) is installed" in problem


#: Classic environment modules whose loading fails (module -> source, the error expected).
BROKEN_CLASSIC = {
    "v1_style": (
        "import verifiers.v1 as vf\n\n\n"
        "class StyleTaskset(vf.Taskset[vf.Task[vf.TaskData], vf.TasksetConfig]):\n"
        "    def load(self):\n"
        "        yield vf.Task(vf.TaskData(prompt='hi'))\n\n\n"
        "__all__ = ['StyleTaskset']\n",
        r"^environment 'v1-style': module 'v1_style' has no load_environment\(\), the classic "
        r"API's entry point \(verifiers 0\.3\.1 is installed\)\. If it is a verifiers v1 "
        r"taskset, it needs verifiers 0\.4: `uv pip install 'verifiers>=0\.4,<0\.5'`$",
    ),
    "loader_raises": (
        "import os\n\n\ndef load_environment(**kwargs):\n"
        "    return os.environ['PYTEST_MODAL_EVAL_UNSET_TOKEN']\n",
        r"^environment 'loader-raises': loading it raised KeyError: "
        r"'PYTEST_MODAL_EVAL_UNSET_TOKEN' \(at \S*loader_raises\.py:5\)$",
    ),
    "no_such_arg": (
        "def load_environment(path, *, seed=0):\n    raise AssertionError('not called')\n",
        r"^environment 'no-such-arg' rejected env_args: .*unexpected keyword argument 'pth'; "
        r"the env_args it takes: path, seed$",
    ),
    "needs_dep": (
        "import not_a_real_package_xyz\n\n\ndef load_environment():\n    pass\n",
        r"^environment 'needs-dep': loading it failed: no module named "
        r"'not_a_real_package_xyz' \(imported at \S*needs_dep\.py:1\); install the package",
    ),
}


@classic_only()
@pytest.mark.parametrize("module", sorted(BROKEN_CLASSIC))
def test_classic_load_errors_name_the_cause_and_the_fix(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_modal_eval.client import verifiers_classic

    source, message = BROKEN_CLASSIC[module]
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = {"pth": "x"} if module == "no_such_arg" else {}
    with pytest.raises(EnvironmentLoadError, match=message):
        verifiers_classic.load_environment(module.replace("_", "-"), args, tmp_path)


#: A classic environment with a parser of its own: its last word is the answer.
LAST_WORD_QA = """
import verifiers as vf

from pytest_modal_eval.envs.file_qa import load_environment as file_qa


class LastWord(vf.Parser):
    def parse(self, text):
        if "13" in text:
            raise ValueError("a parser that fails reads as no answer")
        return text.split()[-1]


def load_environment(path):
    env = file_qa(path)
    parser = LastWord()

    def exact(completion, answer, **_):
        return 1.0 if parser.parse_answer(completion) == answer else 0.0

    rubric = vf.Rubric(funcs=[exact], weights=[1.0], parser=parser)
    return vf.SingleTurnEnv(eval_dataset=env.eval_dataset, rubric=rubric, parser=parser)
"""


@classic_only()
def test_a_classic_environments_parser_gives_each_record_its_parsed_answer(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=3, gate="gate: {min_avg_reward: 0.0}")
    project.play_with("alpha", "last-word-qa", "last_word_qa", LAST_WORD_QA)
    project.run().assert_outcomes(passed=1)
    [run] = project.run_dirs("alpha")
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    # The server answers "The answer is \\boxed{N}."; "What is 10 + 3?" makes the parser fail.
    assert [r["parsed_answer"] for r in records] == [None, "\\boxed{15}.", "\\boxed{17}."]


def write_qa(path: Path, n: int) -> Path:
    rows = [{"question": f"What is {i} + 3?", "answer": str(i + 3), "n": i} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@v1_only
def test_v1_file_qa_rows_and_errors(tmp_path: Path) -> None:
    from pytest_modal_eval.client import verifiers_v1

    write_qa(tmp_path / "qa.jsonl", 3)
    env = verifiers_v1.load_environment(
        "file-qa", {"path": "qa.jsonl", "system_prompt": "Be brief."}, tmp_path
    )
    rows = verifiers_v1.dataset_rows(env, None)
    assert list(rows.example_ids()) == [0, 1, 2]
    assert rows[1] == {
        "example_id": 1,
        "prompt": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 1 + 3?"},
        ],
        "answer": "4",
        "info": {"n": 1},
    }
    assert [r["example_id"] for r in rows[1:]] == [1, 2]
    with pytest.raises(EnvironmentLoadError, match=r"env_args.path: Field required"):
        verifiers_v1.load_environment("file-qa", {}, tmp_path)
    with pytest.raises(EnvironmentLoadError, match=r"missing.qa.jsonl does not exist"):
        verifiers_v1.load_environment("file-qa", {"path": "missing.qa.jsonl"}, tmp_path)
    problem = verifiers_v1.missing_environment("someone/no-such-taskset@1.0")
    assert problem is not None and "`no_such_taskset`" in problem


@v1_only
def test_v1_rollouts_are_seeded_and_scored(tmp_path: Path, fake_server: FakeServer) -> None:
    """Each rollout asks with seed + its index, through the plugin's client, and comes back in
    the shape the plugin records."""
    from pytest_modal_eval.client import verifiers_v1

    write_qa(tmp_path / "qa.jsonl", 4)
    fake_server.configure(delay=0.05, right_when_seed_even=True)
    env = verifiers_v1.load_environment("file-qa", {"path": "qa.jsonl"}, tmp_path)
    finished = run_v1(
        env,
        fake_server.base_url,
        sampling_args={"temperature": 0.7, "seed": 10},
        rollouts=3,
        max_concurrent_requests=2,
    )
    stats = fake_server.stats()
    assert sorted(finished) == [0, 1, 2, 3]
    for seeds in stats["seeds_by_question"].values():
        assert sorted(seeds) == [10, 11, 12]
    for outputs in finished.values():
        assert sorted(o["pytest_modal_eval_rollout"] for o in outputs) == [0, 1, 2]
        for output in outputs:
            # right exactly when the seed (10 + rollout) is even
            assert output["reward"] == (1.0 if output["pytest_modal_eval_rollout"] != 1 else 0.0)
            assert output["error"] is None
            assert output["completion"][0]["role"] == "assistant"
            assert output["metrics"] == {"correct": output["reward"]}
            assert output["timing"]["generation"]["duration"] > 0


@v1_only
def test_v1_unreachable_endpoint_is_a_recorded_provider_error(tmp_path: Path) -> None:
    from pytest_modal_eval.client import verifiers_v1

    write_qa(tmp_path / "qa.jsonl", 1)
    env = verifiers_v1.load_environment("file-qa", {"path": "qa.jsonl"}, tmp_path)
    finished = run_v1(env, "http://127.0.0.1:9/v1", request_timeout=5)
    (output,) = finished[0]
    assert output["error"]["error"] == "ProviderError"
    assert output["reward"] == 0.0


FEW_SHOT = """
import verifiers.v1 as vf


class FewShotData(vf.TaskData):
    answer: str = ""


class FewShotTask(vf.Task[FewShotData]):
    @vf.reward
    async def correct(self, trace):
        return 1.0 if self.data.answer in trace.last_reply else 0.0


class FewShotTaskset(vf.Taskset[FewShotTask, vf.TasksetConfig]):
    def load(self):
        yield FewShotTask(
            FewShotData(
                system_prompt="Box the answer.",
                prompt=[
                    {"role": "user", "content": "What is 1 + 1?"},
                    {"role": "assistant", "content": "The answer is \\\\boxed{2}."},
                    {"role": "user", "content": "What is 2 + 3?"},
                ],
                answer="5",
            )
        )


__all__ = ["FewShotTaskset"]
"""


@v1_only
def test_v1_a_few_shot_prompt_is_recorded_as_the_prompt(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt holding assistant turns (a few-shot conversation) is the prompt; the completion
    is only what the model said."""
    from pytest_modal_eval.client import verifiers_v1

    (tmp_path / "few_shot.py").write_text(FEW_SHOT)
    monkeypatch.syspath_prepend(str(tmp_path))
    # The plugin's in-process harness sends the task's messages as they are (verifiers'
    # default bash harness puts its own instructions before the system prompt).
    env = verifiers_v1.load_environment(
        "few-shot", {}, tmp_path, agent={"harness": "pytest-modal-eval-chat"}
    )
    finished = run_v1(env, fake_server.base_url)
    [output] = finished[0]
    assert output["error"] is None
    assert [(m["role"], m["content"]) for m in output["prompt"]] == [
        ("system", "Box the answer."),
        ("user", "What is 1 + 1?"),
        ("assistant", "The answer is \\boxed{2}."),
        ("user", "What is 2 + 3?"),
    ]
    [reply] = output["completion"]
    assert reply["role"] == "assistant" and "What is" not in reply["content"]


@v1_only
def test_the_prompt_is_found_by_content_after_messages_a_harness_added() -> None:
    from pytest_modal_eval.client.verifiers_v1_outputs import prompt_length

    shot = [
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "What is 2 + 3?"},
    ]
    reply = {"role": "assistant", "content": "5"}
    harness = {"role": "system", "content": "You may call tools."}
    assert prompt_length([*shot, reply], shot) == 3
    assert prompt_length([harness, *shot, reply], shot) == 4
    # Contents reshaped by a harness: the prompt's roles at the start still mark its end.
    reshaped = [{**m, "content": f"[{m['content']}]"} for m in shot]
    assert prompt_length([*reshaped, reply], shot) == 3
    # Neither: at the first assistant message.
    assert prompt_length([harness, {"role": "user", "content": "x"}, reply], shot) == 2

"""verifiers v1 (0.4.x): tasks scored by a judge model (``task.judges``).

The bundled ``file-qa`` taskset with verifiers' built-in ``reference`` judge plugged in through
``env_args.task.judges`` and its own ``correct`` reward weighted 0, so the judge's verdict is
the reward. The model is the real test server on 127.0.0.1, the judge a second instance of it
that answers each question's judge prompt with a fixed verdict (``replies``). These run when
verifiers 0.4 is installed: ``uv run --with verifiers==0.4.0 pytest
tests/test_verifiers_v1_judges.py``.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api
from tests.conftest import (
    BenchmarkProject,
    FakeServer,
    arithmetic_rows,
    read_jsonl,
    start_fake_server,
)
from tests.support.openai_server import DEFAULT_SETTINGS
from tests.support.v1_runs import run_v1

pytestmark = pytest.mark.skipif(installed_api() != "v1", reason="needs verifiers 0.4 (v1 API)")

JUDGE_KEY = "judge-key-5e0b7c13a9"
ROWS = arithmetic_rows(4)
#: The judge's verdict per example: right answers all, yet only "yes" scores.
VERDICTS = ["yes", "no", "yes", "no"]


@pytest.fixture(scope="module")
def judge_server_session() -> Iterator[FakeServer]:
    server = start_fake_server("--model", "judge-model")
    yield server
    server.stop()


@pytest.fixture
def judge_server(judge_server_session: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    """The judge: asks for ``JUDGE_KEY`` (read from ``JUDGE_API_KEY``), answers ``VERDICTS``."""
    replies = {row["question"]: verdict for row, verdict in zip(ROWS, VERDICTS, strict=True)}
    judge_server_session.configure(
        **{
            **DEFAULT_SETTINGS,
            "model": "judge-model",
            "require_key": JUDGE_KEY,
            "replies": replies,
        },
        reset_stats=True,
    )
    monkeypatch.setenv("JUDGE_API_KEY", JUDGE_KEY)
    return judge_server_session


def judged_yaml(project: BenchmarkProject, judge: FakeServer, eval_yaml: str = "{}") -> None:
    data = project.evals / "data" / "judged.jsonl"
    data.parent.mkdir(exist_ok=True)
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (project.evals / "judged.yaml").write_text(
        textwrap.dedent(
            f"""\
            env_id: file-qa
            env_args:
              path: data/judged.jsonl
              task:
                rewards: {{correct: {{weight: 0}}}}
                judges:
                  - id: reference
                    base_url: {judge.base_url}
                    model: judge-model
                    api_key_var: JUDGE_API_KEY
            eval: {eval_yaml}
            gate: {{min_avg_reward: 0.25}}
            """
        )
    )


def outcomes(out: str) -> tuple[set[int], set[int]]:
    solved = {int(i) for i in re.findall(r"SOLVED \[example (\d+)\]", out)}
    missed = {int(i) for i in re.findall(r"MISSED \[example (\d+)\]", out)}
    return solved, missed


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_the_judges_verdict_decides_the_reward(
    project: BenchmarkProject, judge_server: FakeServer, xdist: list[str]
) -> None:
    """Every answer is right, yet exactly the examples the judge says "yes" to are solved; the
    judge gets one request per rollout, at its own endpoint, with its model and key and a
    prompt holding the question, the reference answer and the model's reply. Its first request
    fails and is retried (``eval.max_retries``)."""
    judged_yaml(project, judge_server, "{max_retries: 1}")
    judge_server.configure(fail_first=1)
    result = project.run("-v", *xdist)
    result.assert_outcomes(passed=1)
    assert outcomes(result.stdout.str()) == ({0, 2}, {1, 3})

    stats = judge_server.stats()
    assert stats["failed_requests"] == 1 and stats.get("unauthorized", 0) == 0
    assert stats["chat_requests:judge-model"] == len(ROWS) + 1
    prompts = list(stats["by_question"])
    assert len(prompts) == len(ROWS)
    for row in ROWS:
        [prompt] = [p for p in prompts if row["question"] in p]
        assert "Reference answer:" in prompt and row["answer"] in prompt
        assert f"The answer is \\boxed{{{row['answer']}}}." in prompt
    assert "chat_requests:judge-model" not in project.server.stats()

    [run_dir] = project.run_dirs("judged")
    records = {r["example_id"]: r for r in read_jsonl(run_dir / "results.jsonl")}
    assert {i: (r["reward"], r["metrics"]["reference"]) for i, r in records.items()} == {
        0: (1.0, 1.0), 1: (0.0, 0.0), 2: (1.0, 1.0), 3: (0.0, 0.0),
    }  # fmt: skip
    assert all(r["metrics"]["correct"] == 1.0 and r["error"] is None for r in records.values())
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert JUDGE_KEY.encode() not in path.read_bytes(), path


def test_finished_rollouts_are_not_judged_again(
    project: BenchmarkProject, judge_server: FakeServer
) -> None:
    """A run over two examples, continued over all four, judges only the two new ones; the
    continued run's records keep the first two verdicts; a third session judges nothing."""
    judged_yaml(project, judge_server)
    project.run("--override", "eval.num_examples=2").assert_outcomes(passed=1)
    assert judge_server.stats()["chat_requests"] == 2

    judge_server.configure(reset_stats=True)
    result = project.run("-v")
    result.assert_outcomes(passed=1)
    assert "resumed: 2/4 examples" in result.stdout.str()
    assert outcomes(result.stdout.str()) == ({0, 2}, {1, 3})
    stats = judge_server.stats()
    assert stats["chat_requests"] == 2
    assert not any(
        ROWS[0]["question"] in p or ROWS[1]["question"] in p for p in stats["by_question"]
    )
    [run_dir] = project.run_dirs("judged")
    rewards = {r["example_id"]: r["reward"] for r in read_jsonl(run_dir / "results.jsonl")}
    assert rewards == {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}

    judge_server.configure(reset_stats=True)
    project.run().assert_outcomes(passed=1)
    assert judge_server.stats().get("chat_requests", 0) == 0


def test_a_failing_judge_errors_its_examples(
    project: BenchmarkProject, judge_server: FakeServer
) -> None:
    """A judge endpoint answering 500 makes each example errored (not scored 0), with a
    message naming the judge and its endpoint; the next run judges those examples again."""
    judged_yaml(project, judge_server, "{max_retries: 0}")
    judge_server.configure(fail_rate=1.0)
    result = project.run("-v")
    out = result.stdout.str()
    errored = [line for line in result.stdout.lines if line.startswith("ERRORED [example")]
    assert len(errored) == len(ROWS), out
    assert outcomes(out) == (set(), set())
    [run_dir] = project.run_dirs("judged")
    records = read_jsonl(run_dir / "checkpoint.jsonl")
    assert len(records) == len(ROWS)
    for record in records:
        assert record["error"]["error"] == "TaskError"
        message = record["error"]["message"]
        assert f"judge 'reference' at {judge_server.base_url}/: InternalServerError" in message
        assert "injected failure" in message

    judge_server.configure(fail_rate=0.0, reset_stats=True)
    result = project.run("-v")
    result.assert_outcomes(passed=1)
    assert outcomes(result.stdout.str()) == ({0, 2}, {1, 3})
    assert judge_server.stats()["chat_requests"] == len(ROWS)


def test_a_judge_echoing_its_key_leaves_no_trace(
    project: BenchmarkProject, judge_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge endpoint answering 500 with the request's ``Authorization`` header in its message:
    the key, read from a variable whose name does not look secret (only ``api_key_var`` says it
    is), is in no file of the run, the report or the terminal."""
    monkeypatch.delenv("JUDGE_API_KEY")
    monkeypatch.setenv("ACME_JUDGE", JUDGE_KEY)
    judged_yaml(project, judge_server, "{max_retries: 0}")
    path = project.evals / "judged.yaml"
    path.write_text(
        path.read_text().replace("api_key_var: JUDGE_API_KEY", "api_key_var: ACME_JUDGE")
    )
    judge_server.configure(fail_rate=1.0, echo_auth=True)
    result = project.run("-v", "--junitxml=junit.xml")
    out = "\n".join(result.outlines + result.errlines)
    assert judge_server.stats()["failed_requests"] == len(ROWS), out
    assert "upstream refused Authorization: Bearer [redacted]" in out, out
    written = [p for p in project.pytester.path.rglob("*") if p.is_file()]
    assert any(p.name == "junit.xml" for p in written)
    assert any(p.name == "checkpoint.jsonl" for p in written)
    for file in written:
        assert JUDGE_KEY.encode() not in file.read_bytes(), file
    assert JUDGE_KEY not in out


def test_judges_key_variables_are_secret(tmp_path: Path) -> None:
    from pytest_modal_eval.client import verifiers_v1

    env = load(
        tmp_path,
        {
            "id": "reference",
            "base_url": "http://127.0.0.1:9/v1",
            "model": "judge-model",
            "api_key_var": "ACME_JUDGE",
            "headers_from_env": {"X-Team": "ACME_TEAM"},
        },
    )
    assert verifiers_v1.secret_variables(env) == ["ACME_JUDGE", "ACME_TEAM"]


def load(tmp_path: Path, judge: dict[str, Any]) -> Any:
    from pytest_modal_eval.client import verifiers_v1

    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return verifiers_v1.load_environment(
        "file-qa", {"path": "qa.jsonl", "task": {"judges": [judge]}}, tmp_path
    )


@pytest.mark.parametrize(
    ("judge", "message"),
    [
        (
            {"id": "reference"},
            r"'file-qa': judge 'reference' names no base_url or model in the benchmark's "
            r"env_args, so verifiers would send its calls to its default cloud endpoint; set "
            r"env_args.task.judges\[0\].base_url and env_args.task.judges\[0\].model",
        ),
        (
            {"id": "reference", "name": "grader", "base_url": "http://127.0.0.1:9/v1"},
            r"'file-qa': judge 'grader' names no model in .* set env_args.task.judges\[0\].model ",
        ),
        (
            {"id": "reference", "base_url": "http://127.0.0.1:9/v1?api_key=s3cret", "model": "m"},
            r"judge 'reference': env_args.task.judges\[0\].base_url has a query string or "
            r"fragment; .* env_args.task.judges\[0\].api_key_var$",
        ),
        (
            {"id": "reference", "base_url": "http://u:pw@127.0.0.1:9/v1", "model": "m"},
            r"judge 'reference': env_args.task.judges\[0\].base_url holds credentials; .* "
            r"env_args.task.judges\[0\].api_key_var",
        ),
        (
            {
                "id": "reference",
                "base_url": "http://127.0.0.1:9/v1",
                "model": "m",
                "headers": {"Authorization": "Bearer x", "X-Team": "t"},
            },
            r"judge 'reference': env_args.task.judges\[0\].headers sets \['Authorization'\] in "
            r"the benchmark file; .* env_args.task.judges\[0\].headers_from_env",
        ),
    ],
    ids=["no-endpoint", "no-model", "url-query", "url-credentials", "header-credentials"],
)
def test_a_judge_without_its_own_endpoint_is_refused(
    tmp_path: Path, judge: dict[str, Any], message: str
) -> None:
    """At load, naming the env id, the judge, the field to set and how."""
    from pytest_modal_eval.exceptions import EnvironmentLoadError

    with pytest.raises(EnvironmentLoadError, match=message):
        load(tmp_path, judge)


def test_a_judge_with_an_endpoint_loads(tmp_path: Path) -> None:
    env = load(tmp_path, {"id": "reference", "base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert [j.model for j in env.tasks[0].config.judges] == ["m"]


def test_a_missing_endpoint_is_reported_in_the_run(
    project: BenchmarkProject, judge_server: FakeServer
) -> None:
    """The load error reaches the user as the benchmark's error, with the YAML's path."""
    judged_yaml(project, judge_server)
    path = project.evals / "judged.yaml"
    path.write_text(path.read_text().replace(f"base_url: {judge_server.base_url}", "weight: 1"))
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*evals/judged.yaml*judge 'reference' names no base_url*"])
    assert project.server.stats().get("chat_requests", 0) == 0


CODE_JUDGED = """
import verifiers.v1 as vf


class CodeData(vf.TaskData):
    answer: str
    judge_url: str = ""


class CodeJudgedTask(vf.Task[CodeData]):
    @vf.reward
    async def judged(self, trace) -> float:
        if self.data.judge_url:
            config = vf.ReferenceJudgeConfig(
                base_url=self.data.judge_url, model="judge-model", api_key_var="JUDGE_API_KEY"
            )
        else:
            config = vf.ReferenceJudgeConfig()
        return await vf.ReferenceJudge(config).score(self.data, trace)


class CodeJudgedConfig(vf.TasksetConfig):
    judge_url: str = ""


class CodeJudgedTaskset(vf.Taskset[CodeJudgedTask, CodeJudgedConfig]):
    def load(self):
        for row in ROWS:
            data = CodeData(
                prompt=row["question"], answer=row["answer"], judge_url=self.config.judge_url
            )
            yield CodeJudgedTask(data)


__all__ = ["CodeJudgedTaskset"]
"""


def test_a_judge_built_by_task_code_uses_the_plugins_client(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_server: FakeServer,
    judge_server: FakeServer,
) -> None:
    """A judge the task's reward code builds itself goes through the plugin's client (retried
    after a failed first request) when its config names an endpoint, and errors its rollout,
    never reaching verifiers' default endpoint, when it does not."""
    from pytest_modal_eval.client import verifiers_v1

    (tmp_path / "code_judged.py").write_text(f"ROWS = {ROWS!r}\n" + CODE_JUDGED)
    monkeypatch.syspath_prepend(str(tmp_path))
    judge_server.configure(fail_first=1)

    def run(judge_url: str) -> dict[int, dict[str, Any]]:
        env = verifiers_v1.load_environment("code-judged", {"judge_url": judge_url}, tmp_path)
        outputs = run_v1(env, fake_server.base_url, max_concurrent_requests=2, max_retries=1)
        return {i: rollouts[0] for i, rollouts in outputs.items()}

    judged = run(judge_server.base_url)
    assert {i: (r["reward"], r["error"]) for i, r in judged.items()} == {
        i: (1.0 if verdict == "yes" else 0.0, None) for i, verdict in enumerate(VERDICTS)
    }
    assert judge_server.stats()["chat_requests"] == len(ROWS) + 1

    judge_server.configure(reset_stats=True)
    for record in run("").values():
        assert record["error"]["error"] == "TaskError"
        assert "judge 'reference' names no base_url" in record["error"]["message"]
    assert judge_server.stats().get("chat_requests", 0) == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("base_url: {url}", "base_url: http://127.0.0.1:9/v1"),
            "judge 'reference' (env_args.task.judges[0]) at http://127.0.0.1:9/v1: GET /models"
            " failed (Connection error. *); check that the judge's server is running",
        ),
        (
            ("api_key_var: JUDGE_API_KEY", "api_key_var: OTHER_JUDGE_KEY"),
            "judge 'reference' (env_args.task.judges[0]) at http://127.0.0.1:*: the endpoint "
            "refused the key (HTTP 401); it is read from $OTHER_JUDGE_KEY "
            "(env_args.task.judges[0].api_key_var), which is not set",
        ),
        (
            ("model: judge-model", "model: judge-modle"),
            "judge 'reference' (env_args.task.judges[0]) at http://127.0.0.1:*: the endpoint "
            "does not serve model 'judge-modle'; it serves: judge-model. Set "
            "env_args.task.judges[0].model to the served name",
        ),
    ],
    ids=["down", "key-refused", "model-not-served"],
)
def test_a_judge_that_cannot_answer_fails_the_benchmark_before_its_run(
    project: BenchmarkProject,
    judge_server: FakeServer,
    change: tuple[str, str],
    message: str,
) -> None:
    """Checked once, before the model is asked anything (on Modal: before a GPU is started
    for it): the benchmark errors with the YAML's path, the judge, its field and the fix."""
    judged_yaml(project, judge_server)
    path = project.evals / "judged.yaml"
    old, new = (part.replace("{url}", judge_server.base_url) for part in change)
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    result = project.run()
    result.assert_outcomes(errors=1)
    # The message as a pattern: its [0] literal, * any text.
    pattern = ".*".join(re.escape(part) for part in message.split("*"))
    result.stdout.re_match_lines([f".*evals/judged.yaml: {pattern}$"])
    assert project.server.stats().get("chat_requests", 0) == 0
    assert judge_server.stats().get("chat_requests", 0) == 0
    assert not list(project.run_dirs("judged"))


def test_a_404_on_models_is_refused_only_without_an_api_path(judge_server: FakeServer) -> None:
    """Below a versioned API path, a 404 on ``/models`` is a gateway that lists no models:
    nothing to check. Without one, the base_url most likely lacks its ``/v1``."""
    import verifiers.v1 as vf

    from pytest_modal_eval.client.verifiers_v1_judges import check_judge_endpoints
    from pytest_modal_eval.exceptions import EndpointError

    def judge(base_url: str) -> vf.JudgeConfig:
        return vf.ReferenceJudgeConfig(base_url=base_url, model="m", api_key_var="JUDGE_API_KEY")

    root = judge_server.base_url.removesuffix("/v1")  # the server answers under /v1 only
    check_judge_endpoints([judge(f"{root}/v2")], timeout=10)
    with pytest.raises(EndpointError) as unversioned:
        check_judge_endpoints([judge(root)], timeout=10)
    assert str(unversioned.value) == (
        f"judge 'reference' (env_args.task.judges[0]) at {root}: the endpoint answered 404 on "
        "/models; is the API path (usually /v1) missing from env_args.task.judges[0].base_url?"
    )
    with pytest.raises(EndpointError, match="does not serve model 'm'"):
        check_judge_endpoints([judge(judge_server.base_url)], timeout=10)

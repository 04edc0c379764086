"""Resume: an interrupted evaluation loses nothing and repeats nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BenchmarkProject, read_jsonl

N = 120
CONCURRENCY = 4
SLOW = f"eval: {{max_concurrent: {CONCURRENCY}, max_retries: 0}}\n"


#: A pytest run as typed at a terminal, where Ctrl-C delivers SIGINT. A process started in the
#: background by a non-interactive shell (CI runners, `cmd &` in a script) inherits SIGINT as
#: ignored, and Python keeps it ignored; the child restores Python's own handler first.
AS_AT_A_TERMINAL = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "import pytest; sys.exit(pytest.main(sys.argv[1:]))"
)


def start_pytest(project: BenchmarkProject, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", AS_AT_A_TERMINAL, *project.args(*extra)],
        cwd=project.pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for_checkpoint_lines(project: BenchmarkProject, name: str, at_least: int) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for run in project.run_dirs(name):
            checkpoint = run / "checkpoint.jsonl"
            if checkpoint.exists() and checkpoint.read_bytes().count(b"\n") >= at_least:
                return checkpoint
        time.sleep(0.02)
    raise AssertionError("the run did not get going")


def interrupt_a_third_in(
    project: BenchmarkProject, name: str, n: int, *extra: str, group: bool = False
) -> tuple[Path, str]:
    """Run the project as at a terminal, Ctrl-C it once a third of ``name``'s ``n`` examples
    are in the checkpoint (``group``: to the whole process group, as a terminal does, which
    reaches xdist's workers too) and wait for pytest's "Interrupted" exit. The checkpoint and
    everything the session printed."""
    output = project.pytester.path / "terminal.txt"
    with output.open("wb") as terminal:
        process = subprocess.Popen(
            [sys.executable, "-c", AS_AT_A_TERMINAL, *project.args(*extra)],
            cwd=project.pytester.path,
            stdout=terminal,
            stderr=subprocess.STDOUT,
            start_new_session=group,
        )
        checkpoint = wait_for_checkpoint_lines(project, name, n // 3)
        if group:
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGINT)
        assert process.wait(60) == pytest.ExitCode.INTERRUPTED
    return checkpoint, output.read_text()


def intact_records(checkpoint: Path) -> int:
    count = 0
    for line in checkpoint.read_bytes().splitlines():
        try:
            json.loads(line)
            count += 1
        except ValueError:
            pass
    return count


def journaled_answers(project: BenchmarkProject) -> int:
    """The answers in ``alpha``'s journal: records of a JSON header line with the answer's
    ``length``, then that many bytes and a newline (a torn last record is not counted)."""
    runs = project.run_dirs("alpha")
    journal = runs[0] / "answers.journal" if runs else None
    if journal is None or not journal.exists():
        return 0
    data = journal.read_bytes()
    count = position = 0
    while (end := data.find(b"\n", position)) >= 0:
        stop = end + 1 + int(json.loads(data[position:end])["length"])
        if data[stop : stop + 1] != b"\n":
            break
        count, position = count + 1, stop + 1
    return count


def kill_with_answers_in_hand(project: BenchmarkProject) -> int:
    """Run ``alpha`` (two rollouts per example) while the server holds every repeated question,
    so each example in progress has its first rollout's answer and waits for the second; once
    the held requests fill every slot, SIGKILL pytest. Returns the answers the server sent."""
    project.add("alpha", n=N, extra_yaml=f"eval: {{max_concurrent: {CONCURRENCY}, rollouts: 2}}\n")
    project.server.configure(hold_repeats=600)
    process = start_pytest(project)
    # Once the held repeats fill every slot the server answers nothing more; then wait until
    # each answer it sent is in the run's journal, where the client writes it as it arrives.
    deadline = time.monotonic() + 60
    while True:
        stats = project.server.stats()
        answered: int = stats.get("completed_requests", 0)
        if stats.get("in_flight", 0) >= CONCURRENCY and journaled_answers(project) >= answered:
            break
        assert time.monotonic() < deadline, (stats, journaled_answers(project))
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    return answered


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["sigkill", "sigint"])
def test_interrupted_run_resumes_without_repeating(
    project: BenchmarkProject, sig: signal.Signals
) -> None:
    project.add("alpha", n=N, extra_yaml=SLOW)
    project.server.configure(delay=0.05)
    process = start_pytest(project)
    checkpoint = wait_for_checkpoint_lines(project, "alpha", N // 3)
    process.send_signal(sig)
    code = process.wait(30)
    if sig == signal.SIGINT:
        assert code == pytest.ExitCode.INTERRUPTED  # pytest's clean "Interrupted" exit
    finished = intact_records(checkpoint)
    assert N // 3 <= finished < N
    first_requests = project.server.stats()["chat_requests"]

    project.server.configure(delay=0.0, reset_stats=True)
    result = project.run()
    result.assert_outcomes(passed=1)
    second_requests = project.server.stats()["chat_requests"]
    [run_dir] = project.run_dirs("alpha")
    reused = json.loads((run_dir / "metadata.json").read_text())["reused_answers"]
    # Exactly the missing examples were asked again, less the answers that had arrived; only
    # requests in flight at the kill were ever repeated.
    assert second_requests + reused == N - finished
    assert first_requests + second_requests <= N + CONCURRENCY
    results = read_jsonl(run_dir / "results.jsonl")
    assert sorted(r["example_id"] for r in results) == list(range(N))
    result.stdout.fnmatch_lines(
        [f"alpha (test-model): resumed: {finished}/{N} examples from run {run_dir.name}*"]
    )
    assert not (run_dir / "answers.journal").exists()  # a complete run needs it no more


def test_answers_received_before_a_kill_are_not_requested_again(
    project: BenchmarkProject,
) -> None:
    answered = kill_with_answers_in_hand(project)
    # A question's first request was answered, its second was held.
    first_seeds = {q: seeds[0] for q, seeds in project.server.stats()["seeds_by_question"].items()}
    [run_dir] = project.run_dirs("alpha")
    assert (run_dir / "answers.journal").exists()
    assert answered >= CONCURRENCY // 2 and not (run_dir / "checkpoint.jsonl").read_bytes()

    project.server.configure(hold_repeats=0.0, reset_stats=True)
    result = project.run()
    result.assert_outcomes(passed=1)
    # Every answer received before the kill was used, none asked for again; the rollouts
    # still missing asked with the seeds the answered ones did not have.
    stats = project.server.stats()
    assert stats["chat_requests"] == 2 * N - answered == 2 * N - len(first_seeds)
    for question, seeds in stats["seeds_by_question"].items():
        kept = [first_seeds[question]] if question in first_seeds else []
        assert sorted(kept + seeds) == [0, 1], question
    result.stdout.fnmatch_lines(
        [
            f"alpha (test-model): resumed: 0/{N} examples from run {run_dir.name}; "
            f"{answered} answers received before the interruption reused"
        ]
    )
    results = read_jsonl(run_dir / "results.jsonl")
    assert len(results) == 2 * N and all(r["reward"] == 1.0 for r in results)
    assert not (run_dir / "answers.journal").exists()
    assert json.loads((run_dir / "metadata.json").read_text())["num_examples"] == N


def test_changed_sampling_starts_new_run_and_says_why(project: BenchmarkProject) -> None:
    project.add("alpha", n=20)
    project.server.configure(fail_rate=0.3)
    project.run()  # leaves an incomplete run (errored examples)
    project.server.configure(fail_rate=0.0)
    result = project.run("--override", "sampling.temperature=0.5")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*note: an earlier incomplete run * exists with a different configuration "
            "(sampling.temperature differ); starting a new run*"
        ]
    )
    assert len(project.run_dirs("alpha")) == 2


def test_changed_gpu_is_the_same_run(project: BenchmarkProject) -> None:
    project.add("alpha", n=20)
    project.server.configure(fail_rate=0.3)
    project.run()
    errored = 20 - project.server.stats()["completed_requests"]
    project.server.configure(fail_rate=0.0, reset_stats=True)
    result = project.run(
        "--override",
        "infra.gpu=H100:2",
        "--override",
        "eval.max_concurrent=3",
        "--override",
        "infra.timeout=99",
    )
    result.assert_outcomes(passed=1)
    assert len(project.run_dirs("alpha")) == 1
    assert project.server.stats()["chat_requests"] == errored


def test_errored_examples_are_retried_next_run(project: BenchmarkProject) -> None:
    project.add("alpha", n=30, extra_yaml="eval: {rollouts: 2, max_retries: 0}\n")
    project.server.configure(fail_rate=0.3)
    first = project.run()
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    failing = 30 - project.server.stats()["completed_requests"] // 2
    assert failing > 0
    project.server.configure(fail_rate=0.0, reset_stats=True)
    result = project.run()
    result.assert_outcomes(passed=1)
    # Only the errored rollouts (2 per failing example) were requested again.
    assert project.server.stats()["chat_requests"] == 2 * failing
    [run_dir] = project.run_dirs("alpha")
    results = read_jsonl(run_dir / "results.jsonl")
    assert len(results) == 60 and not any(r["error"] for r in results)
    result.stdout.fnmatch_lines(
        [f"alpha (test-model): resumed: {30 - failing}/30 examples from run *"]
    )


def test_torn_checkpoint_line_resumes_with_a_warning(project: BenchmarkProject) -> None:
    project.add("alpha", n=12)
    project.run().assert_outcomes(passed=1)
    [run_dir] = project.run_dirs("alpha")
    checkpoint = run_dir / "checkpoint.jsonl"
    lines = checkpoint.read_bytes().splitlines(keepends=True)
    checkpoint.write_bytes(b"".join(lines[:5]) + lines[5][: len(lines[5]) // 2])
    project.server.configure(reset_stats=True)
    result = project.run("-W", "default")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*ignoring a torn checkpoint line*"])
    assert project.server.stats()["chat_requests"] == 7
    assert len(read_jsonl(run_dir / "results.jsonl")) == 12


def test_a_finished_run_asks_the_endpoint_only_what_it_serves(project: BenchmarkProject) -> None:
    project.add("alpha", n=6)
    first = project.run("--override", "eval.num_examples=4")
    first.assert_outcomes(passed=1)
    [run_dir] = project.run_dirs("alpha")
    results = (run_dir / "results.jsonl").read_text()
    project.server.configure(reset_stats=True, accuracy=0.0)
    again = project.run("--override", "eval.num_examples=4")
    again.assert_outcomes(passed=1)
    # Only GET /models (which model answers is part of the key): the finished run is reported
    # from its checkpoint.
    stats = project.server.stats()
    assert (stats.get("models_requests", 0), stats.get("chat_requests", 0)) == (1, 0), stats
    again.stdout.fnmatch_lines(
        [
            "alpha (test-model): resumed: 4/4 examples from run *",
            f"*note: every selected example was finished in run {run_dir.name}: nothing to "
            "evaluate, nothing was asked of the endpoint but which model it serves",
        ]
    )
    assert (run_dir / "results.jsonl").read_text() == results
    # Two more examples selected: the endpoint is asked for those two only.
    project.server.configure(accuracy=1.0)
    more = project.run()
    more.assert_outcomes(passed=1)
    stats = project.server.stats()
    assert (stats["models_requests"], stats["chat_requests"]) == (2, 2)
    assert "nothing to evaluate" not in more.stdout.str()
    assert project.run_dirs("alpha") == [run_dir]
    # Runs stored under the earlier spelling of a model without an organisation
    # (alpha--default--test-model) are continued there.
    earlier = run_dir.parent.with_name("alpha--default--test-model")
    run_dir.parent.rename(earlier)
    project.server.configure(reset_stats=True)
    project.run().assert_outcomes(passed=1)
    assert project.server.stats().get("chat_requests", 0) == 0
    assert not run_dir.parent.exists() and (earlier / run_dir.name / "metadata.json").is_file()


def test_fresh_and_cache_clear_start_over(project: BenchmarkProject) -> None:
    project.add("alpha", n=6)
    project.run().assert_outcomes(passed=1)
    project.server.configure(reset_stats=True)
    project.run().assert_outcomes(passed=1)
    assert project.server.stats().get("chat_requests", 0) == 0  # fully resumed
    project.run("--eval-fresh").assert_outcomes(passed=1)
    project.run("--cache-clear").assert_outcomes(passed=1)
    assert project.server.stats()["chat_requests"] == 12
    assert len(project.run_dirs("alpha")) == 3


def test_without_cacheprovider_resume_scans_the_output_dir(project: BenchmarkProject) -> None:
    project.add("alpha", n=10)
    project.server.configure(fail_rate=0.3)
    project.run("-p", "no:cacheprovider")
    completed = project.server.stats()["completed_requests"]
    project.server.configure(fail_rate=0.0, reset_stats=True)
    project.run("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert project.server.stats()["chat_requests"] == 10 - completed
    assert len(project.run_dirs("alpha")) == 1


def test_two_benchmarks_resume_in_parallel_under_xdist(project: BenchmarkProject) -> None:
    project.add("alpha", n=20)
    project.add("beta", n=20)
    project.server.configure(fail_rate=0.3)
    project.run_subprocess("-n", "2")
    completed = project.server.stats()["completed_requests"]
    project.server.configure(fail_rate=0.0, reset_stats=True)
    result = project.run_subprocess("-n", "2")
    result.assert_outcomes(passed=2)
    assert project.server.stats()["chat_requests"] == 40 - completed
    result.stdout.fnmatch_lines(["alpha (test-model): resumed: */20 examples from run *"])
    result.stdout.fnmatch_lines(["beta (test-model): resumed: */20 examples from run *"])
    for name in ("alpha", "beta"):
        [run_dir] = project.run_dirs(name)
        assert len(read_jsonl(run_dir / "results.jsonl")) == 20


def test_an_errored_rollout_is_asked_again_not_replayed(project: BenchmarkProject) -> None:
    """Rollout 1 of every example fails (the server answers 500 to a repeated question); its
    sibling's answer, with the same request bytes (no seed), must not stand in for it."""
    n = 10  # fewer than the errors in a row that abort a run
    project.add(
        "alpha",
        n=n,
        extra_yaml="sampling: {seed: null}\neval: {rollouts: 2, max_retries: 0}\n",
        gate="gate: {min_avg_reward: 0.0, max_error_rate: 1.0}",
    )
    project.server.configure(fail_repeats=True)
    project.run()  # every example errored: no score, whatever the gate says
    [run_dir] = project.run_dirs("alpha")
    assert project.server.stats()["failed_requests"] == n
    assert (run_dir / "answers.journal").exists() is False  # nothing in it is needed

    project.server.configure(fail_repeats=False, reset_stats=True)
    result = project.run()
    result.assert_outcomes(passed=1)
    assert project.server.stats()["chat_requests"] == n  # the errored rollouts, from the server
    assert json.loads((run_dir / "metadata.json").read_text())["reused_answers"] == 0
    records = read_jsonl(run_dir / "results.jsonl")
    assert len(records) == 2 * n and not any(r["error"] for r in records)


def test_a_smaller_selection_keeps_the_answers_of_the_other_examples(
    project: BenchmarkProject,
) -> None:
    answered = kill_with_answers_in_hand(project)
    project.server.configure(hold_repeats=0.0, reset_stats=True)

    # The first example only: the answers of the others stay in the journal, unused.
    first = project.run("--override", "eval.num_examples=1")
    first.assert_outcomes(passed=1)
    [run_dir] = project.run_dirs("alpha")
    assert (run_dir / "answers.journal").exists()
    reused_first = json.loads((run_dir / "metadata.json").read_text())["reused_answers"]
    assert reused_first == 1 and project.server.stats()["chat_requests"] == 1

    project.server.configure(reset_stats=True)
    everything = project.run()
    everything.assert_outcomes(passed=1)
    reused = json.loads((run_dir / "metadata.json").read_text())["reused_answers"]
    assert reused == answered - 1
    assert project.server.stats()["chat_requests"] == 2 * (N - 1) - reused
    assert not (run_dir / "answers.journal").exists()


def test_an_unusable_journal_is_reported_and_the_run_goes_on(project: BenchmarkProject) -> None:
    kill_with_answers_in_hand(project)
    [run_dir] = project.run_dirs("alpha")
    journal = run_dir / "answers.journal"
    journal.unlink()
    journal.mkdir()  # cannot be read or replaced: as good as a broken disk for this file
    project.server.configure(hold_repeats=0.0, reset_stats=True)
    result = project.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["alpha (test-model): note: answer journal *answers.journal*"])
    assert len(read_jsonl(run_dir / "results.jsonl")) == 2 * N


def test_ctrl_c_says_what_was_kept_and_the_command_that_continues(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=N, extra_yaml=SLOW)
    project.server.configure(delay=0.05)
    checkpoint, text = interrupt_a_third_in(project, "alpha", N)
    kept = intact_records(checkpoint)  # one rollout per example, none errored
    assert N // 3 <= kept < N
    lines = text.splitlines()
    assert any("KeyboardInterrupt" in line for line in lines)  # pytest's own block stays
    # The session ends on what was kept and how to go on, after pytest's block.
    assert lines[-2:] == [
        f"alpha (test-model): {kept}/{N} examples kept in run {checkpoint.parent.name}",
        "run the same command to continue: "
        f"pytest --model test-model --base-url {project.server.base_url}",
    ], lines[-8:]


def test_a_run_under_the_earlier_directory_name_is_continued(project: BenchmarkProject) -> None:
    """Run directories are named by the model's label; an id whose label differs from the
    name runs were stored under before (here one with a space) keeps its runs: a run in the
    directory of the earlier name is found and continued, with nothing asked again."""
    model = "org/a b"
    project.server.configure(models={model: {}})
    project.add("alpha", n=6)
    args = ["--model", model, "--base-url", project.server.base_url, "-p", "no:cacheprovider"]
    project.pytester.runpytest(*args).assert_outcomes(passed=1)
    outputs = project.pytester.path / "outputs" / "evals"
    (made,) = [p for p in (outputs / "alpha--org--a-b").iterdir() if p.is_dir()]
    earlier = outputs / "alpha--org--a b"
    (outputs / "alpha--org--a-b").rename(earlier)
    asked = project.server.stats()["chat_requests"]

    result = project.pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    assert project.server.stats()["chat_requests"] == asked
    result.stdout.fnmatch_lines([f"*every selected example was finished in run {made.name}*"])
    assert not (outputs / "alpha--org--a-b").exists()
    assert [p.name for p in earlier.iterdir() if p.is_dir()] == [made.name]


def test_ctrl_c_under_xdist_says_the_examples_are_kept_and_the_command_that_continues(
    project: BenchmarkProject,
) -> None:
    """Under -n, Ctrl-C reaches the controller and every worker (one process group); the
    workers' runs are not known to the controller, which still says that finished examples
    are kept and how to go on."""
    project.add("alpha", n=N, extra_yaml=SLOW)
    project.server.configure(delay=0.05)
    checkpoint, text = interrupt_a_third_in(project, "alpha", N, "-n", "1", group=True)
    kept = intact_records(checkpoint)
    assert N // 3 <= kept < N
    lines = text.splitlines()
    assert lines[-2:] == [
        "examples finished before the interruption are kept in their runs "
        "(pytest-modal-eval runs lists them)",
        "run the same command to continue: "
        f"pytest --model test-model --base-url {project.server.base_url} -n 1",
    ], lines[-12:]

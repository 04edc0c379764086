"""Run files as untrusted input: one reader for every command, strict writers, safe terminal text.

Runs are written by the plugin's own writers (:class:`Checkpoint`, :func:`write_results`,
:func:`write_json_atomic`) or by real pytest sessions against the test server; then damaged
the way a disk, an editor or another tool damages them, and read by every command.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_modal_eval.cli import main
from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.runs import reader
from pytest_modal_eval.runs.local_key import KEY_FILE
from pytest_modal_eval.runs.paths import RunPaths
from pytest_modal_eval.runs.record import rollout_record
from pytest_modal_eval.runs.store import Checkpoint, write_json_atomic, write_results
from pytest_modal_eval.share import bundle
from pytest_modal_eval.terminal_text import escape
from tests.conftest import REPO, BenchmarkProject

#: Text a model can produce that naive line splitting or a terminal mishandles.
HOSTILE = 'a\u2028b\u2029c\u0085d \x1b]52;c;aGk=\x07 \x1b]0;pwned\x07 \u009b2J "q" \\ \ud800 \x00 e'


def write_run(root: Path, run_id: str, outputs: list[dict[str, Any]], **meta: Any) -> Path:
    """A finished run of benchmark ``alpha``, written by the plugin's own writers."""
    run_dir = root / f"alpha--{meta.get('slug', 'org--m')}" / run_id
    run_dir.mkdir(parents=True)
    model = meta.get("model", "org/m")
    config = {
        "run_id": run_id,
        "model_id": model,
        "model_slug": meta.get("slug", "org--m"),
        "benchmark": "alpha",
        "num_examples": len(outputs),
    }
    write_json_atomic(run_dir / "run_config.json", config)
    checkpoint = Checkpoint(run_dir)
    checkpoint.open()
    checkpoint.append([rollout_record(o, 0, "t") for o in outputs], sync_every=1)
    checkpoint.close()
    write_results(checkpoint, RunPaths(run_dir).results, [o["example_id"] for o in outputs], 1)
    rewards = [float(o["reward"]) for o in outputs]
    write_json_atomic(
        run_dir / "metadata.json",
        {
            "benchmark": "alpha",
            "model": model,
            "run_id": run_id,
            "num_examples": len(outputs),
            "rollouts_per_example": 1,
            "avg_reward": sum(rewards) / len(rewards),
            "ci": [0.0, 1.0],
            "n_evaluated": len(outputs),
            "errors": 0,
        },
    )
    return run_dir


def outputs(n: int = 4, text: str = "42") -> list[dict[str, Any]]:
    return [
        {
            "example_id": i,
            "prompt": [{"role": "user", "content": f"q{i}"}],
            "completion": [{"role": "assistant", "content": text}],
            "answer": "42",
            "reward": float(i % 2),
        }
        for i in range(n)
    ]


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"HF_TOKEN": "hf_x"})


# -- one reader, one error, every command ------------------------------------------------------


def _reward_string(run: Path) -> str:
    lines = (run / "results.jsonl").read_text(encoding="utf-8").split("\n")
    lines[1] = lines[1].replace('"reward": 1.0', '"reward": "1.0"')
    (run / "results.jsonl").write_text("\n".join(lines), encoding="utf-8")
    return "results.jsonl:2: field reward: Input should be a valid number (got '1.0')"


def _ci_five(run: Path) -> str:
    meta = json.loads((run / "metadata.json").read_text())
    (run / "metadata.json").write_text(json.dumps({**meta, "ci": 5}))
    return "metadata.json: field ci: Input should be a valid list (got 5)"


def _metadata_list(run: Path) -> str:
    (run / "metadata.json").write_text("[1, 2]")
    return "metadata.json: a JSON list, where a JSON object is expected"


def _serving_string(run: Path) -> str:
    data = json.loads((run / "metadata.json").read_text())
    (run / "metadata.json").write_text(json.dumps({**data, "serving": "fast"}))
    return "metadata.json: field serving:"


def _line_array(run: Path) -> str:
    with (run / "results.jsonl").open("a") as out:
        out.write("[1, 2]\n")
    return "results.jsonl:5: a JSON list, where a rollout record (a JSON object) is expected"


def _results_directory(run: Path) -> str:
    (run / "results.jsonl").unlink()
    (run / "results.jsonl").mkdir()
    return "results.jsonl: a directory, not read"


def _torn(run: Path) -> str:
    data = (run / "results.jsonl").read_bytes()
    (run / "results.jsonl").write_bytes(data[:-20])
    return "results.jsonl:4: the last line is cut off (no newline at its end"


def _nan(run: Path) -> str:
    text = (run / "results.jsonl").read_text(encoding="utf-8")
    (run / "results.jsonl").write_text(text.replace('"reward": 0.0', '"reward": NaN', 1))
    return "results.jsonl:1: not a JSON rollout record (NaN is not a JSON number)"


def _dev_zero(run: Path) -> str:
    (run / "metadata.json").unlink()
    (run / "metadata.json").symlink_to("/dev/zero")
    return "metadata.json: not a regular file, not read"


DAMAGE = [_reward_string, _ci_five, _metadata_list, _line_array, _results_directory, _torn, _nan]
DAMAGE += [_dev_zero, _serving_string]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_run_is_one_identical_error_in_every_command(tmp_path: Path, damage: Any) -> None:
    root = tmp_path / "evals"
    run = write_run(root, "20260101-000000-aaaa", outputs())
    expected = f"Error: {run / damage(run)}"
    commands = {
        "show": ["show", str(run)],
        # Showing fewer examples than the file holds still reads (and checks) all of it.
        "show -n 1": ["show", str(run), "-n", "1"],
        "report": ["report", str(run), "-o", str(tmp_path / "r.html")],
        "compare": ["compare", str(run), str(run)],
        "push": ["push", str(run), "--to", "org/evals"],
    }
    for name, args in commands.items():
        result = cli(*args)
        assert result.exit_code != 0, (name, result.output)
        (line,) = result.output.strip().split("\n")
        assert line.startswith(expected), (name, line)
        assert "; the file is damaged or was edited" in line or "not read" in line, line
        assert "Traceback" not in result.output
    assert not (tmp_path / "r.html").exists()


def test_show_names_a_comparison_it_cannot_read(tmp_path: Path) -> None:
    """A ``vs_reference`` in metadata.json that is not a comparison (edited, or from another
    tool) is one error line naming the file and the field, not a traceback."""
    run = write_run(tmp_path / "evals", "20260101-000000-aaaa", outputs())
    meta = json.loads((run / "metadata.json").read_text())
    (run / "metadata.json").write_text(json.dumps({**meta, "vs_reference": {"n_pairs": 3}}))
    result = cli("show", str(run))
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    (line,) = result.output.strip().split("\n")[-1:]
    assert line.startswith(f"Error: {run / 'metadata.json'}: field 'vs_reference'"), line


def test_runs_names_a_damaged_run_and_lists_the_others(tmp_path: Path) -> None:
    """A metadata.json linked to /dev/zero is refused unread: `runs` still lists every other
    run, names the damaged one on stderr, and exits 1."""
    root = tmp_path / "evals"
    write_run(root, "20260101-000000-good", outputs())
    bad = write_run(root, "20260102-000000-bad", outputs())
    _dev_zero(bad)
    result = CliRunner().invoke(main, ["runs", "--json", "--eval-output-dir", str(root)])
    assert result.exit_code == 1
    assert [r["run_id"] for r in json.loads(result.stdout)] == ["20260101-000000-good"]
    assert result.stderr.strip() == (
        f"Error: {bad / 'metadata.json'}: not a regular file, not read; {reader.FIX}"
    )


def test_a_huge_metadata_file_is_refused_unread(tmp_path: Path, monkeypatch: Any) -> None:
    run = write_run(tmp_path, "r1", outputs())
    monkeypatch.setattr(reader, "MAX_JSON_BYTES", 64)
    with pytest.raises(RunFileError, match=r"metadata.json: larger than 0 MiB, not read"):
        RunPaths(run).read_metadata()


def test_report_into_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "evals", "r1", outputs())
    result = cli("report", str(run), "-o", str(tmp_path / "nope" / "r.html"))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: -o {tmp_path / 'nope' / 'r.html'}: {tmp_path / 'nope'} is no such directory; "
        "create it first or choose another -o"
    )


def test_a_push_to_an_unreachable_hub_is_one_line(tmp_path: Path) -> None:
    run = write_run(tmp_path / "evals", "r1", outputs())
    result = CliRunner().invoke(
        main,
        ["push", str(run), "--to", "org/evals"],
        env={"HF_TOKEN": "hf_x", "HF_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().split("\n")
    assert line.startswith(
        "Error: could not reach the Hub at http://127.0.0.1:9 to push org/evals ("
    ), line
    assert line.endswith(
        "check the network and HF_ENDPOINT, then push again (pushing the same runs twice is safe)"
    ), line


# -- U+2028 and friends are text, not line ends -----------------------------------------------


def test_line_separators_in_text_pass_through_every_command(tmp_path: Path) -> None:
    root = tmp_path / "evals"
    run = write_run(root, "20260101-000000-aaaa", outputs(text=HOSTILE))
    shown = cli("show", "20260101", "--eval-output-dir", str(root), "--json")
    assert shown.exit_code == 0, shown.output
    completions = [e["completion"][0]["content"] for e in json.loads(shown.stdout)["examples"]]
    assert completions == [HOSTILE] * 4
    compared = cli("compare", "20260101", str(run), "--eval-output-dir", str(root))
    assert compared.exit_code == 0, compared.output
    assert "OK: no significant drop" in compared.output
    page = str(tmp_path / "r.html")
    made = cli("report", "20260101-000000-aaaa", "--eval-output-dir", str(root), "-o", page)
    assert made.exit_code == 0 and "(1 run, 4 examples)" in made.output
    shared = bundle.load_run(run, _NoRedactor())
    assert [r["completion"][0]["content"] for r in shared.records()] == [HOSTILE] * 4
    assert bundle.results_parquet(shared)


class _NoRedactor:
    def json(self, value: Any) -> Any:
        return value

    def text(self, value: str) -> str:
        return value


# -- terminal output ---------------------------------------------------------------------------


def test_show_prints_a_models_escape_sequences_escaped(tmp_path: Path) -> None:
    run = write_run(tmp_path / "evals", "r1", outputs(text=HOSTILE))
    result = cli("show", str(run))
    assert result.exit_code == 0, result.output
    for raw in ("\x1b", "\x07", "\u009b", "\x00", "\u2028"):
        assert raw not in result.output.replace("\u2028", "") or raw == "\u2028"
    assert "\\x1b]52;c;aGk=\\x07" in result.output and "\\x9b2J" in result.output
    as_json = cli("show", str(run), "--json")
    assert "\x1b" not in as_json.output and "\u009b" not in as_json.output
    assert json.loads(as_json.output)["examples"][0]["completion"][0]["content"] == HOSTILE


def test_escape_keeps_text_and_shows_controls() -> None:
    assert escape("plain ünïcode ✓\ttab") == "plain ünïcode ✓\ttab"
    assert escape("a\x1b[2Jb\nc") == "a\\x1b[2Jb\\x0ac"
    assert escape("a\nb", newlines=True) == "a\nb"
    assert escape("\u202eevil") == "\\u202eevil"


def test_a_servers_escape_sequences_reach_the_terminal_escaped(project: BenchmarkProject) -> None:
    """A server's error text is in the per-example lines and the summary: shown, not obeyed."""
    project.add("alpha", n=3)
    project.server.configure(fail_rate=1.0, fail_message="\x1b]0;pwned\x07\x1b[2J\u009b1m boom")
    result = project.run("-v")
    text = "\n".join(result.outlines + result.errlines)
    assert "\x1b" not in text and "\x07" not in text and "\u009b" not in text
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b1m boom" in text


# -- runs -m: a model however it was written ---------------------------------------------------


def test_runs_matches_a_model_by_path_name_or_slug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "evals"
    (tmp_path / "tiny-arith").mkdir()
    write_run(root, "r-local", outputs(), model="./tiny-arith", slug="local--tiny-arith")
    write_run(root, "r-hub", outputs(), model="Qwen/Qwen3-8B", slug="Qwen--Qwen3-8B")
    monkeypatch.chdir(tmp_path)

    def ids(model: str) -> list[str]:
        result = cli("runs", "--json", "--eval-output-dir", str(root), "-m", model)
        assert result.exit_code == 0, result.output
        return [r["run_id"] for r in json.loads(result.stdout)]

    for name in ("./tiny-arith", "tiny-arith", "local--tiny-arith", str(tmp_path / "tiny-arith")):
        assert ids(name) == ["r-local"], name
    for name in ("Qwen/Qwen3-8B", "Qwen--Qwen3-8B", "Qwen3-8B"):
        assert ids(name) == ["r-hub"], name
    none = cli("runs", "--eval-output-dir", str(root), "-m", "tiny-arth")
    assert none.output.startswith(f"no runs match in {root}")


# -- writers: strict JSON, any text round-trips -------------------------------------------------

MODEL_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion=MODEL_TEXT, answer=MODEL_TEXT, info=MODEL_TEXT)
def test_any_model_text_round_trips_through_writers_and_readers(
    tmp_path_factory: pytest.TempPathFactory, completion: str, answer: str, info: str
) -> None:
    root = tmp_path_factory.mktemp("rt")
    output = {
        "example_id": 0,
        "prompt": [{"role": "user", "content": info}],
        "completion": [{"role": "assistant", "content": completion}],
        "answer": answer,
        "info": {info: completion},
        "reward": 1.0,
    }
    run = write_run(root, "r1", [output])
    for source in (RunPaths(run).results, RunPaths(run).checkpoint):
        [(number, record)] = list(reader.iter_records(source))
        assert number == 1
        assert record["completion"] == [{"role": "assistant", "content": completion}]
        assert (record["answer"], record["info"]) == (answer, {info: completion})
        assert record["prompt"][0]["content"] == info
    shared = bundle.load_run(run, _NoRedactor())
    assert shared.records()[0]["completion"][0]["content"] == completion


@pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf, "high", None])
def test_a_reward_that_is_not_a_finite_number_makes_the_rollout_errored(reward: Any) -> None:
    metrics = {} if reward is None else {"m": reward}
    record = rollout_record({"example_id": 3, "reward": reward, "metrics": metrics}, 0, "t")
    if reward is None:  # no reward at all: a 0, as verifiers reports a failed score
        assert record["error"] is None and record["reward"] == 0.0
        return
    assert record["reward"] == 0.0 and record["error"]["error"] == "InvalidReward"
    assert "not a finite number" in record["error"]["message"]
    # What is written is strict JSON the reader accepts.
    reader.parse_record(json.dumps(record, allow_nan=False).encode(), Path("x"), 1)


def test_json_files_are_written_without_nan(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "m.json", {"stderr": math.nan, "ci": [math.inf, 0.5]})
    assert json.loads((tmp_path / "m.json").read_text()) == {"stderr": None, "ci": [None, 0.5]}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


# -- NaN from a real environment, in a real session --------------------------------------------

NAN_QA = """
import math, os

import verifiers as vf

from pytest_modal_eval.envs.file_qa import load_environment as file_qa


def nan_for_odd(completion, answer, **_):
    return math.nan if int(answer) % 2 else 1.0


def load_environment(path):
    env = file_qa(path)
    if not os.environ.get("NAN_REWARD"):
        return env
    rubric = vf.Rubric(funcs=[nan_for_odd], weights=[1.0])
    return vf.SingleTurnEnv(eval_dataset=env.eval_dataset, rubric=rubric)
"""


def test_a_nan_reward_is_an_errored_example_retried_by_the_next_run(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("alpha", n=6, gate="gate: {max_error_rate: 1.0}")
    project.play_with("alpha", "nan-qa", "nan_qa", NAN_QA)
    monkeypatch.setenv("NAN_REWARD", "1")
    first = project.run()
    text = first.stdout.str()
    assert "Traceback" not in text and "ValueError" not in text, text
    [run] = project.run_dirs("alpha")
    records = list(reader.iter_records(run / "results.jsonl"))
    errored = [r for _, r in records if r["error"]]
    assert errored and all(r["error"]["error"] == "InvalidReward" for r in errored)
    assert "NaN" not in (run / "results.jsonl").read_text()
    assert cli("report", str(run), "-o", str(project.pytester.path / "r.html")).exit_code == 0
    monkeypatch.delenv("NAN_REWARD")
    project.server.reset()
    project.run().assert_outcomes(passed=1)
    assert project.server.stats()["chat_requests"] == len(errored)


# -- recording errors: a real write failure ----------------------------------------------------


def _limit_file_size(limit: int) -> Any:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_full_disk_mid_run_is_one_line_and_the_next_run_continues(
    project: BenchmarkProject,
) -> None:
    rows = [{"question": f"What is {i} + 0? " + "pad " * 40, "answer": str(i)} for i in range(60)]
    project.add("alpha", rows=rows, gate="gate: {max_error_rate: 1.0}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *project.args()],
        cwd=project.pytester.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size(24_000),
    )
    assert done.returncode != 0
    [run] = project.run_dirs("alpha")
    checkpoint = run / "checkpoint.jsonl"
    lines = [x for x in done.stdout.splitlines() if "could not write" in x]
    assert lines, done.stdout[-3000:]
    assert f"could not write {checkpoint}: File too large; raise the file-size limit" in lines[0]
    assert "finished examples are kept in the checkpoint" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    kept = len(list(reader.iter_records(checkpoint, torn_tail=True)))
    assert 0 < kept < 60
    assert not [p for p in run.rglob("*.tmp")]
    project.server.reset()
    again = project.run()
    again.assert_outcomes(passed=1)
    # Exactly the missing examples: answered now, or answered before the failure and kept in
    # the answer journal.
    reused = re.search(r"(\d+) answers received before the interruption reused", again.stdout.str())
    asked = project.server.stats()["chat_requests"]
    assert asked + (int(reused[1]) if reused else 0) == 60 - kept


WRITE_REPORT = """
import sys
from pathlib import Path
from pytest_modal_eval.report.html import write_report
from pytest_modal_eval.exceptions import RecordingError
try:
    write_report(Path(sys.argv[2]), [(Path(sys.argv[1]), None)])
except RecordingError as exc:
    print(exc)
"""


def test_a_report_that_cannot_be_written_leaves_no_temporary_file(tmp_path: Path) -> None:
    run = write_run(tmp_path / "evals", "r1", outputs(text="x" * 5000))
    out = tmp_path / "site"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", WRITE_REPORT, str(run), str(out / "report.html")],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_file_size(20_000),
    )
    assert done.stdout.strip() == (
        f"could not write {out / 'report.html'}: File too large; raise the file-size limit "
        "(ulimit -f) or point --eval-output-dir elsewhere, then write the report again"
    ), done.stdout + done.stderr
    assert list(out.iterdir()) == []


def test_temporary_files_are_unique_per_writer(tmp_path: Path) -> None:
    from pytest_modal_eval.runs.store import replaced_atomically

    target = tmp_path / "report.html"
    with replaced_atomically(target) as one, replaced_atomically(target) as two:
        assert one.name != two.name
        one.write("one")
        two.write("two")
    assert target.read_text() == "one" and list(tmp_path.iterdir()) == [target]


def test_every_file_of_a_session_follows_the_umask(project: BenchmarkProject) -> None:
    """The report and the run's files are created as ``open`` creates a file: 0o666 less the
    umask (here 0o027: readable by the group, by no one else), none private by accident:
    only the secret key is."""
    project.add("alpha", n=2)
    previous = os.umask(0o027)
    try:
        project.run().assert_outcomes(passed=1)
    finally:
        os.umask(previous)
    outputs = project.pytester.path / "outputs" / "evals"
    modes = {
        path.relative_to(outputs).as_posix(): path.stat().st_mode & 0o777
        for path in outputs.rglob("*")
        if path.is_file()
    }
    assert "report.html" in modes and any(name.endswith("/metadata.json") for name in modes)
    # The output directory's key for secret settings' stand-ins is this user's only, on purpose.
    assert modes.pop(KEY_FILE) == 0o600
    assert {name: mode for name, mode in modes.items() if mode != 0o640} == {}


def test_checkpoint_skips_a_record_of_the_wrong_type_with_a_warning(tmp_path: Path) -> None:
    run = write_run(tmp_path, "r1", outputs(2))
    with (run / "checkpoint.jsonl").open("a") as out:
        out.write(json.dumps({"example_id": 9, "reward": "1"}) + "\n")
    with pytest.warns(UserWarning, match=r"checkpoint.jsonl:3: field reward"):
        kept = list(Checkpoint(run).read())
    assert [r["example_id"] for r in kept] == [0, 1]


def test_a_finished_record_needs_a_reward_an_errored_one_does_not() -> None:
    errored = reader.parse_record(b'{"example_id": 1, "error": {"error": "X"}}\n', Path("c"), 4)
    assert errored["error"] == {"error": "X"}
    with pytest.raises(RunFileError, match=r"^c:4: field reward: missing from a record with no"):
        reader.parse_record(b'{"example_id": 1, "error": null}\n', Path("c"), 4)

"""Baselines stored through syrupy, exercised with items shaped like ours.

The pytester projects below collect each ``evals/*.yaml`` into a ``pytest.Module`` subclass that
yields one ``pytest.Function`` named after the benchmark -- the real item shape -- because what
syrupy does depends on it: the snapshot location comes from ``item.path`` (the YAML), the
snapshot name from the node id, and unused-snapshot accounting from the collected items. Plain
``test_*.py`` functions would exercise a different path (``__snapshots__/<module>/``).
``-p no:modal_eval`` keeps our own plugin's collector out, so only this file's wiring runs.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_modal_eval.exceptions import BaselineError
from pytest_modal_eval.gate.baseline import Baseline
from pytest_modal_eval.stats.summary import ExampleRewards, compare_paired

CONFTEST = """
import json
import pytest
import yaml
from pytest_modal_eval.gate.baseline import Baseline, check_baseline


def run_benchmark(request, snapshot):
    spec = request.node.spec
    if spec.get("crash"):
        raise RuntimeError("deployment failed before any reward")
    current = Baseline.from_rewards(
        benchmark=request.node.name,
        model="test-model",
        config_hash=spec.get("config", "cfg-1"),
        rewards={str(k): v for k, v in spec["rewards"].items()},
    )
    outcome = check_baseline(snapshot, current)
    out = request.config.rootpath / "outcomes"
    out.mkdir(exist_ok=True)
    (out / f"{request.node.name}.json").write_text(json.dumps({
        "status": str(outcome.status),
        "message": outcome.message,
        "comparable": outcome.comparable,
        "stored": None if outcome.stored is None else outcome.stored.to_dict(),
    }))


class BenchmarkFile(pytest.Module):
    obj = None  # a YAML file is not importable; same trick as _pytest.doctest.DoctestTextfile

    def collect(self):
        spec = yaml.safe_load(self.path.read_text())
        item = pytest.Function.from_parent(self, name=spec["name"], callobj=run_benchmark)
        item.spec = spec
        yield item


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".yaml":
        return BenchmarkFile.from_parent(parent, path=file_path)
"""

GSM8K = "name: gsm8k\nrewards: {1: [1.0], 2: [0.0], 10: [1.0], 17: [1.0]}\n"
# Item name differs from the YAML stem: syrupy's own location check would warn on write.
MMLU = "name: mmlu-pro\nrewards: {a: [1.0, 0.5], b: [0.0, 1.0], c: [1.0, 1.0]}\n"
BASE = ("-p", "no:modal_eval", "-p", "no:cacheprovider")


class Project:
    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        pytester.makeconftest(CONFTEST)
        pytester.makeini("[pytest]\nfilterwarnings = error\n")
        (pytester.path / "evals").mkdir()
        self.write("gsm8k", GSM8K)
        self.write("mmlu", MMLU)

    def write(self, name: str, text: str) -> None:
        (self.pytester.path / "evals" / f"{name}.yaml").write_text(text)

    def baseline(self, name: str) -> Path:
        return self.pytester.path / "evals" / "__baselines__" / f"{name}.json"

    def outcome(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (self.pytester.path / "outcomes" / f"{name}.json").read_text()
        )
        return data

    def run(self, *args: str, xdist: bool = False) -> pytest.RunResult:
        outcomes = self.pytester.path / "outcomes"
        for f in outcomes.glob("*.json") if outcomes.exists() else ():
            f.unlink()
        if xdist:
            # Workers are real processes; run the whole session in one too.
            return self.pytester.runpytest_subprocess(*BASE, "-n", "2", *args)
        return self.pytester.runpytest(*BASE, *args)


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Project:
    # When this suite itself runs under xdist, the inner session would inherit the worker's
    # environment and syrupy would take it for a worker (no summary, report sent nowhere).
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(var, raising=False)
    return Project(pytester)


@pytest.fixture(params=[False, True], ids=["inprocess", "xdist"])
def xdist(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


# --- Baseline document ------------------------------------------------------------------------


def _baseline(**changes: Any) -> Baseline:
    rewards = {"10": [1.0], "2": [0.0], "1": [1.0]}
    base = Baseline.from_rewards(benchmark="gsm8k", model="m", config_hash="h", rewards=rewards)
    return Baseline(**{**base.__dict__, **changes})


def test_from_rewards_records_means_and_binary_single() -> None:
    b = _baseline()
    assert b.per_example == {"10": 1.0, "2": 0.0, "1": 1.0}
    assert (b.n_examples, b.rollouts_per_example, b.binary_single) == (3, 1, True)
    graded = Baseline.from_rewards(
        benchmark="x", model="m", config_hash="h", rewards={"a": [1.0, 0.0], "b": [1.0]}
    )
    assert graded.per_example == {"a": 0.5, "b": 1.0} and not graded.binary_single
    partial = Baseline.from_rewards(benchmark="x", model="m", config_hash="h", rewards={"a": [0.5]})
    assert not partial.binary_single


@pytest.mark.parametrize(
    "rows", [[[1.0], [0.0], [1.0]], [[0.5], [1.0], [0.0]], [[1.0, 0.0], [0.1, 0.2], [1.0, 1.0]]]
)
def test_from_rewards_of_columns_is_the_baseline_of_the_mapping(rows: list[list[float]]) -> None:
    ids = [10, 2, 1]
    columns = ExampleRewards(ids, rows)
    as_dict = {str(i): row for i, row in zip(ids, rows, strict=True)}
    fields = {"benchmark": "gsm8k", "model": "m", "config_hash": "h"}
    from_columns = Baseline.from_rewards(**fields, rewards=columns)
    from_dict = Baseline.from_rewards(**fields, rewards=as_dict)
    assert from_columns == from_dict and from_columns.to_json() == from_dict.to_json()
    assert from_columns.binary_single == from_dict.binary_single
    # A stored baseline (a plain dict, as read from disk) compares with it as before.
    stored = Baseline.from_json(from_dict.to_json())
    assert compare_paired(
        stored.per_example,
        from_columns.per_example,
        baseline_binary_single=stored.binary_single,
        run_binary_single=from_columns.binary_single,
    ) == compare_paired(
        stored.per_example,
        from_dict.per_example,
        baseline_binary_single=stored.binary_single,
        run_binary_single=from_dict.binary_single,
    )


def test_a_run_baseline_holds_no_per_example_objects_until_read() -> None:
    n = 50_000
    rewards = ExampleRewards(np.arange(n), np.ones((n, 1)))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        current = Baseline.from_rewards(benchmark="b", model="m", config_hash="h", rewards=rewards)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The means array: 8 bytes per example; a dict of str -> float held ~130.
    assert held / n < 20, f"{held / n:.0f} bytes per example"
    assert len(current.per_example) == n and current.per_example["49999"] == 1.0


def test_document_is_readable_one_example_per_line_in_natural_order() -> None:
    text = _baseline().to_json()
    assert text.endswith("}\n")
    lines = text.splitlines()
    body = lines[lines.index('  "per_example": {') + 1 : -2]
    assert body == ['    "1": 1.0,', '    "2": 0.0,', '    "10": 1.0']


def test_a_baseline_built_from_a_plain_dict_writes_its_examples_in_natural_order() -> None:
    b = Baseline(**{**_baseline().__dict__, "per_example": {"10": 1.0, "9": 0.0, "a": 1.0}})
    assert list(b.to_dict()["per_example"]) == ["9", "10", "a"]
    assert b.to_json() == json.dumps(b.to_dict(), indent=2) + "\n"


def test_round_trip_including_undefined_stderr() -> None:
    b = _baseline()
    assert Baseline.from_json(b.to_json()) == b
    single = Baseline.from_rewards(benchmark="x", model="m", config_hash="h", rewards={"1": [1.0]})
    assert single.to_dict()["stderr"] is None
    assert math.isnan(Baseline.from_dict(single.to_dict()).stderr)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"per_example": {"1": "1.0"}, "n_examples": 1}, "per_example.1: Input should be a valid"),
        ({"n_examples": 5}, "n_examples is 5 but per_example has 3"),
        ({"per_example": {"1": 0.5, "2": 0.0, "10": 1.0}}, "binary_single is true"),
        ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
        ({"version": 2}, "version: Input should be 1"),
        ({"mean": None}, "mean: Input should be a valid number"),
    ],
)
def test_malformed_document_error_names_file_and_field(
    change: dict[str, Any], problem: str
) -> None:
    doc = {**_baseline().to_dict(), **change}
    with pytest.raises(BaselineError) as info:
        Baseline.from_dict(doc, source="evals/__baselines__/gsm8k.json")
    assert "malformed baseline evals/__baselines__/gsm8k.json" in str(info.value)
    assert problem in str(info.value)


@pytest.mark.parametrize(
    ("per_example", "problems"),
    [
        ([1.0], ["per_example: Input should be a valid dictionary"]),
        ({}, ["per_example: Dictionary should have at least 1 item"]),
        (
            {"1": True, "2": 10**400, "3": None},
            [f"per_example.{i}: Input should be a valid number" for i in (1, 2, 3)],
        ),
        (
            {"1": math.nan, "2": -math.inf},
            [f"per_example.{i}: Input should be a finite number" for i in (1, 2)],
        ),
        ({str(i): "x" for i in range(25)}, ["per_example.9: Input should be", "... and 15 more"]),
    ],
)
def test_malformed_examples_are_listed_as_pydantic_words_them(
    per_example: Any, problems: list[str]
) -> None:
    doc = {**_baseline().to_dict(), "per_example": per_example, "n_examples": 1}
    with pytest.raises(BaselineError) as info:
        Baseline.from_dict(doc, source="b.json")
    for problem in problems:
        assert problem in str(info.value)
    assert "per_example.10:" not in str(info.value)  # ten problems shown at most


def test_examples_accept_json_integers_and_are_required() -> None:
    doc = {**_baseline().to_dict(), "per_example": {"1": 1, "2": 0, "10": 1}}
    assert Baseline.from_dict(doc) == _baseline()
    without = {k: v for k, v in doc.items() if k != "per_example"}
    with pytest.raises(BaselineError, match="per_example: Field required"):
        Baseline.from_dict(without)
    with pytest.raises(BaselineError, match=r"\(document\): Input should be a valid dictionary"):
        Baseline.from_dict([doc])


@pytest.mark.parametrize("numeric", [True, False])
def test_large_document_is_json_dumps_output_and_reads_back(numeric: bool) -> None:
    n = 20_000  # several of the pieces the examples are written in
    rng = np.random.default_rng(1)
    rewards = {(str(i) if numeric else f"q{i}"): [float(x)] for i, x in enumerate(rng.random(n))}
    b = Baseline.from_rewards(benchmark="b", model="m", config_hash="h", rewards=rewards)
    text = b.to_json()
    assert text == json.dumps(b.to_dict(), indent=2, allow_nan=False) + "\n"
    assert Baseline.from_json(text) == b


def test_a_stored_baseline_is_held_as_columns() -> None:
    n = 50_000
    text = Baseline.from_rewards(
        benchmark="b",
        model="m",
        config_hash="h",
        rewards=ExampleRewards(np.arange(n), np.ones((n, 1))),
    ).to_json()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        stored = Baseline.from_json(text)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # An id and a mean column: 16 bytes per example; the parsed dict held ~130.
    assert held / n < 24, f"{held / n:.0f} bytes per example"
    assert stored.per_example["49999"] == 1.0 and len(stored.per_example) == n


def test_not_json_is_a_clear_error() -> None:
    with pytest.raises(BaselineError, match=r"malformed baseline x\.json: not JSON"):
        Baseline.from_json("{oops", source="x.json")
    with pytest.raises(BaselineError, match="stderr"):
        Baseline.from_json(_baseline().to_json().replace('"stderr": 0', '"stderr": NaN, "x": 0'))


# --- through syrupy ---------------------------------------------------------------------------


def test_update_writes_readable_file_and_next_run_loads_it(project: Project, xdist: bool) -> None:
    result = project.run(xdist=xdist)
    result.assert_outcomes(passed=2)
    assert result.ret == 0 and project.outcome("gsm8k")["status"] == "missing"

    result = project.run("--snapshot-update", xdist=xdist)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*2 snapshots generated.*"])
    assert project.outcome("gsm8k")["status"] == "recorded"
    text = project.baseline("gsm8k").read_text()
    assert '    "17": 1.0' in text and '"benchmark": "gsm8k"' in text

    result = project.run(xdist=xdist)
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    for name in ("gsm8k", "mmlu-pro"):
        outcome = project.outcome(name)
        assert outcome["status"] == "loaded" and outcome["comparable"]
        assert outcome["stored"] == json.loads(project.baseline(name).read_text())
    result.stdout.no_fnmatch_line("*unused*")


def test_refresh_reports_updated_and_unchanged(project: Project) -> None:
    project.run("--snapshot-update").assert_outcomes(passed=2)
    project.write("gsm8k", GSM8K.replace("17: [1.0]", "17: [0.0]"))
    result = project.run("--snapshot-update")
    result.stdout.fnmatch_lines(["*1 snapshot passed. 1 snapshot updated.*"])
    assert project.outcome("gsm8k")["status"] == "updated"
    assert project.outcome("gsm8k")["stored"]["per_example"]["17"] == 1.0  # the previous one
    assert project.outcome("mmlu-pro")["status"] == "unchanged"
    assert '"17": 0.0' in project.baseline("gsm8k").read_text()


def test_missing_baseline_is_reported_not_failed(project: Project) -> None:
    result = project.run()
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    outcome = project.outcome("gsm8k")
    assert outcome["status"] == "missing" and not outcome["comparable"]
    assert "record one with --snapshot-update" in outcome["message"]
    assert not (project.pytester.path / "evals" / "__baselines__").exists()
    result.stdout.no_fnmatch_line("*snapshot*failed*")


def test_malformed_baseline_fails_the_item_with_a_clear_error(project: Project) -> None:
    project.run("--snapshot-update").assert_outcomes(passed=2)
    path = project.baseline("gsm8k")
    path.write_text(path.read_text().replace('"2": 0.0', '"2": "zero"'))
    result = project.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*BaselineError: malformed baseline evals/__baselines__/gsm8k.json;"
            " refresh it with --snapshot-update:",
            "*per_example.2: Input should be a valid number*",
        ]
    )
    # Refreshing replaces the unreadable file.
    project.run("--snapshot-update").assert_outcomes(passed=2)
    assert "replaced an unreadable file" in project.outcome("gsm8k")["message"]
    assert Baseline.from_json(path.read_text()).per_example["2"] == 0.0


def test_config_hash_mismatch_is_reported(project: Project) -> None:
    project.run("--snapshot-update").assert_outcomes(passed=2)
    project.write("gsm8k", GSM8K + "config: cfg-2\n")
    project.run().assert_outcomes(passed=2)
    outcome = project.outcome("gsm8k")
    assert outcome["status"] == "config-changed" and not outcome["comparable"]
    assert outcome["message"] == (
        "baseline evals/__baselines__/gsm8k.json was made under a different configuration "
        "('cfg-1', now 'cfg-2'); refresh it with --snapshot-update"
    )
    assert outcome["stored"]["config_hash"] == "cfg-1"


def test_keyword_selection_leaves_other_baselines_alone(project: Project, xdist: bool) -> None:
    project.run("--snapshot-update").assert_outcomes(passed=2)
    mmlu = project.baseline("mmlu-pro")
    before = (mmlu.read_text(), mmlu.stat().st_mtime_ns)
    project.write("gsm8k", GSM8K.replace("17: [1.0]", "17: [0.0]"))

    for args in (("-k", "gsm8k"), ("-k", "gsm8k", "--snapshot-update")):
        result = project.run(*args, xdist=xdist)
        result.assert_outcomes(passed=1)
        assert result.ret == 0
        result.stdout.no_fnmatch_line("*unused*")
        result.stdout.no_fnmatch_line("*Deleted*")
    assert (mmlu.read_text(), mmlu.stat().st_mtime_ns) == before
    assert '"17": 0.0' in project.baseline("gsm8k").read_text()


def test_item_failing_before_the_check_keeps_its_baseline(project: Project) -> None:
    # Syrupy deletes unused snapshots of items that ran under --snapshot-update; a baseline must
    # survive an infrastructure failure of its benchmark.
    project.run("--snapshot-update").assert_outcomes(passed=2)
    before = project.baseline("mmlu-pro").read_text()
    project.write("mmlu", MMLU + "crash: true\n")
    for args in ((), ("--snapshot-update",)):
        result = project.run(*args)
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.no_fnmatch_line("*unused*")
    assert project.baseline("mmlu-pro").read_text() == before


def test_update_new_only_records_missing_but_keeps_existing(project: Project) -> None:
    project.run("--snapshot-update", "-k", "mmlu").assert_outcomes(passed=1)
    before = project.baseline("mmlu-pro").read_text()
    project.write("mmlu", MMLU.replace("c: [1.0, 1.0]", "c: [0.0, 0.0]"))
    project.run("--snapshot-update-new-only").assert_outcomes(passed=2)
    assert project.outcome("gsm8k")["status"] == "recorded"
    assert project.outcome("mmlu-pro")["status"] == "loaded"
    assert project.baseline("mmlu-pro").read_text() == before


@pytest.mark.parametrize("name", ["gsm8k", "mmlu-pro", "odd: name?*", "tab\there"])
def test_a_named_baseline_is_the_file_syrupy_names_after_the_item(name: str) -> None:
    """A benchmark's baseline is named by its ``baseline_name``; for a one-model item (named
    like the benchmark) that must be the very file syrupy's own naming gives, so baselines
    recorded before are found. Pins syrupy's cleaning of single-file snapshot names."""
    from types import SimpleNamespace
    from typing import cast

    from syrupy.location import PyTestLocation

    from pytest_modal_eval.gate.baseline import BASELINE_NAME_ATTR, BaselineExtension

    def location(**attributes: str) -> PyTestLocation:
        item = SimpleNamespace(
            path=Path("evals/x.yaml"), obj=test_update_writes_readable_file_and_next_run_loads_it
        )
        item.name, item.nodeid = name, f"evals/x.yaml::{name}"
        for key, value in attributes.items():
            setattr(item, key, value)
        return PyTestLocation(cast(pytest.Item, item))

    named = BaselineExtension.get_snapshot_name(
        test_location=location(**{BASELINE_NAME_ATTR: name})
    )
    assert named == BaselineExtension.item_snapshot_name(location())
    assert BaselineExtension.get_snapshot_name(test_location=location()) == named

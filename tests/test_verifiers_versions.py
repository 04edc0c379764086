"""A run started under one verifiers API (0.3.x classic, 0.4.x v1) and resumed under the other.

With the same examples and configuration (file-qa gives the same rows under both) the run goes
on, and says it changed verifiers; when the environment gives other examples, a new run starts
with one line naming both verifiers versions. The first test runs the second half under the
other verifiers for real (``uv run --with verifiers==0.4.0``, or the locked 0.3), as
scripts/test.sh does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from pytest_modal_eval.client.verifiers_adapter import installed_api, installed_version
from tests.conftest import REPO, BenchmarkProject, read_jsonl

OTHER = {"classic": ("0.4.0", "v1"), "v1": ("0.3.1", "classic")}[installed_api()]


def test_a_run_goes_on_under_the_other_verifiers_and_says_so(project: BenchmarkProject) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs uv to run pytest under the other verifiers version")
    n = 20
    project.add("alpha", n=n)
    project.server.configure(fail_rate=0.3)
    project.run()  # leaves an incomplete run: the failed examples are missing
    [run_dir] = project.run_dirs("alpha")
    missing = n - project.server.stats()["completed_requests"]
    assert 0 < missing < n

    project.server.configure(fail_rate=0.0, reset_stats=True)
    other_version, other_api = OTHER
    with_other = ["--with", f"verifiers=={other_version}"] if other_api == "v1" else []
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTEST_ADDOPTS")}
    command = [uv, "run", "--project", str(REPO), "--locked", *with_other, "python", "-m"]
    done = subprocess.run(
        [*command, "pytest", *project.args("-p", "no:randomly")],
        cwd=project.pytester.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert project.run_dirs("alpha") == [run_dir]
    assert project.server.stats()["chat_requests"] == missing
    assert (
        f"alpha (test-model): resumed: {n - missing}/{n} examples from run {run_dir.name}"
        in done.stdout
    )
    assert (
        f"alpha (test-model): note: run {run_dir.name} was started with verifiers "
        f"{installed_version()} "
        f"({installed_api()} API) and goes on with verifiers {other_version} ({other_api} API): "
        "its examples and configuration are the same"
    ) in done.stdout
    assert len(read_jsonl(run_dir / "results.jsonl")) == n


def test_other_examples_under_the_other_verifiers_start_a_new_run_and_say_why(
    project: BenchmarkProject,
) -> None:
    """An earlier run made under the other verifiers (as its run_config.json records) whose
    environment gave other examples: a new run, and the note names both versions."""
    project.add("alpha", n=10)
    project.server.configure(fail_rate=0.3)
    project.run()
    [first] = project.run_dirs("alpha")
    config_path = first / "run_config.json"
    config = json.loads(config_path.read_text())
    config["versions"]["verifiers"] = OTHER[0]
    config_path.write_text(json.dumps(config))
    rows = project.evals / "data" / "alpha.jsonl"
    rows.write_text(rows.read_text().replace("?", "? Show the sum."))  # other prompts

    project.server.configure(fail_rate=0.0)
    result = project.run()
    result.assert_outcomes(passed=1)
    assert len(project.run_dirs("alpha")) == 2
    result.stdout.fnmatch_lines(
        [
            f"alpha (test-model): note: run {first.name} was made with verifiers {OTHER[0]} "
            f"({OTHER[1]} API) and verifiers {installed_version()} ({installed_api()} API) "
            "is installed; the environment differs between the two (dataset differ), so that run "
            "is not continued; starting a new run"
        ]
    )

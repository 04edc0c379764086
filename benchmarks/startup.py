"""Start-up: a first run's whole process, collecting 200 benchmarks, and what installing the
plugin costs other test suites.

1. **One example** (``--part one``): ``pytest evals --model M --base-url URL`` on a one-example
   file-qa benchmark (the bundled environment most first runs use) against an instant local
   endpoint (``tests/support/openai_server.py``), the whole process, exit included. Beside it,
   in the same environment: ``pytest --version``, a raw client (a minimal httpx script sending
   the same one request and reading its answer) and ``vf-eval`` on the same environment and
   example where verifiers 0.3's is installed. Each in two installs: this interpreter's
   environment (``uv sync``: verifiers 0.3.1) and a plain ``pip install`` of the repository into
   a fresh venv (verifiers 0.4.0 resolves there; ``--plain-venv DIR`` reuses one,
   ``--build-plain`` makes one in a temporary directory). Medians of ``--repeats`` rounds of
   wall and CPU (user + system) seconds, contenders interleaved; ratios to ``pytest --version``.
   Target: the plugin <= 2 s wall on a quiet machine, below ``vf-eval``. Run with
   PYTHONDONTWRITEBYTECODE unset, as a shell has it (``--dont-write-bytecode`` sets it: every
   run then compiles the plugin's modules anew, since pytest rewrites a plugin's asserts).
2. **Collection** (``--part collect``): ``pytest --co -q --eval-collect-quick`` over a project
   with 200 benchmark YAMLs: what every run's collection does, checks that load nothing
   included (target < 1 s, the whole command, Python start-up included). For scale: the same
   command in an empty project, and plain ``pytest --co -q``, which also loads each
   benchmark's environment (here one load, which the 200 benchmarks share; fewer rounds: no
   target). With ``--plain-venv DIR``, the empty project and the 200 YAMLs in that install
   too (the uv-synced one holds the test dependencies' pytest plugins, hypothesis's among
   them).
3. **Other suites** (``--part collect``): ``pytest --co -q`` of a small plain suite (20 files x
   10 tests, no YAML) as installed (pytest-modal-eval and its dependency syrupy both register
   pytest plugins), with ``-p no:modal_eval``, and with ``-p no:modal_eval -p no:syrupy``.
   Variants alternate, ``--repeats`` runs each, medians. Target: the plugin adds < 50 ms;
   syrupy is reported separately.

On a shared machine the wall times move with the load (the header prints the load average);
CPU seconds move less, and the ratios less still.

Run: ``.venv/bin/python -m benchmarks.startup`` (both parts, a few minutes;
``--build-plain`` adds the venv's installation, about 2 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks._common import (
    DEMO_DATA,
    MODEL_NAME,
    PYTHON,
    REPO,
    SYSTEM_PROMPT,
    bench_env,
    chat_bodies,
    demo_rows,
    fake_server,
    header,
    log,
    make_project,
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


#: The raw client: the same one request the plugin sends for the example, its answer read.
RAW_CLIENT = """
import json, sys, httpx
url, body = sys.argv[1], json.loads(sys.argv[2])
answer = httpx.post(url + "/chat/completions", json=body, timeout=30).json()
print(answer["choices"][0]["message"]["content"])
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["one", "collect", "all"], default="all")
    parser.add_argument("--benchmarks", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=25, help="collection rounds")
    parser.add_argument("--one-repeats", type=int, default=5, help="one-example rounds")
    parser.add_argument(
        "--uv-python", default=PYTHON, help="the uv-synced interpreter (default: this one)"
    )
    parser.add_argument("--plain-venv", type=Path, help="a venv with `pip install .` in it")
    parser.add_argument("--build-plain", action="store_true", help="make that venv here")
    parser.add_argument("--dont-write-bytecode", action="store_true")
    args = parser.parse_args()
    if args.part in ("one", "all"):
        one_example(args)
    if args.part in ("collect", "all"):
        collection(args)
    return 0


def one_example(args: argparse.Namespace) -> None:
    header("start-up: one example of a bundled environment, the whole process")
    with tempfile.TemporaryDirectory(prefix="bench-one-") as tmp:
        root = Path(tmp)
        installs = {"uv sync": args.uv_python}
        plain = args.plain_venv
        if args.build_plain:
            plain = _build_plain(root / "plain-venv")
        if plain is not None:
            installs["pip install . (plain venv)"] = str(plain / "bin" / "python")
        data = root / "one.jsonl"
        data.write_text(json.dumps(demo_rows()[0]) + "\n", encoding="utf-8")
        project = make_project(root / "project", data, max_concurrent=1)
        with fake_server() as url:
            for name, python in installs.items():
                _one_install(name, python, project, data, f"{url}/v1", args)


def _one_install(
    name: str, python: str, project: Path, data: Path, base_url: str, args: argparse.Namespace
) -> None:
    versions = subprocess.run(
        [python, "-c", "from importlib.metadata import version as v; "
         "print(v('verifiers'), v('pytest'))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    body = chat_bodies(demo_rows()[:1])[0]
    contenders = {
        "pytest --version": [python, "-m", "pytest", "--version"],
        "raw client (httpx, one request)": [python, "-c", RAW_CLIENT, base_url, json.dumps(body)],
        "pytest-modal-eval (1 example)": [
            python, "-m", "pytest", "evals", "--model", MODEL_NAME, "--base-url", base_url,
            "-q", "--eval-fresh", "-p", "no:cacheprovider",
        ],
    }  # fmt: skip
    hypothesis = subprocess.run(
        [python, "-c", "import importlib.util as u; print(bool(u.find_spec('hypothesis')))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip() == "True"  # fmt: skip
    if hypothesis:
        # hypothesis (this repository's test dependency) registers a pytest plugin that imports
        # hypothesis at every session's terminal summary: its cost, beside the plugin's own.
        contenders["the same, -p no:hypothesispytest"] = [
            *contenders["pytest-modal-eval (1 example)"], "-p", "no:hypothesispytest",
        ]  # fmt: skip
    vf_eval = Path(python).parent / "vf-eval"
    if vf_eval.exists() and versions[0].startswith("0.3"):
        env_args = json.dumps({"path": str(data), "system_prompt": SYSTEM_PROMPT})
        contenders["vf-eval (1 example)"] = [
            str(vf_eval), "file-qa", "-a", env_args, "-m", MODEL_NAME, "--api-base-url",
            base_url, "--api-key-var", "BENCH_NO_API_KEY", "-n", "1", "-r", "1",
            "--disable-tui", "--max-tokens", "16", "--temperature", "0",
            "-o", str(project / "vf-eval-out"),
        ]  # fmt: skip
    env = bench_env()
    env.pop("PYTHONPATH", None)  # the install's own code, not this checkout's
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.dont_write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    log(f"{name}: verifiers {versions[0]}, pytest {versions[1]}: a warm-up round, then "
        f"{args.one_repeats}")  # fmt: skip
    walls: dict[str, list[float]] = {c: [] for c in contenders}
    cpus: dict[str, list[float]] = {c: [] for c in contenders}
    for round_number in range(args.one_repeats + 1):
        for contender, command in contenders.items():
            wall, cpu = _timed(command, project, env)
            if round_number:  # the first round fills the byte-code and rewrite caches
                walls[contender].append(wall)
                cpus[contender].append(cpu)
    base_wall, base_cpu = median(walls["pytest --version"]), median(cpus["pytest --version"])
    ours = median(walls["pytest-modal-eval (1 example)"])
    rows = []
    for contender in contenders:
        wall, cpu = median(walls[contender]), median(cpus[contender])
        rows.append(
            [contender, f"{wall:.2f}", f"{cpu:.2f}", f"{wall / base_wall:.1f}x",
             f"{cpu / base_cpu:.1f}x"]
        )  # fmt: skip
    print(
        f"{name}: verifiers {versions[0]}; PYTHONDONTWRITEBYTECODE "
        f"{'set' if args.dont_write_bytecode else 'unset'}; medians of {args.one_repeats}\n"
    )
    print_table(["command", "wall s", "CPU s", "wall / pytest --version", "CPU / same"], rows)
    checks = [["pytest-modal-eval <= 2 s wall (quiet machine)", f"{ours:.2f}", verdict(ours <= 2)]]
    if hypothesis:
        alone = median(walls["the same, -p no:hypothesispytest"])
        checks.append(["the same without hypothesis's plugin", f"{alone:.2f}", verdict(alone <= 2)])
    if "vf-eval (1 example)" in walls:
        theirs = median(walls["vf-eval (1 example)"])
        checks.append(["pytest-modal-eval < vf-eval", f"{ours:.2f} vs {theirs:.2f}",
                       verdict(ours < theirs)])  # fmt: skip
    print_table(["target", "measured", "verdict"], checks)


def _timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system, the process and its children) seconds of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{command[:4]} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _build_plain(venv: Path) -> Path:
    """A fresh venv with ``pip install`` of this repository (from the registry otherwise)."""
    log(f"building a plain install in {venv} (pip; a few minutes)")
    subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(REPO)],
        check=True, env=env,
    )  # fmt: skip
    return venv


def collection(args: argparse.Namespace) -> None:
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
            name: [] for name in ["evals", "evals-full", "empty", "plain-evals", "plain-empty",
                                  *variants]
        }  # fmt: skip
        plain_python = str(args.plain_venv / "bin" / "python") if args.plain_venv else None
        log(f"{args.repeats} rounds")
        for round_ in range(args.repeats):
            quick = ["--eval-collect-quick"]
            times["evals"].append(_collect(evals, quick, expect=args.benchmarks))
            if round_ % 5 == 0:
                times["evals-full"].append(_collect(evals, [], expect=args.benchmarks))
            times["empty"].append(_collect(empty, []))
            if plain_python is not None:
                times["plain-evals"].append(
                    _collect(evals, quick, expect=args.benchmarks, python=plain_python)
                )
                times["plain-empty"].append(_collect(empty, [], python=plain_python))
            for name, extra in variants.items():
                times[name].append(_collect(plain, extra, expect=200))

    m = {name: median(values) * 1000 for name, values in times.items() if values}
    print(f"median of {args.repeats} runs of `pytest --co -q` (whole command, ms)\n")
    rows = [
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
    ]
    if "plain-evals" in m:
        rows += [
            ["plain install: empty project", f"{m['plain-empty']:.0f}", "", ""],
            [
                f"plain install: {args.benchmarks} benchmark YAMLs (--eval-collect-quick)",
                f"{m['plain-evals']:.0f}",
                "< 1000",
                verdict(m["plain-evals"] < 1000),
            ],
        ]
    print_table(["project", "ms", "target", "verdict"], rows)
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


def _collect(
    project: Path, extra: list[str], expect: int | None = None, python: str = PYTHON
) -> float:
    env = bench_env()
    if python != PYTHON:  # another install: its own code, not this checkout's
        env.pop("PYTHONPATH", None)
    started = time.perf_counter()
    result = subprocess.run(
        [python, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *extra],
        cwd=project,
        env=env,
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

"""Start-up of a verifiers v1 environment with a tool server: one example of the bundled
``lookup-qa``, the whole process, against an instant local endpoint that plays a model calling
the lookup tool, then answering (``tests/support/openai_server.py``, ``call_tools``).

In an install with verifiers 0.4 (a plain ``pip install`` of the repository into a fresh venv:
``--plain-venv DIR`` reuses one, ``--build-plain`` makes one), contenders interleaved, medians of
``--repeats`` rounds after a warm-up round, wall and CPU (user + system) seconds:

- ``import verifiers.v1``: the framework's import alone;
- the same, then ``lookup-qa``'s tool server started and stopped as verifiers starts a
  taskset's shared tool servers (``verifiers.v1.mcp.serve_shared``: a process of its own,
  which imports ``verifiers.v1`` again, then answers MCP);
- ``pytest evals --model M --base-url URL`` (the plugin, one example);
- ``vf-eval`` on the same taskset, example and endpoint (verifiers' own evaluation);
- the plugin on one example of ``file-qa`` played through verifiers v1 (its ``env_args`` name
  the taskset's ``task``, so the plugin does not play it natively): a v1 environment without
  a tool server.

Targets: a v1 environment without a tool server <= the framework's import + 1 s; with one, the
plugin's own time (its run less the framework's import and tool server) <= 1 s; the plugin
below ``vf-eval``. PYTHONDONTWRITEBYTECODE is unset, as a shell has it.

Run: ``.venv/bin/python -m benchmarks.startup_v1 --build-plain`` (the venv's installation
takes about 2 minutes; the rounds about 3).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks._common import (
    MODEL_NAME,
    SYSTEM_PROMPT,
    bench_env,
    configure_server,
    demo_rows,
    fake_server,
    header,
    log,
    median,
    print_table,
    verdict,
)
from benchmarks.startup import _build_plain, _timed

#: The framework's import, then the taskset's tool server up and down, as a run starts it.
TOOL_SERVER = """
import asyncio, sys
from verifiers.v1.mcp import serve_shared
from pytest_modal_eval.envs.lookup_qa_v1 import LookupTaskset, LookupTasksetConfig

async def main():
    toolsets = LookupTaskset.toolsets(LookupTasksetConfig(path=sys.argv[1]))
    async with serve_shared(toolsets):
        pass

asyncio.run(main())
"""

#: ``vf-eval`` finds a taskset by id as an importable module exporting it.
SHIM = """from pytest_modal_eval.envs.lookup_qa_v1 import LookupTaskset

__all__ = ["LookupTaskset"]
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--plain-venv", type=Path, help="a venv with `pip install .` in it")
    parser.add_argument("--build-plain", action="store_true", help="make that venv here")
    args = parser.parse_args()
    header("start-up: one example of lookup-qa (verifiers v1, a tool server), the whole process")
    with tempfile.TemporaryDirectory(prefix="bench-v1-") as tmp:
        root = Path(tmp)
        venv = _build_plain(root / "plain-venv") if args.build_plain else args.plain_venv
        if venv is None:
            parser.error("give --plain-venv DIR (a venv with verifiers 0.4) or --build-plain")
        with fake_server() as url:
            configure_server(url, call_tools=True)
            _rounds(str(venv / "bin" / "python"), root, f"{url}/v1", args.repeats)
    return 0


def _rounds(python: str, root: Path, base_url: str, repeats: int) -> None:
    project = root / "project"
    (project / "evals" / "data").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    data = project / "evals" / "data" / "kv.jsonl"
    data.write_text(json.dumps({"key": "k0", "value": "v0"}) + "\n", encoding="utf-8")
    (project / "evals" / "kv.yaml").write_text(
        "env_id: lookup-qa\nenv_args:\n  path: data/kv.jsonl\ngate: {min_avg_reward: 0.0}\n",
        encoding="utf-8",
    )
    no_tools = root / "no-tools"
    (no_tools / "evals").mkdir(parents=True)
    (no_tools / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (no_tools / "evals" / "one.jsonl").write_text(json.dumps(demo_rows()[0]) + "\n")
    (no_tools / "evals" / "fq.yaml").write_text(
        "env_id: file-qa\nenv_args:\n  path: one.jsonl\n"
        f"  system_prompt: {json.dumps(SYSTEM_PROMPT)}\n  task: {{}}\n"
        "gate: {min_avg_reward: 0.0}\n",
        encoding="utf-8",
    )
    shim = root / "shim"
    shim.mkdir()
    (shim / "lookup_qa.py").write_text(SHIM, encoding="utf-8")
    (shim / "eval.toml").write_text(
        f'[env.taskset]\nid = "lookup-qa"\npath = {json.dumps(str(data))}\n', encoding="utf-8"
    )
    env = bench_env()
    env.pop("PYTHONPATH", None)  # the install's own code, not this checkout's
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    vf_env = {**env, "PYTHONPATH": str(shim), "BENCH_NO_API_KEY": "none"}
    plugin = [
        python, "-m", "pytest", "evals", "--model", MODEL_NAME, "--base-url", base_url, "-q",
        "--eval-fresh", "-p", "no:cacheprovider",
    ]  # fmt: skip
    vf_eval = [
        str(Path(python).parent / "vf-eval"), "@", str(shim / "eval.toml"), "-m", MODEL_NAME,
        "--client.base-url", base_url, "--client.api-key-var", "BENCH_NO_API_KEY",
        "--no-push", "--no-rich", "-o", str(root / "vf-eval-out"),
        "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
    ]  # fmt: skip
    contenders: dict[str, tuple[list[str], dict[str, str], Path]] = {
        "import verifiers.v1": ([python, "-c", "import verifiers.v1"], env, project),
        "the same + lookup-qa's tool server": (
            [python, "-c", TOOL_SERVER, str(data)],
            env,
            project,
        ),
        "pytest-modal-eval (1 example)": (plugin, env, project),
        "vf-eval (1 example)": (vf_eval, vf_env, project),
        "pytest-modal-eval, file-qa via v1 (no tool server)": (plugin, env, no_tools),
    }
    log(f"a warm-up round, then {repeats}")
    walls: dict[str, list[float]] = {name: [] for name in contenders}
    cpus: dict[str, list[float]] = {name: [] for name in contenders}
    for round_number in range(repeats + 1):
        for name, (command, command_env, cwd) in contenders.items():
            wall, cpu = _timed(command, cwd, command_env)
            if round_number:
                walls[name].append(wall)
                cpus[name].append(cpu)
    wall = {name: median(values) for name, values in walls.items()}
    print(f"medians of {repeats} rounds\n")
    print_table(
        ["command", "wall s", "CPU s", "rounds (wall s)"],
        [
            [name, f"{wall[name]:.2f}", f"{median(cpus[name]):.2f}",
             " ".join(f"{w:.1f}" for w in walls[name])]
            for name in contenders
        ],
    )  # fmt: skip
    ours = wall["pytest-modal-eval (1 example)"]
    framework = wall["the same + lookup-qa's tool server"]
    theirs = wall["vf-eval (1 example)"]
    imported = wall["import verifiers.v1"]
    no_tools = wall["pytest-modal-eval, file-qa via v1 (no tool server)"]
    print_table(
        ["target", "measured", "verdict"],
        [
            ["no tool server: plugin <= framework import + 1 s",
             f"{no_tools:.2f} vs {imported:.2f}", verdict(no_tools <= imported + 1)],
            ["lookup-qa: plugin <= framework import + 1 s", f"{ours:.2f} vs {imported:.2f}",
             verdict(ours <= imported + 1)],
            ["lookup-qa: plugin less import and tool server <= 1 s", f"{ours - framework:.2f}",
             verdict(ours - framework <= 1)],
            ["plugin < vf-eval", f"{ours:.2f} vs {theirs:.2f}", verdict(ours < theirs)],
        ],
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())

"""How long ``pytest-modal-eval runs`` takes over an output directory of many runs.

Writes N run directories (default 1,000) shaped like the plugin's — run_config.json,
checkpoint_meta.json, and for finished runs metadata.json, plus checkpoint.jsonl and
results.jsonl of --records records each, which listing must not read — then times
``list_runs`` in this process and the whole command in a fresh interpreter (start-up
included), best of --repeat.

    python -m benchmarks.cli_runs [--runs 1000] [--records 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pytest_modal_eval.runs.locate import list_runs


def make_runs(root: Path, count: int, records: int) -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    record = json.dumps(
        {
            "example_id": 0,
            "rollout": 0,
            "prompt": [{"role": "user", "content": "What is 12 + 5?" * 20}],
            "completion": [{"role": "assistant", "content": "\\boxed{17}" * 20}],
            "answer": "17",
            "reward": 1.0,
        }
    )
    for number in range(count):
        when = started + timedelta(minutes=number)
        run_id = f"{when:%Y%m%d-%H%M%S}-{number:08x}"
        run = root / f"bench{number % 7}--org--model{number % 3}" / run_id
        run.mkdir(parents=True)
        total = 500
        config = {
            "run_id": run_id,
            "model_id": f"org/model{number % 3}",
            "benchmark": f"bench{number % 7}",
            "env_id": "file-qa",
            "started_at": when.isoformat(),
            "num_examples": total,
            "config": {
                "infra": {},
                "vllm": {},
                "eval": {},
                "gate": {},
                "env_args": {"path": "x" * 500},
            },
            "versions": {"python": "3.12"},
        }
        (run / "run_config.json").write_text(json.dumps(config, indent=2))
        done = total if number % 3 else total // 2
        (run / "checkpoint_meta.json").write_text(
            json.dumps(
                {
                    "run_id": run_id,
                    "completed_example_ids": list(range(done)),
                    "total_examples": total,
                    "start_time": when.isoformat(),
                    "last_checkpoint_time": (when + timedelta(minutes=5)).isoformat(),
                }
            )
        )
        lines = "".join(record + "\n" for _ in range(records))
        (run / "checkpoint.jsonl").write_text(lines)
        if number % 3:
            (run / "results.jsonl").write_text(lines)
            (run / "metadata.json").write_text(
                json.dumps(
                    {
                        "benchmark": f"bench{number % 7}",
                        "num_examples": total,
                        "n_evaluated": total,
                        "avg_reward": 0.5,
                        "stderr": 0.02,
                        "ci": [0.46, 0.54],
                        "errors": 0,
                        "errored_example_ids": [],
                        "time_ms": 300000.0,
                    },
                    indent=2,
                )
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "evals"
        make_runs(root, args.runs, args.records)
        in_process, command = [], []
        for _ in range(args.repeat):
            began = time.perf_counter()
            listed = list_runs(root)
            in_process.append(time.perf_counter() - began)
            began = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest_modal_eval",
                    "runs",
                    "--json",
                    "--eval-output-dir",
                    str(root),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            command.append(time.perf_counter() - began)
        assert len(listed) == args.runs
        print(
            f"{args.runs} runs: list_runs {min(in_process):.3f} s; "
            f"`pytest-modal-eval runs --json` {min(command):.3f} s with interpreter start-up "
            f"(best of {args.repeat})"
        )


if __name__ == "__main__":
    main()

"""The HTML report at 100,000 examples: how long it takes to write and to open.

A run directory of ``--examples`` single-rollout examples (prompts and completions of the
length a chat model answers an arithmetic question with, one in 50 completions of 5,000
characters, one in 100 examples errored, one in 5 missed) is written the way a run writes it,
then :func:`pytest_modal_eval.report.html.write_report` builds the page, and Chromium opens it
from disk (``file://``). Printed: the time to write, the file size, the time from navigation
to the first page of rows, the time the "missed" filter and a search take, and the rows they
leave. Target: written in seconds, open in under 3 s.

Run: ``.venv/bin/python -m benchmarks.report_size`` (needs Debian's ``chromium`` and
Playwright, as the browser tests do; about half a minute).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_modal_eval.report.html import write_report

CHROMIUM = "/usr/bin/chromium"


def make_run(run_dir: Path, examples: int) -> None:
    rng = random.Random(0)
    run_dir.mkdir(parents=True)
    rewards: list[float] = []
    errored: list[int] = []
    with (run_dir / "results.jsonl").open("w", encoding="utf-8") as out:
        for i in range(examples):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            solved = rng.random() < 0.8
            failed = i % 100 == 7
            error = {"error": "ModelError", "error_chain_str": "HTTP 500"} if failed else None
            answer = a + b if solved else a + b + 1
            text = f"{a} plus {b}: add the tens, then the units. The answer is \\boxed{{{answer}}}."
            if i % 50 == 3:
                text += " Let me check again." * 250
            record: dict[str, Any] = {
                "example_id": i, "rollout": 0, "task": "default", "answer": str(a + b),
                "prompt": [{"role": "system", "content": "Put the final answer in \\boxed{}."},
                           {"role": "user", "content": f"What is {a} + {b}?"}],
                "completion": [{"role": "assistant", "content": text}],
                "reward": 0.0 if error or not solved else 1.0, "error": error, "info": {},
                "generation_ms": 120.0, "scoring_ms": 0.1, "total_ms": 121.0,
            }  # fmt: skip
            out.write(json.dumps(record) + "\n")
            if error:
                errored.append(i)
            else:
                rewards.append(float(record["reward"]))
    mean = sum(rewards) / len(rewards)
    metadata = {
        "env_id": "file-qa", "benchmark": "arithmetic", "model": "org/model",
        "run_id": run_dir.name,
        "num_examples": examples, "rollouts_per_example": 1, "time_ms": 1000.0 * examples / 40,
        "avg_reward": mean, "stderr": 0.001, "ci": [mean - 0.002, mean + 0.002], "ci_level": 0.95,
        "ci_method": "wilson", "n_evaluated": len(rewards), "errors": len(errored),
        "errored_example_ids": errored, "truncated_rollouts": 0, "avg_metrics": {},
    }  # fmt: skip
    (run_dir / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=100_000)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "arithmetic--org--model" / "20261127-000000-00000000"
        make_run(run_dir, args.examples)
        page_path = Path(tmp) / "report.html"
        started = time.perf_counter()
        write_report(page_path, [(run_dir, None)])
        written = time.perf_counter() - started
        print(f"examples: {args.examples}")
        print(f"written in {written:.2f} s, {page_path.stat().st_size / 1e6:.1f} MB")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            started = time.perf_counter()
            page.goto(page_path.as_uri())
            page.wait_for_selector("details.examples tbody tr.row")
            print(f"opened (first rows shown) in {time.perf_counter() - started:.2f} s")
            actions: list[tuple[str, Callable[[], None]]] = [
                ("missed filter", lambda: page.click("[data-filter=missed]")),
                ("search '55'", lambda: page.fill("input[type=search]", "55")),
            ]
            for label, action in actions:
                before = page.inner_text("details.examples .count")
                started = time.perf_counter()
                action()
                page.wait_for_function(
                    "before => document.querySelector('details.examples .count').textContent"
                    " !== before",
                    arg=before,
                )
                count = page.inner_text("details.examples .count")
                print(f"{label}: {time.perf_counter() - started:.2f} s -> {count}")
            browser.close()


if __name__ == "__main__":
    main()

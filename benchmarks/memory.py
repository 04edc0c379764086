"""Memory: peak RSS of one plugin run over 100,000 examples, and how RSS grows along the way.

The run is ``pytest evals --model ... --base-url ...`` over a file-qa benchmark of
``--examples`` distinct arithmetic questions, against ``tests/support/openai_server.py`` (a fast
deterministic endpoint), so the harness, not a model, is what is measured. RSS is sampled from
/proc every 0.25 s; the peak is the process's own ``ru_maxrss``. A baseline row shows what
merely importing the evaluation stack costs (pytest, verifiers, datasets, openai).

Target: peak RSS < 300 MB at 100,000 examples. With ``--baseline`` two more runs of the same
examples follow: one recording a baseline (``--snapshot-update``) and one compared with it.

Run: ``.venv/bin/python -m benchmarks.memory`` (about 4 minutes a run; ``--examples 20000`` for
a quick look).
"""

from __future__ import annotations

import argparse
import bisect
import subprocess
import tempfile
from pathlib import Path

from benchmarks._common import (
    PYTHON,
    Run,
    fake_server,
    header,
    log,
    make_project,
    print_table,
    run_plugin,
    verdict,
    write_arithmetic,
)

TARGET_MB = 300.0

_IMPORTS = """
import resource
import pytest, datasets, verifiers as vf, openai
from verifiers.clients import OpenAIChatCompletionsClient
import pytest_modal_eval.collect.item_run
from pytest_modal_eval.envs import file_qa
vf.SingleTurnEnv
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument(
        "--baseline", action="store_true", help="also record a baseline, then compare with it"
    )
    args = parser.parse_args()
    header(f"memory: peak RSS of a plugin run over {args.examples:,} examples")

    imports_mb = float(
        subprocess.run([PYTHON, "-c", _IMPORTS], capture_output=True, text=True, check=True).stdout
    )
    extra: list[tuple[str, Run]] = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp, fake_server() as url:
        root = Path(tmp)
        data = write_arithmetic(root / "data.jsonl", args.examples)
        project = make_project(root / "project", data, max_tokens=16)
        log(f"running {args.examples:,} examples")
        run = _run(project, url, args.examples)
        if args.baseline:
            log("again, recording a baseline (--snapshot-update)")
            extra.append(
                ("recording a baseline", _run(project, url, args.examples, "--snapshot-update"))
            )
            log("again, compared with the stored baseline")
            extra.append(("compared with the stored baseline", _run(project, url, args.examples)))

    rows = [["imports only (pytest, verifiers, datasets, openai)", f"{imports_mb:.0f}", ""]]
    if run.times:
        for share in (0.0, 0.25, 0.5, 0.75, 1.0):
            done = max(1, round(share * len(run.times)))
            at = run.times[done - 1]
            rows.append([f"RSS after {done:,} examples", f"{_rss_at(run.rss, at):.0f}", ""])
    rows.append(["RSS at the last sample (results written)", f"{run.rss[-1][1]:.0f}", ""])
    rows.append(
        ["peak RSS (ru_maxrss)", f"{run.peak_rss_mb:.0f}", verdict(run.peak_rss_mb < TARGET_MB)]
    )
    for what, other in extra:
        rows.append(
            [
                f"peak RSS, {what}",
                f"{other.peak_rss_mb:.0f}",
                verdict(other.peak_rss_mb < TARGET_MB),
            ]
        )
    print(f"{len(run.times):,} examples in {run.wall_s:.0f} s ({run.rps:.0f} examples/s)\n")
    print_table(["", "MB", f"target < {TARGET_MB:.0f} MB"], rows)
    if len(run.times) > 1:
        first, last = run.times[len(run.times) // 10], run.times[-1]
        growth = (_rss_at(run.rss, last) - _rss_at(run.rss, first)) / (len(run.times) * 0.9)
        print(f"growth from 10% to 100% of the examples: {growth * 1024:.2f} kB per example\n")
    return 0


def _run(project: Path, url: str, examples: int, *args: str) -> Run:
    """One fresh run of every example; warns when it did not report them all."""
    run = run_plugin(project, url, args=args, timeout=1800)
    if len(run.times) != examples:
        log(f"warning: {len(run.times)} examples reported, exit code {run.returncode}")
    return run


def _rss_at(samples: list[tuple[float, float]], moment: float) -> float:
    """The last RSS sample taken at or before ``moment``."""
    index = bisect.bisect_right([t for t, _ in samples], moment) - 1
    return samples[max(0, index)][1]


if __name__ == "__main__":
    raise SystemExit(main())

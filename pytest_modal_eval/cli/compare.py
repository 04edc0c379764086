"""``pytest-modal-eval compare RUN_A RUN_B``: two stored runs of one benchmark, compared.

The same paired comparison as a baseline or a reference model gets in a session
(:func:`~pytest_modal_eval.stats.summary.compare_paired`), over the examples both runs
finished, without evaluating anything. RUN_A is the reference; the exit status is 1 when RUN_B
is significantly worse by more than ``--max-drop``, 0 otherwise, 2 when the runs cannot be
compared.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from pytest_modal_eval.cli.common import FIND_RUNS, require_dir
from pytest_modal_eval.runs.resume import comparable_fields

EXIT_DROP = 1
EXIT_UNUSABLE = 2


class CompareError(click.ClickException):
    """Runs that cannot be compared; exit status 2 (1 means a significant drop)."""

    exit_code = EXIT_UNUSABLE


@click.command("compare")
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the comparison as JSON")
@click.option(
    "--max-drop",
    type=click.FloatRange(min=0.0),
    default=0.0,
    show_default=True,
    help="tolerated drop in mean reward of RUN_B below RUN_A",
)
@click.option(
    "--alpha",
    type=click.FloatRange(min=0.0, max=1.0, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="significance level of the one-sided paired test",
)
def compare(run_a: Path, run_b: Path, as_json: bool, max_drop: float, alpha: float) -> None:
    """Compare RUN_B with RUN_A (run directories of one benchmark) on the examples both
    finished: difference in mean reward with its 95% CI, the one-sided p-value of the paired
    test (exact McNemar for one 0/1 rollout per example, a paired t-test over per-example means
    otherwise), the examples that flipped each way, and the smallest drop the test detects
    with 80% power. Exit status 1 when RUN_B is significantly worse by more than --max-drop."""
    from pytest_modal_eval.judge.gate import undetectable_warning
    from pytest_modal_eval.report.format import describe_comparison
    from pytest_modal_eval.stats.summary import compare_paired

    for path in (run_a, run_b):
        require_dir(path, "a finished run's directory", CompareError)
    a, b = StoredRun.read(run_a), StoredRun.read(run_b)
    if a.benchmark != b.benchmark:
        raise CompareError(
            f"{run_a} is a run of benchmark {a.benchmark!r}, {run_b} of {b.benchmark!r}: "
            "compare runs of one benchmark"
        )
    differences = a.differences(b)
    try:
        c = compare_paired(
            a.means,
            b.means,
            baseline_binary_single=a.binary_single,
            run_binary_single=b.binary_single,
            alpha=alpha,
            max_drop=max_drop,
        )
    except ValueError as exc:
        raise CompareError(str(exc)) from None
    warning = undetectable_warning(c, "--max-drop")
    if as_json:
        document: dict[str, Any] = {
            "benchmark": a.benchmark,
            "run_a": {"path": str(run_a), "model": a.model, "examples": len(a.means)},
            "run_b": {"path": str(run_b), "model": b.model, "examples": len(b.means)},
            "configuration_differs_in": differences,
            "comparison": c.to_dict(),
            "warnings": [warning] if warning else [],
        }
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(f"{a.benchmark}: {b.model} ({run_b.name}) vs {a.model} ({run_a.name})")
        for line in describe_comparison(c, "A", "B"):
            click.echo(f"  {line}")
        if differences:
            click.echo(f"  note: the runs' configurations differ in: {', '.join(differences)}")
        if warning:
            click.echo(f"  WARNING: {warning}")
        click.echo(f"  {'FAIL: significant drop' if c.regressed else 'OK: no significant drop'}")
    if c.regressed:
        raise SystemExit(EXIT_DROP)


class StoredRun:
    """A finished run's per-example mean rewards, from its ``results.jsonl``."""

    def __init__(self, path: Path, meta: dict[str, Any], answer_fields: dict[str, Any]) -> None:
        self.path, self.meta, self.answer_fields = path, meta, answer_fields
        self.means: dict[str, float] = {}
        self.binary_single = False

    @property
    def benchmark(self) -> str:
        return str(self.meta.get("benchmark"))

    @property
    def model(self) -> str:
        return str(self.meta.get("model"))

    @classmethod
    def read(cls, path: Path) -> StoredRun:
        meta = _json(path / "metadata.json")
        config = _json(path / "run_config.json") if (path / "run_config.json").exists() else {}
        run = cls(path, meta, dict(config.get("answer_fields") or {}))
        rollouts = int(meta.get("rollouts_per_example") or 1)
        rewards: dict[str, list[float]] = defaultdict(list)
        results = path / "results.jsonl"
        try:
            lines = results.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise CompareError(f"{results}: cannot read: {exc}") from None
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
                if not record.get("error"):
                    rewards[str(record["example_id"])].append(float(record["reward"]))
            except (ValueError, KeyError, TypeError):
                raise CompareError(f"{results}:{number}: not a rollout record") from None
        # Only examples with every rollout finished, as the run's own summary counts them.
        run.means = {i: sum(r) / len(r) for i, r in rewards.items() if len(r) == rollouts}
        if not run.means:
            raise CompareError(f"{path}: no finished example in {results.name}")
        run.binary_single = rollouts == 1 and all(v in (0.0, 1.0) for v in run.means.values())
        return run

    def differences(self, other: StoredRun) -> list[str]:
        """Answer-changing settings that differ, other than the model's identity."""
        mine, theirs = comparable_fields(self.answer_fields), comparable_fields(other.answer_fields)
        return sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CompareError(
            f"{path.parent} is not a finished run's directory (no {path.name}); {FIND_RUNS}"
        ) from None
    except (OSError, ValueError) as exc:
        raise CompareError(f"{path}: unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise CompareError(f"{path}: not a JSON object")
    return data

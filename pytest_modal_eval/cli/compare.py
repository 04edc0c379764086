"""``pytest-modal-eval compare RUN_A RUN_B``: two stored runs of one benchmark, compared.

The same paired comparison as a baseline or a reference model gets in a session
(:func:`~pytest_modal_eval.stats.summary.compare_paired`), over the examples both runs
finished, without evaluating anything. RUN_A is the reference; the exit status is 1 when RUN_B
is significantly worse by more than ``--max-drop``, 0 otherwise, 2 when the runs cannot be
compared.

A run of an environment with several seats (a two-player game) has one record per seat per
rollout: one seat is compared, ``--seat`` or RUN_A's headline seat, its examples paired by id
and its rollouts by index (pairing across seats would average a game's opposite payoffs).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from pytest_modal_eval.cli.common import echo_json, output_dir_option, resolve_output_dir, say
from pytest_modal_eval.cli.remote import (
    RemoteRuns,
    find_run_here_or_remote,
    remote_option,
    volume_option,
)
from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.runs.answer_key import comparable_fields
from pytest_modal_eval.runs.locate import FIND_RUNS, RunNotFound
from pytest_modal_eval.runs.paths import RunPaths

EXIT_DROP = 1
EXIT_UNUSABLE = 2


class CompareError(click.ClickException):
    """Runs that cannot be compared; exit status 2 (1 means a significant drop)."""

    exit_code = EXIT_UNUSABLE


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
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
    type=click.FloatRange(min=0.0, max=0.5, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="significance level of the one-sided paired test (below 0.5); the interval is "
    "two-sided at 1 - 2 alpha",
)
@click.option(
    "--seat",
    metavar="SEAT",
    default=None,
    help="runs of an environment with several seats: the seat compared (default: RUN_A's "
    "headline seat, agent.seat)",
)
@output_dir_option
@remote_option
@volume_option
def compare(
    run_a: str,
    run_b: str,
    as_json: bool,
    max_drop: float,
    alpha: float,
    seat: str | None,
    output_dir: str | None,
    remote: bool,
    volume: str | None,
) -> None:
    """Compare RUN_B with RUN_A (runs of one benchmark: run ids or directories) on the examples
    both finished: difference in mean reward with its interval (two-sided at 1 - 2 alpha, so that
    it lies below -max-drop exactly when the drop is significantly larger than --max-drop), the
    one-sided p-value of the paired test against that drop (exact McNemar for one 0/1 rollout
    per example, a paired t-test over per-example means otherwise), the examples that flipped
    each way, and the smallest drop the test detects with 80% power. Exit status 1 when RUN_B
    is significantly worse by more than --max-drop."""
    from pytest_modal_eval.gate.verdict import reference_figures, undetectable_warning
    from pytest_modal_eval.stats.format import describe_comparison
    from pytest_modal_eval.stats.summary import compare_paired

    try:
        output = resolve_output_dir(output_dir)
        where = RemoteRuns(volume) if remote else None
        a = StoredRun.read(find_run_here_or_remote(run_a, output, where), seat)
        b = StoredRun.read(find_run_here_or_remote(run_b, output, where), a.seat)
    except (RunFileError, RunNotFound) as exc:
        raise CompareError(str(exc)) from None
    if a.benchmark != b.benchmark:
        raise CompareError(
            f"{a.path} is a run of benchmark {a.benchmark!r}, {b.path} of {b.benchmark!r}: "
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
    # Only a tolerance the user chose can be "below what the test detects"; the figure itself
    # is printed either way.
    source = click.get_current_context().get_parameter_source("max_drop")
    given = source is not None and source is not click.core.ParameterSource.DEFAULT
    warning = undetectable_warning(c, "--max-drop") if given else None
    if as_json:
        # RUN_A is the reference, RUN_B the run: the names of metadata.json's vs_reference.
        document: dict[str, Any] = {
            "benchmark": a.benchmark,
            "reference": a.to_json(),
            "run": b.to_json(),
            "seat": a.seat,
            "configuration_differs_in": differences,
            "comparison": reference_figures(c),
            "warnings": [warning] if warning else [],
        }
        echo_json(document)
    else:
        subject = f"{a.benchmark}[{a.seat}]" if a.seat else a.benchmark
        # The words of --json and of a session's summary: RUN_A is the reference.
        say(f"{subject}: {b.model} (run {b.path.name}) vs {a.model} (reference, run {a.path.name})")
        for line in describe_comparison(c, "reference", "run"):
            say(f"  {line}")
        if differences:
            say(f"  note: the runs' configurations differ in: {', '.join(differences)}")
        if warning:
            say(f"  WARNING: {warning}")
        click.echo(f"  {'FAIL: significant drop' if c.regressed else 'OK: no significant drop'}")
    if c.regressed:
        raise SystemExit(EXIT_DROP)


class StoredRun:
    """A finished run's per-example mean rewards, from its ``results.jsonl``."""

    def __init__(self, path: Path, meta: dict[str, Any], answer_fields: dict[str, Any]) -> None:
        self.path, self.meta, self.answer_fields = path, meta, answer_fields
        self.means: dict[str, float] = {}
        self.binary_single = False
        self.seat: str | None = None  # the seat compared, with several

    @property
    def benchmark(self) -> str:
        return str(self.meta.get("benchmark"))

    @property
    def model(self) -> str:
        return str(self.meta.get("model"))

    def to_json(self) -> dict[str, Any]:
        """The run as ``compare --json`` names it."""
        return {
            "path": str(self.path),
            "run_id": self.meta.get("run_id") or self.path.name,
            "model": self.model,
            "examples": len(self.means),
        }

    @classmethod
    def read(cls, paths: RunPaths, seat: str | None = None) -> StoredRun:
        """A finished run's means, read through the one reader of run files: ``seat``'s (None:
        the headline seat's) when the run has several seats."""
        meta = paths.read_metadata()
        if meta is None:
            raise CompareError(
                f"{paths.dir} is not a finished run (no {paths.metadata.name}: it is written when "
                f"the run ends); run the benchmark again to finish it ({FIND_RUNS})"
            )
        config = paths.read_run_config() or {}
        run = cls(paths.dir, meta, dict(config.get("answer_fields") or {}))
        rollouts = int(meta.get("rollouts_per_example") or 1)
        seats = meta.get("seats") or {}
        if seats:
            run.seat = seat if seat is not None else meta.get("seat")
            if run.seat not in seats:
                raise CompareError(
                    f"{paths.dir} has no seat {run.seat!r}; its seats: {', '.join(seats)} "
                    "(choose one with --seat)"
                )
        elif seat is not None:
            raise CompareError(f"{paths.dir} is a run of one seat: leave out --seat")
        rewards: dict[str, list[float]] = defaultdict(list)
        for record in paths.records():
            if run.seat is not None and record.get("agent") != run.seat:
                continue
            if not record.get("error"):
                rewards[str(record["example_id"])].append(float(record["reward"]))
        # Only examples with every rollout finished, as the run's own summary counts them.
        run.means = {i: sum(r) / len(r) for i, r in rewards.items() if len(r) == rollouts}
        if not run.means:
            raise CompareError(f"{paths.dir}: no finished example in {paths.results.name}")
        run.binary_single = rollouts == 1 and all(v in (0.0, 1.0) for v in run.means.values())
        return run

    def differences(self, other: StoredRun) -> list[str]:
        """Answer-changing settings that differ, other than the model's identity."""
        mine, theirs = comparable_fields(self.answer_fields), comparable_fields(other.answer_fields)
        return sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))

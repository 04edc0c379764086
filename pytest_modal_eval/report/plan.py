"""Each benchmark's plan, as ``pytest --collect-only -v`` prints it before anything runs: its
resolved configuration (the YAML's defaults, the YAML, ``--override``) and the session's
settings (command line and ini), as YAML; how many requests it will send; what its gate fails
on and, from a stored baseline, the smallest drop the gate detects at that many examples.

Nothing here sends a request or starts a server: the figures come from the benchmark's files
and the environment loaded at collection (``collect/precheck.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_modal_eval.config.loader import Benchmark
    from pytest_modal_eval.config.options import Settings
    from pytest_modal_eval.redact import Redactor


def plan_lines(
    benchmark: Benchmark,
    models: Sequence[str],
    settings: Settings,
    example_ids: Sequence[int],
    redactor: Redactor,
    rootdir: Path,
) -> list[str]:
    """The plan of one benchmark evaluated with ``models`` (each one item), over the selected
    ``example_ids`` its environment holds; every line passed through ``redactor``."""
    from pytest_modal_eval.gate.baseline import baseline_file
    from pytest_modal_eval.gate.plan import gate_lines, planned_comparison

    config = benchmark.config
    rollouts = config.eval.rollouts
    n = len(example_ids)
    requests = n * rollouts
    per_model = f" per model ({len(models)} models: {requests * len(models):,} in all)"
    lines = [
        f"plan: {n:,} example{'s' * (n != 1)} x {rollouts} rollout{'s' * (rollouts != 1)} = "
        f"{requests:,} request{'s' * (requests != 1)}"
        f"{per_model if len(models) > 1 else ''} (at least: one per model turn)",
        *(["no --model given: the benchmark's items error (pass --model ORG/NAME)"] * (not models)),
        "gate:",
        *(f"  {line}" for line in gate_lines(config.gate, len(models) > 1)),
    ]
    path = baseline_file(benchmark.path, benchmark.name)
    shown = _shown(path, rootdir)
    planned = planned_comparison(path, shown, example_ids, rollouts, config.gate)
    if planned is None:
        lines.append(f"  baseline: none stored yet ({shown}); record one with --snapshot-update")
    elif isinstance(planned, str):
        lines.append(f"  baseline: {planned}")
    else:
        lines += [f"  {line}" for line in planned.describe(config.gate)]
    given = ", ".join(f"{key}={value}" for key, value in benchmark.overrides)
    lines.append(
        "resolved configuration (defaults < the YAML < --override"
        + (f": {given}):" if given else "):")
    )
    lines += [f"  {line}" for line in _yaml(_benchmark_settings(benchmark))]
    lines.append("session (command line < ini < defaults):")
    lines += [f"  {line}" for line in _yaml(_session_settings(settings, models))]
    return [redactor.text(line) for line in lines]


def _benchmark_settings(benchmark: Benchmark) -> dict[str, Any]:
    """The benchmark's configuration as its runs record it (secret values masked)."""
    from pytest_modal_eval.redact import redacted_config

    return redacted_config(benchmark.config.model_dump(mode="json"))


def _session_settings(settings: Settings, models: Sequence[str]) -> dict[str, Any]:
    """What the session adds to every benchmark: where it is served and written."""
    return {
        "models": list(models),
        "backend": settings.backend,
        "base_url": settings.base_url,
        "api_key_env": settings.api_key_env,  # a variable's name, never its value
        "output_dir": str(settings.output_dir),
        "report": str(settings.report) if settings.report is not None else None,
        "fresh": settings.fresh,
    }


def _yaml(value: dict[str, Any]) -> list[str]:
    import yaml

    text = yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return text.rstrip("\n").splitlines()


def _shown(path: Path, rootdir: Path) -> str:
    try:
        return str(path.relative_to(rootdir))
    except ValueError:
        return str(path)

"""The dataset card (README.md) of a results repository on the Hub.

Its YAML front matter lists one ``configs`` entry per benchmark x model, so the Hub's dataset
viewer and ``datasets.load_dataset(repo, config)`` find each configuration's Parquet file. The
card holds nothing that changes between two pushes of the same runs (no push time), so pushing
again leaves it byte for byte the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

from pytest_modal_eval.stats.format import fmt_any, fmt_interval

SPLIT = "latest"
RESULTS_FILE = "results.parquet"


@dataclass(frozen=True)
class CardEntry:
    """One configuration: the names of its folder and its run's summary and configuration."""

    config_name: str
    metadata: dict[str, Any]
    run_config: dict[str, Any]


_ENV = jinja2.Environment(
    autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True
)
_ENV.filters["cell"] = lambda value: str(value).replace("|", "\\|").replace("\n", " ")
TEMPLATE = _ENV.from_string(Path(__file__).with_name("dataset_card.md.jinja").read_text("utf-8"))


def render_card(repo_id: str, entries: list[CardEntry]) -> str:
    ordered = sorted(entries, key=lambda e: e.config_name)
    front = {
        "configs": [
            {
                "config_name": e.config_name,
                "data_files": [{"split": SPLIT, "path": f"{e.config_name}/{RESULTS_FILE}"}],
            }
            for e in ordered
        ],
        "tags": ["evaluation", "pytest-modal-eval"],
    }
    return TEMPLATE.render(
        front_matter=yaml.safe_dump(front, sort_keys=False, allow_unicode=True),
        entries=[_view(e) for e in ordered],
        repo_id=repo_id,
        split=SPLIT,
        results_file=RESULTS_FILE,
        num=fmt_any,
        ci=_ci,
        sampling=_sampling,
        chat_template=_chat_template,
    )


def _chat_template(provenance: Any) -> str:
    """Which template served a run, from its ``run_config.json`` ``chat_template`` (the
    provenance the server recorded; null when no server of this tool served the run)."""
    if not isinstance(provenance, dict) or not provenance.get("source"):
        return "unknown (an endpoint's own)"
    source = str(provenance["source"])
    if source.startswith("model:"):
        return f"model's own ({source.removeprefix('model:')})"
    if source.startswith("fallback:"):
        return f"fallback {source.removeprefix('fallback:')}"
    if source.startswith("extra_args:"):
        return "given in vllm.extra_args"
    return source


@dataclass(frozen=True)
class _EntryView:
    config_name: str
    metadata: dict[str, Any]
    run_config: dict[str, Any]
    benchmark_path: str
    versions: str


def _view(entry: CardEntry) -> _EntryView:
    run_config = entry.run_config
    versions = run_config.get("versions") or {}
    return _EntryView(
        config_name=entry.config_name,
        metadata=entry.metadata,
        run_config=run_config,
        benchmark_path=_benchmark_path(str(run_config.get("benchmark_file") or "")),
        versions=", ".join(f"{k} {v}" for k, v in sorted(versions.items())),
    )


def _benchmark_path(path: str) -> str:
    """The benchmark file as a path inside its project: from ``evals/`` on when it is there."""
    parts = path.replace("\\", "/").split("/")
    if "evals" in parts:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("evals") :])
    return parts[-1] or "BENCHMARK.yaml"


def _ci(value: Any) -> str:
    """metadata.json's ``ci`` (a list of two ends) as the summary writes an interval."""
    if isinstance(value, list) and len(value) == 2:
        return fmt_interval(*value)
    return "n/a"


def _sampling(value: Any) -> str:
    if not isinstance(value, dict):
        return "-"
    shown = {k: v for k, v in sorted(value.items()) if v is not None and not isinstance(v, dict)}
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "-"

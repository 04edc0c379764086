"""A finished run as it is shared: its summary, configuration, rollouts and reports, with
secrets removed.

The Hub push and MLflow logging read runs only through :func:`load_run`, so both send the same
redacted values.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval.exceptions import ShareError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.runs.paths import METADATA, RUN_CONFIG, RunPaths
from pytest_modal_eval.runs.reader import parse_json


@dataclass(frozen=True)
class SharedRun:
    paths: RunPaths
    metadata: dict[str, Any]  # metadata.json, redacted
    run_config: dict[str, Any]  # run_config.json, redacted
    results_text: str  # results.jsonl, redacted
    reports: dict[str, str]  # file name -> text of the run's HTML reports, redacted

    @property
    def benchmark(self) -> str:
        return str(self.metadata.get("benchmark") or self.run_config.get("benchmark"))

    @property
    def model(self) -> str:
        return str(self.metadata.get("model") or self.run_config.get("model_id"))

    @property
    def run_id(self) -> str:
        return str(self.metadata.get("run_id") or self.paths.run_id)

    @property
    def config_name(self) -> str:
        """One name per benchmark x model: the directory holding its runs,
        ``{benchmark}--{model slug}``."""
        return self.paths.dir.parent.name

    def records(self) -> list[dict[str, Any]]:
        # Lines end at "\n" only: U+2028, U+2029 and U+0085 are text inside a record.
        return [parse_json(line) for line in self.results_text.split("\n") if line.strip()]


def load_run(run_dir: Path, redactor: Redactor) -> SharedRun:
    """Read a finished run; a missing or unreadable file is an error naming it and the fix."""
    paths = RunPaths(Path(run_dir))
    if not paths.is_run():
        raise ShareError(
            f"{paths.dir}: no {RUN_CONFIG}, so this is not a run directory; pass "
            "{output}/{benchmark}--{model}/{run_id} or a directory holding such runs"
        )
    if not paths.finished():
        raise ShareError(
            f"{paths.dir}: no {METADATA}, so the run has not finished; finish it first "
            "(run the benchmark again: it resumes)"
        )
    # Read through the one reader of run files: a damaged file is a RunFileError naming the
    # file, line and field. The results are checked line by line, then shared as written.
    found = {
        METADATA: redactor.json(paths.read_metadata() or {}),
        RUN_CONFIG: redactor.json(paths.read_run_config() or {}),
    }
    for _ in paths.records():
        pass
    results = paths.results.read_text(encoding="utf-8")
    reports = {
        report.name: redactor.text(report.read_text(encoding="utf-8", errors="replace"))
        for report in sorted(paths.dir.glob("*.html"))
    }
    return SharedRun(
        paths=paths,
        metadata=found[METADATA],
        run_config=found[RUN_CONFIG],
        results_text=redactor.text(results),
        reports=reports,
    )


@contextlib.contextmanager
def shared_folder(run: SharedRun) -> Iterator[Path]:
    """A temporary folder with the run's files as shared (the redacted copies):
    ``results.jsonl``, ``metadata.json``, ``run_config.json`` and the HTML reports."""
    with tempfile.TemporaryDirectory(prefix="modal-eval-shared-") as name:
        folder = Path(name)
        (folder / "results.jsonl").write_text(run.results_text, encoding="utf-8")
        for file_name, value in (
            ("metadata.json", run.metadata),
            ("run_config.json", run.run_config),
        ):
            (folder / file_name).write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
        for file_name, text in run.reports.items():
            (folder / file_name).write_text(text, encoding="utf-8")
        yield folder


def latest_per_config(runs: Iterable[SharedRun]) -> dict[str, SharedRun]:
    """Config name -> its newest run (run ids start with their UTC start time)."""
    latest: dict[str, SharedRun] = {}
    for run in sorted(runs, key=lambda r: r.run_id):
        latest[run.config_name] = run
    return dict(sorted(latest.items()))


def results_parquet(run: SharedRun) -> bytes:
    """The rollouts as Parquet, one column per field, rows in results.jsonl order.

    A field whose values share one Arrow type (numbers, strings, lists of messages) keeps it;
    any other (mixed types, empty objects Parquet cannot store) becomes JSON text, so every
    run converts. The same records give the same bytes.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = run.records()
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record))
    columns = {name: _column([record.get(name) for record in records]) for name in names}
    table = pa.table(columns) if columns else pa.table({"example_id": pa.array([], pa.int64())})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _column(values: list[Any]) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        native = pa.array(values)
        if not pa.types.is_null(native.type):
            pq.write_table(pa.table({"probe": native}), io.BytesIO())
            return native
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    return pa.array([None if v is None else _json_text(v) for v in values], pa.string())


def _json_text(value: Any) -> str:
    """``value`` as JSON text Parquet can store: UTF-8 as is, a lone surrogate (which a
    server's JSON can carry and UTF-8 cannot) as a ``\\uXXXX`` escape."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, sort_keys=True)
    return text

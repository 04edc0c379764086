"""Which run a benchmark continues: its runs indexed by answer key, and the choice of one.

The index lives in pytest's cache provider (``config.cache``) under ``modal_eval/runs/...``,
one key per (benchmark item, model), written only by the process that runs that item, so
xdist workers never write the same key. It is written when a run *starts*, so a run killed
with SIGKILL is still found. With ``-p no:cacheprovider`` the output directory is scanned
for a run with the same key instead. ``--cache-clear`` or ``--eval-fresh`` start afresh.

:class:`RunChoice` chooses under the run's lock (:mod:`.writer_lock`): a finished run is found
before any server is asked for; otherwise, once the endpoint (and so the chat template) is
known, the run with the same answer key (:mod:`.answer_key`) or a new one.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_modal_eval.exceptions import RunFileError
from pytest_modal_eval.runs.answer_key import answer_fields, canonical_hash, differing_fields
from pytest_modal_eval.runs.identity import describe_change, describe_weights
from pytest_modal_eval.runs.local_key import local_key
from pytest_modal_eval.runs.locate import runs_in
from pytest_modal_eval.runs.paths import RunPaths, model_run_dir
from pytest_modal_eval.runs.run_files import (
    link_server_logs,
    other_verifiers_api,
    run_config_json,
    verifiers_api,
)
from pytest_modal_eval.runs.store import new_run_id, write_json_atomic
from pytest_modal_eval.runs.writer_lock import RunWriter, WriterSpec, choosing

if TYPE_CHECKING:
    import pytest

    from pytest_modal_eval.runs.request import RunRequest
    from pytest_modal_eval.runs.state import RunState
    from pytest_modal_eval.serving.endpoint import EndpointInfo

CACHE_PREFIX = "modal_eval/runs"


@dataclass(frozen=True)
class PriorRun:
    run_dir: Path
    run_id: str
    fields: dict[str, Any]
    complete: bool


class RunIndex:
    """Lookup and record of runs for one benchmark item and model."""

    def __init__(self, cache: pytest.Cache | None, item_key: str, benchmark_dir: Path) -> None:
        self.cache = cache
        self.key = f"{CACHE_PREFIX}/{item_key}"
        self.benchmark_dir = benchmark_dir  # {output}/{benchmark}--{org}--{model}

    def _entries(self) -> dict[str, dict[str, Any]]:
        value = None if self.cache is None else self.cache.get(self.key, None)
        if not isinstance(value, dict):
            # No cache provider, or no entry under this item's key (the cache was cleared, or
            # the item is named differently now, e.g. `bench--model` once several --model are
            # given): the run directories themselves are the index, so no finished work is lost.
            return self._scan()
        return dict(value.get("runs", {}))

    def _scan(self) -> dict[str, dict[str, Any]]:
        # No cache provider: the run directories themselves are the index.
        found: dict[str, dict[str, Any]] = {}
        for paths in runs_in(self.benchmark_dir):
            config_path = paths.run_config
            try:
                run_config = paths.read_run_config() or {}
            except RunFileError:  # a damaged run is not one to continue
                continue
            found[run_config.get("answer_hash", "")] = {
                "run_dir": str(config_path.parent),
                "run_id": run_config.get("run_id", config_path.parent.name),
                "fields": run_config.get("answer_fields", {}),
                "updated": config_path.stat().st_mtime,
            }
        return found

    def find(self, answer_hash: str) -> PriorRun | None:
        entry = self._entries().get(answer_hash)
        if entry is None or not Path(entry["run_dir"]).is_dir():
            return None
        return _prior(entry)

    def newest_alike(
        self,
        fields: dict[str, Any],
        ignore: frozenset[str],
        same_template: Callable[[Any], bool] | None = None,
    ) -> PriorRun | None:
        """The newest run whose answer fields equal ``fields`` but for those in ``ignore``,
        and whose recorded chat template passes ``same_template`` (when given).

        Two parts of the key may be unknown before a server starts: the chat template, which
        a started server decides (vLLM on Modal reads it from the model it downloads), and the
        weights, when the Hub or the endpoint could not be asked. This finds, without them, the
        run a server started now would continue. Only the newest such run counts: an older one
        may have been made under a template or weights since replaced.
        """
        wanted = _without(fields, ignore)
        found = [
            entry
            for entry in self._entries().values()
            if _without(entry.get("fields", {}), ignore) == wanted
            and (same_template is None or same_template(entry["fields"].get("chat_template")))
            and Path(entry["run_dir"]).is_dir()
        ]
        if not found:
            return None
        entry = max(found, key=lambda entry: entry.get("updated", 0))
        return _prior(entry)

    def newest(self, exclude: str) -> PriorRun | None:
        """The most recently updated run but the one keyed ``exclude``."""
        candidates = [
            entry
            for h, entry in self._entries().items()
            if h != exclude and Path(entry["run_dir"]).is_dir()
        ]
        if not candidates:
            return None
        return _prior(max(candidates, key=lambda entry: entry.get("updated", 0)))

    def latest_incomplete(self, exclude: str) -> PriorRun | None:
        candidates = [
            (entry.get("updated", 0), h, entry)
            for h, entry in self._entries().items()
            if h != exclude
            and Path(entry["run_dir"]).is_dir()
            and not RunPaths(Path(entry["run_dir"])).complete()
        ]
        if not candidates:
            return None
        _, _, entry = max(candidates, key=lambda c: c[0])
        return PriorRun(Path(entry["run_dir"]), entry["run_id"], entry["fields"], False)

    def record(self, answer_hash: str, run: PriorRun, updated: float) -> None:
        if self.cache is None:
            return
        entries = self._entries()
        entries[answer_hash] = {
            "run_dir": str(run.run_dir),
            "run_id": run.run_id,
            "fields": run.fields,
            "updated": updated,
        }
        self.cache.set(self.key, {"runs": entries})


def _without(fields: dict[str, Any], ignore: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if key not in ignore}


def _prior(entry: dict[str, Any]) -> PriorRun:
    run_dir = Path(entry["run_dir"])
    return PriorRun(run_dir, entry["run_id"], entry["fields"], RunPaths(run_dir).complete())


@dataclass
class ChosenRun:
    """The run an evaluation writes to: its directory, answer key and what it has finished,
    with a line for the user when the choice needs saying."""

    run_id: str
    run_dir: Path
    fields: dict[str, Any]
    answer_hash: str
    state: RunState
    new_run_note: str | None = None
    serving_note: str | None = None


class RunChoice:
    """Which run one evaluation of a benchmark item continues, or that it starts a new one.

    Made before any server is asked for: :meth:`finished` finds a run that has every selected
    example already, which then needs no endpoint; otherwise :meth:`choose` picks the run once
    the endpoint is known. The run's lock (:attr:`writer`) is held from when its run is found
    until :meth:`close`.
    """

    def __init__(
        self,
        request: RunRequest,
        selected_ids: Sequence[int],
        *,
        rollouts: int,
        sampling: dict[str, Any],
        dataset: str,
        read_state: Callable[[Path], RunState],
    ) -> None:
        """``dataset`` is the dataset's fingerprint (``answer_key.fingerprint_rows``);
        ``read_state`` folds a run's checkpoint into a state."""
        self.request = request
        self.selected_ids = selected_ids
        self.rollouts = rollouts
        self.sampling = sampling
        self._dataset = dataset
        self._read_state = read_state
        self.slug, self.benchmark_dir = model_run_dir(
            request.output_dir, request.benchmark.name, request.model
        )
        # Keyed by output directory too: runs written elsewhere are not continued here.
        item_key = canonical_hash([request.index_key, request.model, str(self.benchmark_dir)], 8)
        self.index = RunIndex(
            request.cache, f"{request.benchmark.name}-{item_key}", self.benchmark_dir
        )
        self._finished: PriorRun | None = None  # its state is the one _state_of kept
        self._stopped_early = False  # _finished stopped early: the gate is decided already
        self._last_read: tuple[Path, RunState] | None = None
        self.writer = RunWriter(
            request.writer or WriterSpec(session=new_run_id(), item=request.benchmark.name)
        )

    def answer_fields(self, chat_template: dict[str, str] | str | None) -> dict[str, Any]:
        config = self.request.benchmark.config
        return answer_fields(
            model=self.request.model,
            env_id=config.env_id,
            env_args=config.env_args,
            dataset_fingerprint=self._dataset,
            sampling=self.sampling,
            rollouts=self.rollouts,
            chat_template=chat_template,
            vllm=config.vllm.model_dump(),
            endpoint_identity=self.request.endpoint_identity,
            weights=self.request.identity.key if self.request.identity else None,
            # Every seat has its records whichever is the headline: agent.seat changes no answer.
            agent=config.agent.model_dump(exclude_none=True, exclude={"seat"}),
            secret_key=self.secret_key,
        )

    @functools.cached_property
    def secret_key(self) -> bytes:
        """The output directory's key for secret settings' stand-ins (``runs.local_key``)."""
        return local_key(self.request.output_dir)

    @property
    def unchecked(self) -> str | None:
        """Why the weights could not be checked, when they could not."""
        return self.request.identity.unchecked if self.request.identity else None

    def finished(self, decided: Callable[[dict[str, Any], RunState], bool]) -> PriorRun | None:
        """The run this one continues if it has every selected example finished (or, by
        ``decided``, the examples it finished decide its gate early), found without a server;
        then :meth:`choose` needs no endpoint.

        When the weights could not be checked, the newest finished run that matches in all
        else is reused, and the outcome's note says its weights were not checked.
        """
        if self.request.fresh:
            return None
        config = self.request.benchmark.config
        applies = self.request.applies_template
        ignore = frozenset(
            (["chat_template"] if applies is not None else [])
            + (["weights"] if self.unchecked else [])
        )
        if not ignore:
            prior = self.index.find(canonical_hash(self.answer_fields(config.chat_template)))
        else:
            template = None if applies is not None else config.chat_template
            prior = self.index.newest_alike(self.answer_fields(template), ignore, applies)
        if prior is None:
            return None
        # Before any server: a session evaluating this run may finish it meanwhile.
        self._claim(prior.run_dir)
        state = self._state_of(prior.run_dir)
        missing = any(state.missing(i) for i in self.selected_ids)
        if missing and not decided(prior.fields, state):
            return None
        self._finished, self._stopped_early = prior, missing
        return prior

    def close(self) -> None:
        """Give up the run's lock: the item is done with the run (or failed before its run)."""
        self.writer.release()

    def _claim(self, run_dir: Path) -> None:
        """Hold ``run_dir``'s lock, waiting for the process evaluating it (RunLockError when it
        does not finish in time); what it finished meanwhile is read afresh."""
        if self.writer.held != run_dir:
            self.writer.claim(run_dir)
            self._last_read = None

    def _try_claim(self, run_dir: Path) -> bool:
        """Hold ``run_dir``'s lock if no other process does."""
        if self.writer.held == run_dir:
            return True
        self._last_read = None
        return self.writer.try_claim(run_dir)

    def _state_of(self, run_dir: Path) -> RunState:
        """The run's checkpoint folded into a state; kept, so a run that turns out unfinished
        is not read twice (at 100,000 examples a read takes seconds)."""
        if self._last_read is None or self._last_read[0] != run_dir:
            self._last_read = run_dir, self._read_state(run_dir)
        return self._last_read[1]

    def choose(self, info: EndpointInfo | None) -> ChosenRun:
        """The run to continue (or a new one), its answer key, and what it has finished;
        ``info`` None: the finished run :meth:`finished` found."""
        request, config = self.request, self.request.benchmark.config
        note: str | None = None
        if info is None:
            if self._finished is None:
                raise RuntimeError("a run without an endpoint must be finished already")
            prior = self._finished
            state = self._state_of(prior.run_dir)
            skipped = (
                "nothing was asked of the endpoint but which model it serves"
                if request.applies_template is None
                else "no server was started"
            )
            note = (
                f"run {prior.run_id} stopped early with the gate decided (gate.early_stop): "
                f"nothing to send, {skipped}"
                if self._stopped_early
                else f"every selected example was finished in run {prior.run_id}: "
                f"nothing to evaluate, {skipped}"
            )
            if self.unchecked:
                made = describe_weights(prior.fields.get("weights"))
                note += (
                    f"; the weights could NOT be checked ({self.unchecked}), so these are the "
                    f"numbers of run {prior.run_id}, made with weights {made}"
                )
            return ChosenRun(
                prior.run_id, prior.run_dir, prior.fields, canonical_hash(prior.fields), state,
                serving_note=note,
            )  # fmt: skip
        fields = self.answer_fields(info.chat_template or config.chat_template)
        answer_hash = canonical_hash(fields)
        # Found, started and recorded under the choosing lock: a session starting at the same
        # moment finds this run, not none (and does not start a second run of the same key).
        with choosing(self.benchmark_dir):
            found = None if request.fresh else self.index.find(answer_hash)
            note = self._continue_note(found, fields, answer_hash)
            if found is None:
                run_id = new_run_id()
                run_dir = self.benchmark_dir / run_id
            else:
                run_id, run_dir = found.run_id, found.run_dir
            claimed = self._try_claim(run_dir)  # always, for a new run
            if claimed:
                self._set_up(info, found, run_id, run_dir, answer_hash, fields)
        if not claimed:  # another process evaluates it: wait, without holding up the choosing
            self._claim(run_dir)
            self._set_up(info, found, run_id, run_dir, answer_hash, fields)
        state = self._state_of(run_dir)
        self._last_read = None  # the run owns it now
        return ChosenRun(run_id, run_dir, fields, answer_hash, state, new_run_note=note)

    def _continue_note(
        self, found: PriorRun | None, fields: dict[str, Any], answer_hash: str
    ) -> str | None:
        """One line on the run continued (or the new one) when something about it needs saying."""
        note: str | None = None
        if found is None and not self.request.fresh:
            note = self._new_run_note(fields, answer_hash)
        elif found is not None and self.unchecked:
            note = (
                f"the weights could not be checked ({self.unchecked}); run {found.run_id} goes on"
            )
        if found is not None and (started_with := other_verifiers_api(found.run_dir)):
            # Same examples and configuration under the other API: the run goes on, and says so.
            switched = (
                f"run {found.run_id} was started with {started_with} and goes on with "
                f"{verifiers_api()}: its examples and configuration are the same"
            )
            note = f"{note}; {switched}" if note else switched
        return note

    def _set_up(
        self,
        info: EndpointInfo,
        found: PriorRun | None,
        run_id: str,
        run_dir: Path,
        answer_hash: str,
        fields: dict[str, Any],
    ) -> None:
        """The held run's directory, logs and ``run_config.json``, and its entry in the index
        (written when the run starts, so that even a killed run is found)."""
        request = self.request
        RunPaths(run_dir).logs.mkdir(parents=True, exist_ok=True)
        link_server_logs(
            Path(info.server_logs) if info.server_logs else None, RunPaths(run_dir).logs
        )
        if found is None or not RunPaths(run_dir).is_run():
            run_config = run_config_json(
                request,
                info,
                run_id,
                run_dir,
                answer_hash,
                fields,
                self.slug,
                len(self.selected_ids),
                self.secret_key,
            )
            write_json_atomic(
                RunPaths(run_dir).run_config, request.redactor.json(run_config, by_name=False)
            )
        self.record(answer_hash, run_dir, run_id, fields, complete=False)

    def _new_run_note(self, fields: dict[str, Any], answer_hash: str) -> str | None:
        """One line on why a new run starts, when an earlier run of this item exists: the
        weights changed (or could not be checked), or its configuration differs."""
        newest = self.index.newest(exclude=answer_hash)
        if newest is not None and (made := other_verifiers_api(newest.run_dir)):
            changed_text = ", ".join(differing_fields(newest.fields, fields)) or "unknown fields"
            return (
                f"run {newest.run_id} was made with {made} and {verifiers_api()} is installed; "
                f"the environment differs between the two ({changed_text} differ), so that run "
                "is not continued; starting a new run"
            )
        if newest is not None:
            changed = differing_fields(newest.fields, fields)
            if any(name == "weights" or name.startswith("weights.") for name in changed):
                old, new = newest.fields.get("weights"), fields.get("weights")
                if new is None:
                    what = f"the weights could not be checked ({self.unchecked})"
                else:
                    what = f"the model changed since run {newest.run_id}: " + describe_change(
                        old, new
                    )
                others = [n for n in changed if n != "weights" and not n.startswith("weights.")]
                also = f"; {', '.join(others)} differ too" if others else ""
                return f"{what}{also}; starting a new run"
        other = self.index.latest_incomplete(exclude=answer_hash)
        if other is None:
            return None
        changed_text = ", ".join(differing_fields(other.fields, fields)) or "unknown fields"
        return (
            f"an earlier incomplete run {other.run_id} exists with a different "
            f"configuration ({changed_text} differ); starting a new run"
        )

    def record(
        self, answer_hash: str, run_dir: Path, run_id: str, fields: dict[str, Any], complete: bool
    ) -> None:
        """The run in the index, as it stands now (``complete``: nothing is left to do)."""
        self.index.record(answer_hash, PriorRun(run_dir, run_id, fields, complete), time.time())

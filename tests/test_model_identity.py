"""The weights' identity in the answer key: a changed model is evaluated again, never reported
from an older run's numbers.

Real parts: the local backend on the fake vLLM (as tests/test_deployments.py), the OpenAI test
server for ``--base-url``, and for the Hub a local server speaking the part of the Hub API that
``huggingface_hub.HfApi.model_info`` uses (tests/support/hub_server.py, via ``HF_ENDPOINT``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_modal_eval import phases
from pytest_modal_eval.runs.identity import FingerprintStore, hub_identity, local_identity
from tests.conftest import REPO, BenchmarkProject, start_fake_server
from tests.support.hub_models import FakeHub
from tests.support.vllm_check import FAKE_VLLM_ROOT
from tests.test_deployments import LocalRuns

A, B, C = "a" * 40, "b" * 40, "c" * 40


class DictCache:
    """pytest's ``config.cache`` interface, in memory."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = json.loads(json.dumps(value))


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    server = FakeHub()
    monkeypatch.setenv("HF_ENDPOINT", server.start())
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.stop()


# --- a local directory ------------------------------------------------------------------------


class PhaseTexts:
    """The text of every set-up phase begun (``pytest_modal_eval.phases``)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def began(self, phase: phases.Phase) -> None:
        self.texts.append(phase.text)

    def changed(self, phase: phases.Phase, previous: str | None, seconds: float) -> None:
        pass

    def ended(self, phase: phases.Phase, seconds: float) -> None:
        pass


def test_local_digest_follows_content_and_is_kept_while_files_are_unchanged(
    tmp_path: Path,
) -> None:
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    weights = model / "model.safetensors"
    weights.write_bytes(b"\x01" * 1000)
    store = FingerprintStore(DictCache())
    told = PhaseTexts()
    unlisten = phases.listen(told)
    try:
        first = local_identity(model, store)
        assert first.record["hashed"] is True
        assert [name for name, _ in first.record["files"]] == ["config.json", "model.safetensors"]
        again = local_identity(model, store)
        assert again.record["hashed"] is False and again.key == first.key
    finally:
        unlisten()
    # Hashing is a phase of its own, shown while it lasts (once: then the digest is kept).
    assert told.texts == [f"hashing the weights in {model.resolve()} (0.0 GiB)"]

    # What a trainer writes beside a checkpoint is not the model.
    (model / "trainer_state.json").write_text("{}")
    (model / "optimizer.pt").write_bytes(b"x")
    assert local_identity(model, store).key == first.key

    # Overwritten in place with the same size and the old modification time: still noticed
    # (the change time moves), and the digest is of the new content.
    stat = weights.stat()
    weights.write_bytes(b"\x02" * 1000)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = local_identity(model, store)
    assert changed.record["hashed"] is True and changed.key != first.key
    # Without a store every run hashes, to the same digest.
    assert local_identity(model, FingerprintStore(None)).key == changed.key

    # A versioned tokenizer file (Mistral's tokenizer.model.v3) is part of the model.
    (model / "tokenizer.model.v3").write_bytes(b"v3")
    assert local_identity(model, store).key != changed.key


def test_a_field_the_endpoint_did_not_report_is_none_in_the_change_line() -> None:
    from pytest_modal_eval.runs.identity import describe_change

    old = {"kind": "endpoint", "id": "m", "root": None}
    new = {"kind": "endpoint", "id": "m", "root": "/models/ckpt-200"}
    assert describe_change(old, new) == "root none -> /models/ckpt-200"
    assert describe_change(None, new) == "unchecked -> id m, root /models/ckpt-200"


# --- the Hub ----------------------------------------------------------------------------------


def test_hub_commit_is_asked_of_the_hub(hub: FakeHub) -> None:
    hub.commits["org/m"] = {"main": A, "v1": B}
    assert hub_identity("org/m", None).key == {"kind": "hub", "revision": None, "commit": A}
    assert hub_identity("org/m", "v1").key == {"kind": "hub", "revision": "v1", "commit": B}
    asked = len(hub.requests)
    # A commit as revision needs no question.
    assert hub_identity("org/m", B).key == {"kind": "hub", "revision": B, "commit": B}
    assert len(hub.requests) == asked
    hub.commits["org/m"]["main"] = B
    assert hub_identity("org/m", None).key == {"kind": "hub", "revision": None, "commit": B}
    unknown = hub_identity("org/unknown", None)
    assert unknown.key is None and unknown.unchecked is not None
    assert "org/unknown@main" in unknown.unchecked


def test_unreachable_or_offline_hub_leaves_the_weights_unchecked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    down = hub_identity("org/m", None, timeout=2)
    assert down.key is None and "could not say which commit org/m@main is" in str(down.unchecked)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE" in str(hub_identity("org/m", None).unchecked)


def _cache_commit(cache: Path, repo_id: str, commit: str, ref: str = "main") -> None:
    """A Hugging Face cache holding ``repo_id`` at ``commit`` for ``ref``, laid out as
    huggingface_hub writes it: ``refs/<ref>`` names the commit, its files under
    ``snapshots/<commit>/``."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text("{}")


def test_cached_commit_is_used_only_for_a_server_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _cache_commit(tmp_path, "org/m", A)
    _cache_commit(tmp_path, "org/m", B, ref="v1")
    here = hub_identity("org/m", None, cache_serves=True)
    assert here.key == {"kind": "hub", "revision": None, "commit": A}
    assert here.record["resolved"] == "local cache" and here.unchecked is None
    assert hub_identity("org/m", "v1", cache_serves=True).key == {
        "kind": "hub", "revision": "v1", "commit": B,
    }  # fmt: skip
    # On Modal the local cache says nothing about what the container loads.
    assert hub_identity("org/m", None).key is None
    assert hub_identity("org/uncached", None, cache_serves=True).key is None
    assert hub_identity("./not/an/id", None, cache_serves=True).key is None


def _revision(start: dict[str, Any]) -> str | None:
    """The ``--revision`` a fake vLLM start was given."""
    argv = start["argv"]
    return argv[argv.index("--revision") + 1] if "--revision" in argv else None


# --- through the plugin -----------------------------------------------------------------------


@pytest.fixture
def local(project: BenchmarkProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalRuns:
    starts = tmp_path / "starts.jsonl"
    monkeypatch.setenv("FAKE_VLLM_STARTS", str(starts))
    paths = [str(FAKE_VLLM_ROOT), str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    return LocalRuns(project, starts)


def _run_configs(project: BenchmarkProject) -> list[dict[str, Any]]:
    found = (project.pytester.path / "outputs" / "evals").glob("alpha--*/*/run_config.json")
    return [json.loads(p.read_text()) for p in sorted(found)]


def test_overwritten_local_checkpoint_is_evaluated_again(local: LocalRuns) -> None:
    project = local.project
    project.add("alpha", n=3)
    checkpoint = project.pytester.path / "fake-model"
    (checkpoint / "config.json").write_text('{"step": 100}')
    local.run().assert_outcomes(passed=1)
    again = local.run()
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*nothing to evaluate, no server was started*"])
    assert len(local.started()) == 1

    (checkpoint / "config.json").write_text('{"step": 200}')
    changed = local.run()
    changed.assert_outcomes(passed=1)
    assert len(local.started()) == 2
    changed.stdout.fnmatch_lines(
        [
            "alpha (fake-model): note: the model changed since run *: digest * -> *; "
            "starting a new run"
        ]
    )
    configs = _run_configs(project)
    assert len(configs) == 2
    digests = {c["model_identity"]["digest"] for c in configs}
    assert len(digests) == 2
    assert {c["answer_fields"]["weights"]["digest"] for c in configs} == digests


def test_new_hub_commit_is_evaluated_again_and_unchecked_reuse_says_so(
    local: LocalRuns, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = local.project
    # A template given to vLLM explicitly: the one part of the key a server started for a Hub
    # id would otherwise decide (see chat_template.decided_now).
    template = 'vllm: {extra_args: ["--chat-template", "{{ messages }}"]}\n'
    project.add("alpha", n=3, extra_yaml=template)
    hub.commits["org/x"] = {"main": A}

    def run(*extra: str) -> pytest.RunResult:
        return project.pytester.runpytest_subprocess(
            "--model=org/x", "--backend", "local", f"--vllm-python={sys.executable}", *extra
        )

    run().assert_outcomes(passed=1)
    assert _revision(local.started()[0]) == A  # vLLM serves the commit the key names
    again = run()
    again.stdout.fnmatch_lines(["*nothing to evaluate, no server was started*"])
    assert len(local.started()) == 1

    hub.commits["org/x"]["main"] = B  # a new push
    pushed = run()
    pushed.assert_outcomes(passed=1)
    assert len(local.started()) == 2
    assert _revision(local.started()[1]) == B
    pushed.stdout.fnmatch_lines(
        [
            "alpha (org/x): note: the model changed since run *: "
            f"commit {A[:12]} -> {B[:12]}; starting*"
        ]
    )
    assert [c["model_identity"]["commit"] for c in _run_configs(project)].count(B) == 1

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the Hub is unreachable
    unchecked = run()
    unchecked.assert_outcomes(passed=1)
    assert len(local.started()) == 2
    unchecked.stdout.fnmatch_lines(
        [
            "*nothing to evaluate, no server was started; the weights could NOT be checked "
            f"(the Hugging Face Hub could not say which commit org/x@main is*made with weights "
            f"commit {B[:12]}*"
        ]
    )

    # A vLLM on this machine loads the local Hugging Face cache when the Hub cannot be asked:
    # the cached commit is then what answers, and it is checked against the finished run.
    cache = project.pytester.path / "hf-cache"
    _cache_commit(cache, "org/x", B)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    cached = run()
    cached.assert_outcomes(passed=1)
    cached.stdout.fnmatch_lines(["*nothing to evaluate, no server was started*"])
    assert "could NOT be checked" not in cached.stdout.str()
    _cache_commit(cache, "org/x", C)  # the cache moved on (a download made elsewhere)
    moved = run()
    moved.assert_outcomes(passed=1)
    assert len(local.started()) == 3 and _revision(local.started()[2]) == C
    moved.stdout.fnmatch_lines([f"*commit {B[:12]} -> {C[:12]}; starting*"])


@pytest.mark.usefixtures("hub")
def test_revision_goes_to_vllm_and_into_the_key(local: LocalRuns) -> None:
    project = local.project
    project.add("alpha", n=2, extra_yaml=f"vllm: {{revision: {B}}}\n")
    result = project.pytester.runpytest_subprocess(
        "--model=org/x", "--backend", "local", f"--vllm-python={sys.executable}"
    )
    result.assert_outcomes(passed=1)
    [start] = local.started()
    argv = start["argv"]
    assert argv[argv.index("--revision") + 1] == B
    [config] = _run_configs(project)
    assert config["answer_fields"]["vllm"]["revision"] == B
    assert config["answer_fields"]["weights"]["commit"] == B


def test_base_url_is_keyed_on_what_models_says_it_serves(project: BenchmarkProject) -> None:
    project.add("alpha", n=3)
    project.server.configure(root="/ckpt/step-100")
    project.run().assert_outcomes(passed=1)
    # "created" changes with every answer of /v1/models; that is no new model.
    again = project.run()
    again.stdout.fnmatch_lines(["*nothing to evaluate*"])
    assert project.server.stats()["completed_requests"] == 3

    project.server.configure(root="/ckpt/step-200")  # restarted on another checkpoint
    changed = project.run()
    changed.assert_outcomes(passed=1)
    assert project.server.stats()["completed_requests"] == 6
    changed.stdout.fnmatch_lines(
        [
            "alpha (test-model): note: the model changed since run *: "
            "root /ckpt/step-100 -> /ckpt/step-200;*"
        ]
    )
    assert len(project.run_dirs("alpha")) == 2


def test_endpoint_that_cannot_say_what_it_serves_reuses_a_finished_run_with_a_note(
    project: BenchmarkProject,
) -> None:
    own = start_fake_server()
    try:
        project.server = own  # a server of this test's own, to be stopped
        project.add("alpha", n=3)
        own.configure(root="/ckpt/a")
        project.run().assert_outcomes(passed=1)
    finally:
        own.stop()
    down = project.run()
    down.assert_outcomes(passed=1)
    down.stdout.fnmatch_lines(
        [
            "*nothing to evaluate*; the weights could NOT be checked (the endpoint could not "
            "say which model it serves (endpoint * is unreachable*made with weights id "
            "test-model, root /ckpt/a*"
        ]
    )


def test_endpoint_now_serving_another_model_does_not_reuse_a_finished_run(
    project: BenchmarkProject,
) -> None:
    """An endpoint that lists its models without the one asked for is known to serve
    something else: the finished run's numbers are not reported, as a run with nothing
    finished would error the same way."""
    project.add("alpha", n=3)
    project.run().assert_outcomes(passed=1)
    project.server.configure(model="test-model-v2")
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*alpha: endpoint * does not serve model 'test-model'; it serves: test-model-v2. "
            "Pass the served name with --model."
        ]
    )
    assert "nothing to evaluate" not in result.stdout.str()


def test_modal_serves_the_commit_and_deploy_names_the_same_app(
    project: BenchmarkProject, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployed app keeps what it fetched: the commit is in its spec, so a push gives another
    app, and `pytest-modal-eval deploy` names the app a run at the same commit looks for."""
    from pytest_modal_eval.cli.deploy import deploy_spec
    from pytest_modal_eval.serving.modal.backend import ModalServer
    from tests.test_modal_app import PROXY_ENV

    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    for var, value in PROXY_ENV.items():
        monkeypatch.setenv(var, value)
    yaml = project.add("alpha", n=2)
    project.server.configure(model="org/x", require_key=PROXY_ENV["VLLM_API_KEY"])
    looked_up: list[tuple[str, str | None]] = []

    def web_url(self: ModalServer, name: str) -> str:
        looked_up.append((name, self.profile.vllm.revision))
        return project.server.url

    monkeypatch.setattr(ModalServer, "_web_url", web_url)
    monkeypatch.setattr(ModalServer, "_read_template_dict", lambda self, name: {"source": "m"})
    hub.commits["org/x"] = {"main": A}

    project.pytester.runpytest("--model", "org/x", "--backend", "modal").assert_outcomes(passed=1)
    assert looked_up == [(deploy_spec("org/x", yaml, []).app_name(), A)]

    hub.commits["org/x"]["main"] = B
    project.pytester.runpytest("--model", "org/x", "--backend", "modal").assert_outcomes(passed=1)
    assert looked_up[1] == (deploy_spec("org/x", yaml, []).app_name(), B)
    assert looked_up[1][0] != looked_up[0][0]


def test_a_server_started_at_an_older_commit_is_not_used_for_a_newer_key(
    project: BenchmarkProject, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under xdist each worker asks the Hub; a push between their lookups gives two keys for
    one server profile. The benchmark whose key names another commit than the server's stops."""
    pytest.importorskip("xdist")
    from pytest_modal_eval.serving.modal.backend import ModalServer
    from tests.test_modal_app import PROXY_ENV

    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    for var, value in PROXY_ENV.items():
        monkeypatch.setenv(var, value)
    project.add("alpha", n=2)
    project.add("beta", n=2)
    project.server.configure(model="org/x", require_key=PROXY_ENV["VLLM_API_KEY"])
    monkeypatch.setattr(ModalServer, "_web_url", lambda self, name: project.server.url)
    monkeypatch.setattr(ModalServer, "_read_template_dict", lambda self, name: {"source": "m"})
    hub.commits["org/x"] = {"main": A}
    hub.pushes.append(("org/x", "main", B))  # lands after the first lookup

    result = project.pytester.runpytest("--model", "org/x", "--backend", "modal", "-n", "2")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*org/x resolved to commit * for this benchmark, but its server was started at *"]
    )


def test_xdist_local_challenger_frees_the_machine_for_its_reference(
    local: LocalRuns, hub: FakeHub
) -> None:
    """--backend local runs one vLLM at a time. A challenger that got the machine first must
    free it when its evaluation ends, or its reference (which it waits for) never starts."""
    pytest.importorskip("xdist")
    project = local.project
    project.add("alpha", n=3, gate="gate: {min_avg_reward: 0.1, vs_reference: {}}")
    hub.commits.update({"org/a": {"main": A}, "org/b": {"main": B}})
    hub.delays["org/a"] = 3.0  # the reference's set-up is slower: the challenger starts first
    result = project.pytester.runpytest_subprocess(
        "--model=org/a",
        "--model=org/b",
        "--backend",
        "local",
        f"--vllm-python={sys.executable}",
        "-n",
        "2",
        timeout=180,
    )
    result.assert_outcomes(passed=2)
    assert [s["model"] for s in local.started()] == ["org/b", "org/a"]
    result.stdout.fnmatch_lines(["*vs reference org/a*"])


def test_eval_endpoint_and_benchmarks_share_the_server_at_the_pinned_commit(
    local: LocalRuns, hub: FakeHub
) -> None:
    project = local.project
    project.add("alpha", n=2)
    project.add("beta", n=2)
    project.pytester.makepyfile(
        test_user="""
        def test_reaches_the_model(eval_endpoint):
            assert eval_endpoint().model == "org/x"
        """
    )
    hub.commits["org/x"] = {"main": A}
    result = project.pytester.runpytest_subprocess(
        "test_user.py",  # first: its request starts the server
        "evals",
        "--model=org/x",
        "--backend",
        "local",
        f"--vllm-python={sys.executable}",
    )
    result.assert_outcomes(passed=3)
    [start] = local.started()
    assert _revision(start) == A
    # The process's identities: the fixture and both benchmarks ask the Hub which commit once
    # (the other requests list the commit's files, for the chat template).
    asked = [p for p in hub.requests if p.startswith("/api/models/") and "/tree/" not in p]
    assert asked == ["/api/models/org/x"]


def test_run_directories_are_named_by_the_label_and_earlier_names_are_still_found(
    tmp_path: Path,
) -> None:
    from pytest_modal_eval.model_names import earlier_model_slugs, model_slug
    from pytest_modal_eval.runs.paths import model_run_dir

    assert model_slug("org/a b") == "org--a-b"  # the label's spelling
    assert earlier_model_slugs("org/a b") == ["org--a b"]
    # An id without an organisation is its name alone (no Hub id holds "--", so it cannot be
    # read as org/name); a served name that holds "--" keeps the prefix.
    assert model_slug("other") == "other"
    assert model_slug("a--b") == "default--a--b"
    assert earlier_model_slugs("other") == ["default--other"]
    assert earlier_model_slugs("a b") == ["default--a-b", "default--a b"]
    # Ids whose label is their old spelling keep their directories' names.
    for model in ("Qwen/Qwen3-8B", str(tmp_path)):
        assert earlier_model_slugs(model) == [], model
    assert model_run_dir(tmp_path, "b", "org/a b") == ("org--a-b", tmp_path / "b--org--a-b")
    (tmp_path / "b--org--a b").mkdir()  # runs of the earlier naming only: found there
    assert model_run_dir(tmp_path, "b", "org/a b") == ("org--a b", tmp_path / "b--org--a b")
    (tmp_path / "b--org--a-b").mkdir()  # once the label's directory exists, it is the one
    assert model_run_dir(tmp_path, "b", "org/a b") == ("org--a-b", tmp_path / "b--org--a-b")
    assert model_run_dir(tmp_path, "b", "other") == ("other", tmp_path / "b--other")
    (tmp_path / "b--default--other").mkdir()
    assert model_run_dir(tmp_path, "b", "other") == (
        "default--other",
        tmp_path / "b--default--other",
    )

"""The parts of detached sessions that need no session: the runner app's spec as Modal builds
it offline (``Function.info()``, the real SDK), leases over the stand-in's Dict, the stand-in
Volume's commit and reload semantics every guarantee rests on, what travels and what stays, and
the shards' split. The sessions themselves are tests/test_detached.py's."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from types import ModuleType

import modal
import pytest

from pytest_modal_eval.detach.app import build
from pytest_modal_eval.detach.image import RunnerImage, local_environment
from pytest_modal_eval.detach.lease import STALE_S, Lease, LeaseLost
from pytest_modal_eval.detach.modal_calls import ModalCalls
from pytest_modal_eval.detach.project import project_files
from pytest_modal_eval.detach.request import local_options_removed, relative_path
from pytest_modal_eval.detach.spec import RunnerSpec
from pytest_modal_eval.exceptions import DetachError, ServingError
from pytest_modal_eval.runs.request import shard_slice
from tests.conftest import BenchmarkProject
from tests.support.modal_stand_in import install_fake_modal
from tests.test_modal_app import closure, image_commands, private


def make_spec(**changes: object) -> RunnerSpec:
    image = RunnerImage("3.11", ("pytest==9.2.0", "verifiers==0.3.1"), ("pytest_modal_eval",))
    fields: dict[str, object] = {
        "image": image,
        "volume": "runs-volume",
        "cpu": 4.0,
        "memory_mib": 8192,
        "secrets": ("team-keys",),
        "env_names": ("OPENAI_API_KEY", "JUDGE_KEY"),
        "project": "My Project",
    }
    fields.update(changes)
    return RunnerSpec(**fields)  # type: ignore[arg-type]


def test_the_runner_app_is_built_offline_as_modal_will_deploy_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODAL_SERVER_URL", "http://127.0.0.1:9")  # nothing reaches Modal
    spec = make_spec()
    built = build(spec, {"OPENAI_API_KEY": "sk-the-key", "UNRELATED": "x"})

    assert built.app.name == spec.app_name()
    assert spec.app_name().startswith("evalrun-my-project-")
    for function in (built.controller, built.worker):
        info = function.info()
        assert info.timeout == 24 * 3600 and info.max_retries == 5
        assert (info.cpu, info.memory_mib) == (4.0, 8192)
        assert info.single_use_containers is True
        assert {path: v.name for path, v in info.volumes.items()} == {"/results": "runs-volume"}
        assert info.secrets == [
            "modal.Secret.from_name('team-keys')",
            "Secret.from_dict([OPENAI_API_KEY])",  # JUDGE_KEY is not set: not sent
            "Secret.from_dict([MODAL_EVAL_RUNNER_SPEC, MODAL_EVAL_CONTAINER])",
        ]
    secrets = {repr(s): private(s) for s in private(built.controller)._spec.secrets}
    values = closure(secrets["Secret.from_dict([OPENAI_API_KEY])"])["load_env_dict"]()
    assert values == {"OPENAI_API_KEY": "sk-the-key"}
    env = closure(secrets["Secret.from_dict([MODAL_EVAL_RUNNER_SPEC, MODAL_EVAL_CONTAINER])"])
    container_env = env["load_env_dict"]()
    assert RunnerSpec.from_env(container_env) == spec  # the container rebuilds the same app
    assert json.loads(container_env["MODAL_EVAL_CONTAINER"]) == {"cpu": 4.0, "memory_mib": 8192}
    assert "sk-the-key" not in json.dumps(container_env)
    # (Local sources are added when a container starts, after these commands.)
    commands = image_commands(RunnerImage("3.11", spec.image.pins, ()).build())
    assert commands[0].startswith("FROM python:3.11")
    assert any("pytest==9.2.0" in c and "verifiers==0.3.1" in c for c in commands), commands


def test_traces_and_wandb_settings_travel_to_the_container_and_stay_readable() -> None:
    """``OTEL_*`` and ``WANDB_*`` mean in the container what they mean here: they travel in the
    session's Modal secret; the OTLP headers and W&B's key as secrets (the container's redactor
    learns them), the others as settings it leaves readable; this machine's paths stay here."""
    from pytest_modal_eval.redact import Redactor
    from pytest_modal_eval.session.detached import traveling_settings

    here = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Basic cGstbGY6c2stbGY=",
        "WANDB_API_KEY": "wandb-key-0123456789",
        "WANDB_PROJECT": "regressions",
        "WANDB_DIR": "/home/me/wandb",
        "WANDB_ENTITY": "",
        "HOME": "/home/me",
    }
    secret, plain = traveling_settings(here)
    assert secret == ["OTEL_EXPORTER_OTLP_HEADERS", "WANDB_API_KEY"]
    assert plain == ["OTEL_EXPORTER_OTLP_ENDPOINT", "WANDB_PROJECT"]
    spec = make_spec(env_names=tuple(secret), setting_names=tuple(plain))
    assert RunnerSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    built = build(spec, here)
    [sent] = [s for s in private(built.controller)._spec.secrets if "OTEL" in repr(s)]
    assert closure(private(sent))["load_env_dict"]() == {
        name: here[name] for name in [*secret, *plain]
    }
    # The container's redactor, made as ``detach.runner.Container`` makes it.
    redactor = Redactor.from_environ(here, names=spec.env_names)
    line = " ".join(f"{name}={here[name]}" for name in [*secret, *plain])
    assert redactor.text(line) == (
        "OTEL_EXPORTER_OTLP_HEADERS=[redacted] WANDB_API_KEY=[redacted] "
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://collector.example:4318 WANDB_PROJECT=regressions"
    )


def test_the_image_pins_this_environment() -> None:
    image = local_environment()
    pins = dict(pin.split("==") for pin in image.pins if "==" in pin)
    assert pins["pytest"] == pytest.__version__
    assert pins["modal"] == modal.__version__
    # This checkout is installed editable: it travels as source, not as a pin.
    assert "pytest_modal_eval" in image.sources
    assert not any(pin.lower().startswith("pytest-modal-eval") for pin in image.pins)
    assert make_spec(image=image).app_name() != make_spec().app_name()


def test_inside_a_modal_container_no_token_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A detached session's container serves on Modal with the container's own credentials:
    the SDK tells a container by MODAL_IS_REMOTE, as the plugin does."""
    from pytest_modal_eval.serving.modal.backend import check_modal_token

    assert 'os.environ.get("MODAL_IS_REMOTE") == "1"' in inspect.getsource(modal.config._is_remote)
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(modal.config, "config", {"token_id": None, "token_secret": None})
    monkeypatch.delenv("MODAL_IS_REMOTE", raising=False)
    with pytest.raises(ServingError, match="No Modal token"):
        check_modal_token()
    monkeypatch.setenv("MODAL_IS_REMOTE", "1")
    check_modal_token()


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("FAKE_MODAL_ROOT", str(tmp_path / "modal"))
    return install_fake_modal(monkeypatch, tmp_path / "sandboxes")


def test_a_lease_has_one_owner_and_a_stale_one_is_taken_over_once(stand_in: ModuleType) -> None:
    calls = ModalCalls("v")
    a, b, c = (Lease(calls, "runs:v:alpha", owner, {"who": owner}) for owner in "abc")
    assert a.try_take() is None
    assert b.try_take()["owner"] == "a"  # type: ignore[index]
    assert a.try_take() is None  # its own (a restarted container of the same call)
    record = calls.get("runs:v:alpha")
    calls.put("runs:v:alpha", {**record, "beat": record["beat"] - STALE_S - 1})  # a stops beating
    assert b.try_take() is None  # b takes generation 1 over
    assert c.try_take()["owner"] == "b"  # type: ignore[index]  # and c does not, too
    assert calls.get("runs:v:alpha")["gen"] == 1
    with pytest.raises(LeaseLost, match="held by b"):
        a.beat()
    a.release()  # not a's any more: b keeps it
    assert calls.get("runs:v:alpha")["owner"] == "b"
    b.release()
    assert calls.get("runs:v:alpha") is None


def test_the_stand_in_volume_shows_a_write_only_after_commit_and_reload(
    stand_in: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the pre-emption test relies on: a container sees others' writes only after they
    commit and it reloads, and loses what it did not commit."""
    from modal import _fake_volumes

    stand_in.Volume.from_name("v", create_if_missing=True)
    mounts = {name: tmp_path / name for name in ("writer", "reader")}
    for mount in mounts.values():
        _fake_volumes.mount("v", mount, Path(f"{mount}.manifest.json"))

    def inside(name: str) -> ModuleType:
        monkeypatch.setenv("FAKE_MODAL_MOUNTS", json.dumps({"v": str(mounts[name])}))
        return stand_in

    (mounts["writer"] / "a.txt").write_text("one")
    inside("reader").Volume.from_name("v").reload()
    assert not (mounts["reader"] / "a.txt").exists()  # not committed yet
    inside("writer").Volume.from_name("v").commit()
    assert not (mounts["reader"] / "a.txt").exists()  # committed, not reloaded
    assert [e.path for e in stand_in.Volume.from_name("v").listdir("", recursive=True)] == ["a.txt"]
    inside("reader").Volume.from_name("v").reload()
    assert (mounts["reader"] / "a.txt").read_text() == "one"
    (mounts["writer"] / "a.txt").unlink()
    (mounts["writer"] / "b.txt").write_text("lost")
    inside("writer").Volume.from_name("v").commit()
    _fake_volumes.mount("v", mounts["writer"], Path(f"{mounts['writer']}.manifest.json"))
    assert sorted(os.listdir(mounts["writer"])) == ["b.txt"]  # a restart sees what was committed
    inside("reader").Volume.from_name("v").reload()
    assert sorted(os.listdir(mounts["reader"])) == ["b.txt"]


def test_what_stays_where_the_command_was_typed(tmp_path: Path) -> None:
    args = [
        "--model", "org/x", "--detach", "--wait", "--detach-shards", "alpha=3",
        "--eval-output-dir", "out", "--junitxml=j.xml", "--eval-report=none", "-k", "alpha",
        "--detach-parallel", "evals/",
    ]  # fmt: skip
    assert local_options_removed(args) == ["--model", "org/x", "-k", "alpha", "evals/"]
    root = tmp_path / "project"
    (root / "sub").mkdir(parents=True)
    assert relative_path(str(root / "evals" / "a.yaml") + "::a", root, root / "sub") == (
        "../evals/a.yaml::a"
    )
    with pytest.raises(DetachError, match="outside the project directory"):
        relative_path(str(tmp_path / "elsewhere.yaml"), root, root)


def test_the_project_travels_without_secrets_caches_or_outputs(tmp_path: Path) -> None:
    root = tmp_path / "project"
    for name in (
        "evals/a.yaml", "evals/data/a.jsonl", "conftest.py", "pytest.ini", ".env",
        ".venv/lib/x.py", "outputs/evals/a--m/r/results.jsonl", "pkg/__pycache__/m.pyc",
    ):  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    found = project_files(root, [root / "evals"], [root / "outputs" / "evals"])
    assert [p.as_posix() for p in found] == [
        "conftest.py", "evals/a.yaml", "evals/data/a.jsonl", "pytest.ini",
    ]  # fmt: skip


def test_shards_split_the_examples_into_contiguous_nearly_equal_parts() -> None:
    for total in range(0, 40):
        for n in range(1, 8):
            parts = [range(total)[shard_slice(total, (k, n))] for k in range(1, n + 1)]
            assert [i for part in parts for i in part] == list(range(total))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_detach_options_that_cannot_work_fail_in_one_line(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("alpha", n=3)
    result = project.run("--wait")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --wait goes with --detach"])
    result = project.pytester.runpytest("--model", "m", "--backend", "local", "--detach")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --detach runs the session in a CPU container on Modal*"])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-abcdefghijklmnop0123")
    result = project.run("--detach", "-m", "sk-abcdefghijklmnop0123 or eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --detach: an argument holds the value of a secret*"])
    assert "sk-abcdefghijklmnop0123" not in result.stdout.str() + result.stderr.str()
    result = project.run("--detach", "--snapshot-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --snapshot-update with --detach would store baselines*"])


def test_a_fanned_out_session_stops_only_the_deployments_it_started() -> None:
    """With the model on Modal, the workers leave their shared deployment up; the controller
    stops what appeared while the session ran, and leaves what was there before."""
    from pytest_modal_eval.detach.fanout import ServingApps
    from tests.test_cli_modal import FakeApps, record

    apps = FakeApps([record("eval-shared-aaaaaaaaaa", "org/a")])
    serving = ServingApps(apps)
    apps.records.append(record("eval-new-bbbbbbbbbb", "org/b"))
    apps.records.append(record("eval-not-ours-cccccccccc", "x/y", tags={}))
    said: list[str] = []
    serving.stop_new(said.append)
    assert apps.stopped == ["eval-new-bbbbbbbbbb"]
    assert said == ["stopped the deployment eval-new-bbbbbbbbbb this session started"]


def test_a_shards_output_directory_shares_the_sessions_key(tmp_path: Path) -> None:
    """Secret settings' stand-ins are keyed by the output directory's key: a shard's output
    directory gets the session's before it runs, so the stand-ins (and the answer key the
    merge groups runs by) are the benchmark's own; a key the shard has already is kept."""
    from pytest_modal_eval.redact import mask_mapping
    from pytest_modal_eval.runs.local_key import KEY_FILE, local_key, share_key

    outputs, shard = tmp_path / "outputs", tmp_path / "shards" / "alpha--m" / "1-of-3"
    settings = {"judge": {"api_key": "sk-judge-0123456789"}}
    assert mask_mapping(settings, local_key(outputs)) != mask_mapping(settings, local_key(tmp_path))
    share_key(outputs, shard)
    assert mask_mapping(settings, local_key(shard)) == mask_mapping(settings, local_key(outputs))
    assert (shard / KEY_FILE).stat().st_mode & 0o777 == 0o600
    kept = local_key(tmp_path / "other")
    share_key(outputs, tmp_path / "other")
    assert local_key(tmp_path / "other") == kept


def test_fanned_out_workers_share_nothing_the_final_pass_shares() -> None:
    """A worker's run is a part (a shard) or is shared again by the session's final pass: the
    sharing options stay with the final pass only; traces go with every worker."""
    from pytest_modal_eval.detach.fanout import worker_plan
    from pytest_modal_eval.detach.request import PlannedItem, SessionRequest

    options = (
        "--model", "m", "--wandb", "--push-to-hub", "org/results", "--hub-private",
        "--mlflow", "--otel-endpoint=http://collector:4318",
    )  # fmt: skip
    request = SessionRequest(
        session_id="s", command_key="k", options=options, paths=(), invocation="",
        items=(PlannedItem("evals/a.yaml::a", "a", "m", "a--m", shards=2),),
        volume="v", app_name="app", parallel=True,
    )  # fmt: skip
    plan = worker_plan(request)
    assert len(plan) == 2
    for worker in plan:
        args = worker["args"]
        assert args[:2] == ["--model", "m"] and "--otel-endpoint=http://collector:4318" in args
        assert not {"--wandb", "--push-to-hub", "org/results", "--hub-private", "--mlflow"} & set(
            args
        )
    assert request.args[: len(options)] == list(options)  # the final pass keeps them

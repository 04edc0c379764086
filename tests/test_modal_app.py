"""The Modal app, built offline, and the parts of the Modal backend that need no network.

There is no Modal emulator and no network here: the app is checked through the spec Modal
builds locally (``Function.info()``, plus the few settings only kept on the private function
object, read where modal 1.6.4 keeps them). The backend's network calls are replaced at their
boundary: the Modal CLI by a small script, ``_web_url`` and the Dict read by functions.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import modal
import pytest
from modal._image import LATEST_IMAGE_BUILDER_VERSION
from modal._utils.async_utils import synchronizer
from modal._utils.name_utils import is_valid_object_name

from pytest_modal_eval.config.schema import InfraConfig, VllmConfig
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.redact import Redactor
from pytest_modal_eval.serving.chat_template import TEMPLATES_DIR, log_line
from pytest_modal_eval.serving.endpoint import ServerProfile
from pytest_modal_eval.serving.modal import app as modal_app
from pytest_modal_eval.serving.modal.app import DeploySpec
from pytest_modal_eval.serving.modal.backend import ModalServer
from pytest_modal_eval.serving.modal.redirect_proxy import ModalProxy
from tests.conftest import BenchmarkProject

REPO = Path(__file__).resolve().parent.parent


def make_spec(
    model: str = "Qwen/Qwen2.5-7B-Instruct",
    *,
    served: str = "qwen",
    chat_template: str | None = "math",
    infra: dict[str, Any] | None = None,
    vllm: dict[str, Any] | None = None,
) -> DeploySpec:
    profile = ServerProfile(
        "modal",
        model,
        InfraConfig.model_validate(infra or {}),
        VllmConfig.model_validate(vllm or {}),
        chat_template,
    )
    return DeploySpec.for_profile(profile, served)


def private(fn: Any) -> Any:
    """The ``_Function`` behind the public wrapper (where modal keeps local-only settings)."""
    return synchronizer._translate_in(fn)  # type: ignore[no-untyped-call]


def closure(obj: Any) -> dict[str, Any]:
    """The values a modal object's loader closes over: what it will send at deploy time."""
    return dict(inspect.getclosurevars(obj._load).nonlocals)


def image_commands(image: modal.Image) -> list[str]:
    found: list[str] = []
    values = closure(private(image))
    for base in values["base_images"].values():
        found += image_commands(base)
    if values["dockerfile_function"] is not None:
        found += values["dockerfile_function"](LATEST_IMAGE_BUILDER_VERSION).commands
    return found


# -- the app definition --------------------------------------------------------------------

CONFIGS = [
    pytest.param({}, {}, id="defaults"),
    pytest.param(
        {
            "gpu": "H100:2",
            "timeout": 7200,
            "scaledown_window": 60,
            "max_concurrent_inputs": 32,
            "startup_timeout": 900,
        },
        {"tensor_parallel_size": 2, "max_model_len": 32768, "enforce_eager": True},
        id="h100x2",
    ),
    pytest.param({"gpu": "L4"}, {"prefix_caching": False, "dtype": "float16"}, id="l4"),
]


@pytest.mark.parametrize(("infra", "vllm"), CONFIGS)
def test_server_spec(infra: dict[str, Any], vllm: dict[str, Any]) -> None:
    spec = make_spec(infra=infra, vllm=vllm)
    cfg = spec.profile.infra
    built = modal_app.build(spec)
    assert built.app.name == spec.app_name()
    info = built.server.info()

    kind, _, count = cfg.gpu.partition(":")
    assert info.gpus == [(kind, int(count or 1))]
    assert info.port == 8000
    assert info.startup_timeout == cfg.startup_timeout
    assert info.unauthenticated is False  # callers need a Modal proxy token
    assert {path: v.name for path, v in info.volumes.items()} == {
        "/root/.cache/huggingface": "huggingface-cache",
        "/root/.cache/vllm": "vllm-cache",
    }
    assert info.secrets == [
        "modal.Secret.from_name('huggingface')",
        "modal.Secret.from_name('vllm-api-key')",
        "Secret.from_dict([MODAL_EVAL_SPEC])",
    ]

    fn = private(built.server)._service_function
    values = closure(fn)
    autoscaler = values["autoscaler_settings"]
    assert autoscaler.scaledown_window == cfg.scaledown_window
    assert autoscaler.min_containers == cfg.min_containers
    assert autoscaler.max_containers == cfg.max_containers
    assert autoscaler.target_concurrency_float == cfg.max_concurrent_inputs  # the default
    assert values["max_concurrent_inputs"] == cfg.max_concurrent_inputs
    assert values["enable_memory_snapshot"] is False
    assert values["http_config"].startup_timeout == cfg.startup_timeout
    assert built.app._local_state.tags["created-by"] == "pytest-modal-eval"

    secrets = {repr(s): private(s) for s in fn._spec.secrets}
    api_key = closure(secrets["modal.Secret.from_name('vllm-api-key')"])
    assert api_key["required_keys"] == ["VLLM_API_KEY"]
    # The spec travels to the container in the server's environment, exactly.
    env = closure(secrets["Secret.from_dict([MODAL_EVAL_SPEC])"])["load_env_dict"]()
    assert env == spec.to_env()
    assert DeploySpec.from_env(env) == spec


def test_replicas_and_snapshots() -> None:
    infra = {
        "min_containers": 1,
        "max_containers": 4,
        "target_concurrency": 32,
        "max_concurrent_inputs": 64,
        "memory_snapshot": True,
    }
    built = modal_app.build(make_spec(infra=infra))
    values = closure(private(built.server)._service_function)
    autoscaler = values["autoscaler_settings"]
    assert (autoscaler.min_containers, autoscaler.max_containers) == (1, 4)
    assert autoscaler.target_concurrency_float == 32
    assert values["max_concurrent_inputs"] == 64
    assert values["enable_memory_snapshot"] is True
    assert values["experimental_options"] == {"enable_gpu_snapshot": "True"}
    assert private(built.server)._user_cls is modal_app.VllmSnapshotServer


def test_scaling_settings_keep_the_app_name() -> None:
    """`deploy --warm` and a later run with the benchmark's own scaling find the same app."""
    base = make_spec().app_name()
    for infra in (
        {"min_containers": 1},
        {"max_containers": 8},
        {"target_concurrency": 16},
        {"memory_snapshot": True},
        {"scaledown_window": 60},
    ):
        assert make_spec(infra=infra).app_name() == base
    assert make_spec(infra={"gpu": "H100"}).app_name() != base


def test_modal_rejects_a_target_above_the_cap() -> None:
    with pytest.raises(modal.exception.InvalidError, match="target_concurrency"):
        modal_app.build(make_spec(infra={"target_concurrency": 300, "max_concurrent_inputs": 64}))


def test_image_pins_vllm() -> None:
    commands = image_commands(modal_app.vllm_image())
    assert commands[0].startswith("FROM python:3.12")
    assert any(c.endswith(f"vllm=={modal_app.VLLM_VERSION}") for c in commands), commands


def test_exact_container_command() -> None:
    spec = make_spec(
        infra={"gpu": "H100:2"},
        vllm={"tensor_parallel_size": 2, "max_model_len": 8192, "extra_args": ["--seed", "1"]},
    )
    assert modal_app.container_command(spec, "/root/modal_eval_chat_template.jinja") == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--served-model-name",
        "qwen",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--dtype",
        "auto",
        "--gpu-memory-utilization",
        "0.9",
        "--tensor-parallel-size",
        "2",
        "--data-parallel-size",
        "1",
        "--enable-prefix-caching",
        "--max-model-len",
        "8192",
        "--chat-template",
        "/root/modal_eval_chat_template.jinja",
        "--seed",
        "1",
    ]


def test_container_reimport_rebuilds_the_same_app() -> None:
    """What the container does: import the module with only MODAL_EVAL_SPEC to go on."""
    spec = make_spec(infra={"gpu": "A100-40GB:4"}, vllm={"tensor_parallel_size": 4})
    probe = (
        "import json\n"
        "from pytest_modal_eval.serving.modal import app as m\n"
        "s = m.DeploySpec.from_env()\n"
        "print(json.dumps({'app': m.app.name, 'gpus': m.build(s).server.info().gpus,"
        " 'cmd': m.container_command(s, None)}))\n"
    )
    env = {**os.environ, **spec.to_env(), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["app"] == spec.app_name()
    assert seen["gpus"] == [["A100-40GB", 4]]
    assert seen["cmd"][1:] == modal_app.container_command(spec, None)[1:]


def test_module_without_a_spec_has_no_app() -> None:
    # Importing for the plugin or tests must not build (or need) anything.
    assert os.environ.get(modal_app.SPEC_ENV) is None
    assert modal_app.app is None


def test_serve_decides_the_template_then_starts_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The container body, with its two outside effects (Popen, the Modal Dict) captured."""
    model = tmp_path / "model"  # a model without a template of its own
    model.mkdir()
    (model / "tokenizer_config.json").write_text("{}")
    spec = make_spec(str(model), chat_template="math")
    template_path = tmp_path / "container_template.jinja"
    started: list[list[str]] = []
    published: list[tuple[str, dict[str, str]]] = []
    monkeypatch.setenv(modal_app.SPEC_ENV, spec.to_env()[modal_app.SPEC_ENV])
    monkeypatch.setattr(modal_app, "_CONTAINER_TEMPLATE_PATH", str(template_path))
    monkeypatch.setattr(subprocess, "Popen", lambda cmd: started.append(cmd))
    monkeypatch.setattr(
        modal_app, "_publish_provenance", lambda name, p: published.append((name, p))
    )

    modal_app.serve()

    math = (TEMPLATES_DIR / "math.jinja").read_text()
    assert template_path.read_text() == math
    assert started == [modal_app.container_command(spec, str(template_path))]
    provenance = published[0][1]
    assert published == [(spec.app_name(), provenance)]
    assert provenance["source"] == "fallback:math.jinja"
    assert log_line(provenance) in capsys.readouterr().out


# -- app names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "Qwen/Qwen2.5-7B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct-AWQ-INT4-with-a-very-long-repository-name",
        "Org/UPPER_case.v1",
        "org/___",
        "plain",
    ],
)
def test_app_names_fit_modal_and_dns(model: str) -> None:
    name = make_spec(model).app_name()
    assert is_valid_object_name(name)  # modal's own check: <= 64 chars of [A-Za-z0-9._-]
    # Also a clean DNS label part: the URL is <workspace>--<app>-serve.modal.run, and "--"
    # separates workspace from label there.
    assert re.fullmatch(r"eval-[a-z0-9]+(-[a-z0-9]+)*", name), name
    assert len(name) <= 40
    assert make_spec(model).app_name() == name  # stable


def test_app_names_change_with_what_the_server_depends_on(tmp_path: Path) -> None:
    base = make_spec()
    template = tmp_path / "t.jinja"
    template.write_text("A")
    with_a = make_spec(chat_template=str(template)).app_name()
    template.write_text("B")  # same path, new text: must not reuse the old deployment
    with_b = make_spec(chat_template=str(template)).app_name()
    names = {
        base.app_name(),
        make_spec(served="other").app_name(),
        make_spec(infra={"gpu": "H100"}).app_name(),
        make_spec(vllm={"max_model_len": 4096}).app_name(),
        with_a,
        with_b,
    }
    assert len(names) == 6


# -- the backend, offline ------------------------------------------------------------------

PROXY_ENV = {
    "MODAL_PROXY_TOKEN_ID": "wk-test",
    "MODAL_PROXY_TOKEN_SECRET": "ws-test",
    "VLLM_API_KEY": "key-test",
}

_NO_TOKEN_PROBE = """
import time
from pathlib import Path
from pytest_modal_eval.config.schema import InfraConfig, VllmConfig
from pytest_modal_eval.serving.modal.backend import ModalServer
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.serving.endpoint import ServerProfile
profile = ServerProfile(
    "modal", "org/model", InfraConfig.model_validate({{}}), VllmConfig.model_validate({{}}), None
)
server = ModalServer(profile, logs_dir=Path({logs!r}))
t = time.monotonic()
try:
    server.start()
except ServingError as exc:
    print(f"ELAPSED {{time.monotonic() - t}}")
    print(exc)
"""


def test_missing_token_fails_fast_without_network(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE")
    }
    env.update(HOME=str(home), MODAL_CONFIG_PATH=str(home / ".modal.toml"), PYTHONPATH=str(REPO))
    script = _NO_TOKEN_PROBE.format(logs=str(tmp_path / "logs"))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    first, *message = result.stdout.splitlines()
    assert float(first.removeprefix("ELAPSED ")) < 1.0
    text = "\n".join(message)
    for hint in ("modal token new", "--backend local", "--base-url"):
        assert hint in text
    assert not (tmp_path / "logs").exists()  # nothing was attempted


@pytest.fixture
def fake_token(monkeypatch: pytest.MonkeyPatch) -> None:
    # modal reads MODAL_TOKEN_* from the environment at each config lookup.
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")


@pytest.mark.usefixtures("fake_token")
def test_local_directory_cannot_go_to_modal(tmp_path: Path) -> None:
    spec = make_spec(str(tmp_path))
    server = ModalServer(spec.profile, logs_dir=tmp_path / "logs", environ=PROXY_ENV)
    with pytest.raises(ServingError, match="--backend local"):
        server.start()


@pytest.mark.usefixtures("fake_token")
def test_missing_proxy_secrets_are_named(tmp_path: Path) -> None:
    server = ModalServer(make_spec().profile, logs_dir=tmp_path, environ={"VLLM_API_KEY": "k"})
    with pytest.raises(ServingError) as info:
        server.start()
    assert "MODAL_PROXY_TOKEN_ID, MODAL_PROXY_TOKEN_SECRET" in str(info.value)
    assert "VLLM_API_KEY," not in str(info.value)


@pytest.mark.usefixtures("fake_token")
def test_settings_modal_rejects_fail_before_deploying(tmp_path: Path) -> None:
    # InfraConfig accepts any positive scaledown_window; Modal allows 2..3600.
    spec = make_spec(infra={"scaledown_window": 7200})
    server = ModalServer(spec.profile, logs_dir=tmp_path, environ=PROXY_ENV)
    with pytest.raises(ServingError, match="scaledown_window"):
        server.start()


# A stand-in for the `modal` CLI: records its calls, prints what the real one would.
FAKE_CLI = """
import json, os, sys
with open(os.environ["FAKE_MODAL_RECORD"], "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "spec": os.environ.get("MODAL_EVAL_SPEC")}) + "\\n")
if os.environ.get("FAKE_MODAL_SAY"):  # a container or the CLI printing a secret
    print(os.environ["FAKE_MODAL_SAY"], file=sys.stderr)
if sys.argv[1] == "deploy":
    if os.environ.get("FAKE_MODAL_DEPLOY") == "fail":
        print("Building image im-123\\nError: Secret 'huggingface' not found")
        sys.exit(1)
    print("App deployed!")
elif sys.argv[1:3] == ["app", "logs"]:
    print("container says hello")
    print(os.environ.get("FAKE_MODAL_LOG_LINE", ""))
"""


@pytest.fixture
def fake_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_token: None
) -> tuple[list[str], Path]:
    script = tmp_path / "fake_modal.py"
    script.write_text(FAKE_CLI)
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_MODAL_RECORD", str(record))
    return [sys.executable, str(script)], record


def calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_failed_deploy_reports_log_and_app_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_cli: tuple[list[str], Path]
) -> None:
    cli, record = fake_cli
    monkeypatch.setenv("FAKE_MODAL_DEPLOY", "fail")
    monkeypatch.setattr(ModalServer, "_web_url", lambda self, name: None)
    spec = make_spec()
    logs = tmp_path / "logs"
    server = ModalServer(
        spec.profile, logs_dir=logs, environ=PROXY_ENV, modal_cli=cli, served_model_name="qwen"
    )

    with pytest.raises(ServingError) as info:
        server.start()

    name = spec.app_name()
    message = str(info.value)
    assert f"`modal deploy` of {name} failed (exit 1)" in message
    assert str(logs / "modal_vllm.log") in message
    assert "Secret 'huggingface' not found" in message  # the deploy output's tail
    assert "container says hello" in message  # and the app's own logs
    made = calls(record)
    assert made[0]["argv"] == ["deploy", "-m", modal_app.__name__, "--name", name]
    assert made[0]["spec"] == spec.to_env()[modal_app.SPEC_ENV]
    assert made[1]["argv"] == ["app", "logs", name, "--tail", "200"]


def test_modal_logs_hold_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_cli: tuple[list[str], Path]
) -> None:
    """The Modal CLI's output (deploy, ``modal app logs`` of the container) reaches
    ``modal_vllm.log`` and the failure's message through the session's redactor: the proxy's
    credentials and any secret the session knows, one of several lines too, are
    ``[redacted]``."""
    cli, _ = fake_cli
    environ = {
        "MODAL_PROXY_TOKEN_ID": "wk-MARKmodal-id",
        "MODAL_PROXY_TOKEN_SECRET": "ws-MARKmodal-secret",
        "VLLM_API_KEY": "key-MARKmodal-vllm",
    }
    session_secret = "hf_MARKmodal_session"
    # A secret of several lines, each too short to be looked for alone.
    lines_secret = "k1\nMARKmodal\nk3"
    monkeypatch.setenv("FAKE_MODAL_DEPLOY", "fail")
    said = " ".join([*environ.values(), session_secret, lines_secret])
    monkeypatch.setenv("FAKE_MODAL_SAY", said)
    monkeypatch.setattr(ModalServer, "_web_url", lambda self, name: None)
    logs = tmp_path / "logs"
    server = ModalServer(
        make_spec().profile,
        logs_dir=logs,
        environ=environ,
        modal_cli=cli,
        served_model_name="qwen",
        redactor=Redactor([session_secret, lines_secret]),
    )

    with pytest.raises(ServingError) as info:
        server.start()

    log = (logs / "modal_vllm.log").read_text()
    assert "Secret 'huggingface' not found" in log  # the CLI's output is there
    assert log.count(" ".join(["[redacted]"] * 5)) == 2, log  # deploy, then app logs
    assert "MARKmodal" not in log
    assert "MARKmodal" not in str(info.value)


class FakeVllm:
    """A stand-in for vLLM at a Modal URL: answers /v1/models, records request headers."""

    def __init__(self, served: str) -> None:
        seen: list[dict[str, str]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(dict(self.headers))
                body = json.dumps({"object": "list", "data": [{"id": served}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeVllm:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def fake_vllm() -> Iterator[FakeVllm]:
    with FakeVllm("qwen") as server:
        yield server


@pytest.mark.parametrize(
    ("already_deployed", "keep", "stops_app"),
    [(False, False, True), (False, True, False), (True, False, False)],
    ids=["deploys-and-stops", "keep-deployment", "reuses-and-leaves-it"],
)
def test_start_through_the_proxy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_cli: tuple[list[str], Path],
    fake_vllm: FakeVllm,
    already_deployed: bool,
    keep: bool,
    stops_app: bool,
) -> None:
    cli, record = fake_cli
    provenance = {"source": "model:tokenizer_config.json", "sha256": "ab" * 32}
    monkeypatch.setenv("FAKE_MODAL_LOG_LINE", log_line(provenance))
    deployed = [already_deployed]

    def web_url(self: ModalServer, name: str) -> str | None:
        return fake_vllm.url if deployed[0] or calls(record) else None

    def dict_unreadable(self: ModalServer, name: str) -> object:
        raise ConnectionError("no Modal here")

    monkeypatch.setattr(ModalServer, "_web_url", web_url)
    monkeypatch.setattr(ModalServer, "_read_template_dict", dict_unreadable)
    spec = make_spec()
    server = ModalServer(
        spec.profile,
        logs_dir=tmp_path / "logs",
        environ=PROXY_ENV,
        modal_cli=cli,
        keep_deployment=keep,
        served_model_name="qwen",
        proxy_options={"max_attempts": 2},
    )

    endpoint = server.start()
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", endpoint.base_url)
        assert endpoint.model == "qwen"
        # Modal's secrets stay in the proxy; the client sends only the session's proxy token.
        assert endpoint.headers == server.client_headers
        assert endpoint.chat_template == provenance  # read back from the container's log line
        assert server.start() is endpoint
        # Without the session's token the proxy refuses; with it, it answers.
        bare = httpx.get(f"{endpoint.base_url}/models", trust_env=False)
        assert bare.status_code == 401
        response = httpx.get(
            f"{endpoint.base_url}/models", headers=dict(endpoint.headers), trust_env=False
        )
        assert response.json()["data"][0]["id"] == "qwen"
        upstream = {k.lower(): v for k, v in fake_vllm.seen[-1].items()}
        assert upstream["modal-key"] == "wk-test"
        assert upstream["modal-secret"] == "ws-test"
        assert upstream["authorization"] == "Bearer key-test"
    finally:
        server.stop()
    server.stop()  # idempotent

    name = spec.app_name()
    argvs = [c["argv"] for c in calls(record)]
    assert (["deploy", "-m", modal_app.__name__, "--name", name] in argvs) is not already_deployed
    assert (["app", "stop", name, "--yes"] in argvs) is stops_app
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{endpoint.base_url}/models", trust_env=False)  # the proxy is gone


@pytest.mark.usefixtures("fake_token")
def test_a_run_hands_its_rollouts_to_the_proxy_in_its_process(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole plugin on the Modal backend (the deployed app reused, its URL a local OpenAI
    server that accepts only the injected key): each rollout goes through the proxy's logic
    in this process, not over HTTP to its port, and is logged in the run's proxy.log. Run
    again, the finished benchmark neither looks up nor deploys the app."""
    project.add("alpha", n=6)
    project.server.configure(model="org/x", require_key=PROXY_ENV["VLLM_API_KEY"])
    for var, value in PROXY_ENV.items():
        monkeypatch.setenv(var, value)

    provenance = {"source": "model:tokenizer_config.json", "sha256": "cd" * 32}
    monkeypatch.setattr(ModalServer, "_web_url", lambda self, name: project.server.url)
    monkeypatch.setattr(ModalServer, "_read_template_dict", lambda self, name: provenance)
    forwarded: list[str] = []
    forward = ModalProxy.forward

    async def counted(self: ModalProxy, *args: Any, **kwargs: Any) -> Any:
        forwarded.append(args[2])  # the path
        return await forward(self, *args, **kwargs)

    monkeypatch.setattr(ModalProxy, "forward", counted)
    starts: list[str] = []
    start = ModalServer.start

    def counted_start(self: ModalServer) -> Any:
        starts.append(self.app_name)
        return start(self)

    monkeypatch.setattr(ModalServer, "start", counted_start)

    result = project.pytester.runpytest("--model", "org/x", "--backend", "modal")

    result.assert_outcomes(passed=1)
    assert forwarded == ["/v1/chat/completions"] * 6
    stats = project.server.stats()
    assert stats["completed_requests"] == 6
    assert stats.get("unauthorized", 0) == 0
    [proxy_log] = (project.pytester.path / "outputs").glob("evals/alpha--*/*/logs/proxy.log")
    lines = proxy_log.read_text().splitlines()
    assert len(lines) == 6
    assert all(" POST /v1/chat/completions status=200 hops=0 attempts=1 " in x for x in lines)
    assert len(starts) == 1

    again = project.pytester.runpytest("--model", "org/x", "--backend", "modal")
    again.assert_outcomes(passed=1)
    assert len(starts) == 1
    again.stdout.fnmatch_lines(["*nothing to evaluate, no server was started*"])
    assert project.server.stats()["completed_requests"] == 6


def test_the_containers_requests_to_its_vllm_reach_its_port_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``app._local`` (the container's health and sleep/wake calls) builds its URL from
    parts: a path that is not plain never reaches another port."""
    from pytest_modal_eval.serving.forwarding import ForwardRefused
    from tests.support.modal_server import ModalLikeServer
    from tests.test_forwarding import TRICKS

    vllm, private = ModalLikeServer(), ModalLikeServer()
    vllm.start(), private.start()
    try:
        monkeypatch.setattr(modal_app, "PORT", int(vllm.url.rsplit(":", 1)[1]))
        other = int(private.url.rsplit(":", 1)[1])
        assert modal_app._local("/health") == 200
        for trick in TRICKS:
            with pytest.raises(ForwardRefused):
                modal_app._local(trick.format(other=other), timeout=2)
    finally:
        vllm.stop(), private.stop()
    assert private.seen == []
    assert [s.path_qs for s in vllm.seen] == ["/health"]

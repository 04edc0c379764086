"""The vLLM command line: exact arguments, and (with real vLLM) that vLLM's own parser agrees."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pytest_modal_eval.config.schema import InfraConfig, VllmConfig
from pytest_modal_eval.serving.endpoint import ServerProfile
from pytest_modal_eval.serving.vllm.command import VLLM_MODULE, vllm_args, vllm_command


def profile(**vllm: object) -> ServerProfile:
    return ServerProfile(
        "local", "org/model", InfraConfig.model_validate({}), VllmConfig.model_validate(vllm), None
    )


def test_defaults_are_spelled_out() -> None:
    args = vllm_args(
        profile(), served_model_name="served", host="127.0.0.1", port=8123, chat_template_path=None
    )
    assert args == [
        "--model", "org/model",
        "--served-model-name", "served",
        "--host", "127.0.0.1",
        "--port", "8123",
        "--dtype", "auto",
        "--gpu-memory-utilization", "0.9",
        "--tensor-parallel-size", "1",
        "--data-parallel-size", "1",
        "--enable-prefix-caching",
    ]  # fmt: skip


def test_every_setting_reaches_the_command_line() -> None:
    p = profile(
        revision="v1.0",
        max_model_len=4096,
        gpu_memory_utilization=0.5,
        tensor_parallel_size=2,
        data_parallel_size=4,
        prefix_caching=False,
        trust_remote_code=True,
        dtype="bfloat16",
        enforce_eager=True,
        extra_args=["--max-num-seqs", "64", "--max-model-len=2048"],
    )
    args = vllm_args(
        p, served_model_name="m", host="0.0.0.0", port=8000, chat_template_path="/t/math.jinja"
    )
    assert args == [
        "--model", "org/model",
        "--served-model-name", "m",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--dtype", "bfloat16",
        "--gpu-memory-utilization", "0.5",
        "--tensor-parallel-size", "2",
        "--data-parallel-size", "4",
        "--no-enable-prefix-caching",
        "--revision", "v1.0",
        "--max-model-len", "4096",
        "--trust-remote-code",
        "--enforce-eager",
        "--chat-template", "/t/math.jinja",
        # extra_args last and verbatim, so they override ours
        "--max-num-seqs", "64", "--max-model-len=2048",
    ]  # fmt: skip


def test_command_runs_the_module() -> None:
    assert vllm_command("/py", ["--model", "x"]) == ["/py", "-m", VLLM_MODULE, "--model", "x"]


# What vLLM's parser makes of our arguments, in the vLLM interpreter: the flag spellings are
# checked against the real CLI of the pinned version, without starting a server.
_PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
validate_parsed_serve_args(args)
keys = ["model", "served_model_name", "host", "port", "dtype", "gpu_memory_utilization",
        "tensor_parallel_size", "data_parallel_size", "enable_prefix_caching", "max_model_len",
        "trust_remote_code", "enforce_eager", "chat_template", "max_num_seqs"]
print("PARSED " + json.dumps({k: getattr(args, k) for k in keys}))
"""


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("MODAL_EVAL_VLLM_PYTHON")
    if not python:
        pytest.skip("MODAL_EVAL_VLLM_PYTHON is not set (an interpreter with vLLM's CPU build)")
    try:
        probe = subprocess.run([python, "-c", "import vllm"], capture_output=True, text=True)
    except OSError as exc:
        pytest.skip(f"MODAL_EVAL_VLLM_PYTHON={python} cannot be run: {exc}")
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"MODAL_EVAL_VLLM_PYTHON={python} cannot import vllm: {last}")
    return python


@pytest.mark.vllm
def test_real_vllm_parser_reads_our_flags(vllm_python: str, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0]['content'] }}")
    p = profile(
        max_model_len=4096,
        gpu_memory_utilization=0.5,
        tensor_parallel_size=2,
        prefix_caching=False,
        trust_remote_code=True,
        dtype="float32",
        enforce_eager=True,
        extra_args=["--max-num-seqs", "7"],
    )
    args = vllm_args(
        p, served_model_name="m", host="127.0.0.1", port=8001, chat_template_path=str(template)
    )
    result = subprocess.run(
        [vllm_python, "-c", _PARSE, *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(li for li in result.stdout.splitlines() if li.startswith("PARSED "))
    assert json.loads(line.removeprefix("PARSED ")) == {
        "model": "org/model",
        "served_model_name": ["m"],
        "host": "127.0.0.1",
        "port": 8001,
        "dtype": "float32",
        "gpu_memory_utilization": 0.5,
        "tensor_parallel_size": 2,
        "data_parallel_size": 1,
        "enable_prefix_caching": False,
        "max_model_len": 4096,
        "trust_remote_code": True,
        "enforce_eager": True,
        "chat_template": str(template),
        "max_num_seqs": 7,
    }


def test_vllms_own_start_up_phase_is_read_from_its_log() -> None:
    """The last step vLLM's log names is the phase shown; a warning that merely mentions
    torch.compile (``--enforce-eager``) is not a compilation."""
    from pytest_modal_eval.serving.vllm.startup_log import latest_phase

    steps = [
        ("INFO non-default args: {'host': '127.0.0.1'}", "reading its configuration"),
        ("WARNING Enforce eager set, disabling torch.compile", "reading its configuration"),
        ("INFO Initializing a V1 LLM engine (v0.32.0) with config", "starting the engine"),
        ("Loading safetensors checkpoint shards:   0% Completed", "loading weights"),
        ("INFO Loading weights took 0.01 seconds", "weights loaded"),
        ("INFO CPU KV cache size: 524,288 tokens", "sizing the KV cache"),
        ("INFO Compiling a graph for dynamic shape takes 12.3 s", "compiling (torch.compile)"),
        ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", "capturing graphs"),
        ("INFO init engine (profile, create kv cache, warmup model) took 2.26 s", "engine ready"),
        ("INFO Starting vLLM server on http://127.0.0.1:54427", "starting the API server"),
        ("INFO:     Application startup complete.", "application startup complete"),
    ]
    log = ""
    assert latest_phase(log) is None
    for line, phase in steps:
        log += line + "\n"
        assert latest_phase(log) == phase, line

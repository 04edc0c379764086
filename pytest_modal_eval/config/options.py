"""Command-line options and ini keys, and their resolution into plain :class:`Settings`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit

import pytest

from pytest_modal_eval.config.choices import Backend
from pytest_modal_eval.config.locations import output_dir_from, vllm_python_from
from pytest_modal_eval.config.overrides import parse_override

BACKENDS: tuple[str, ...] = get_args(Backend)
DEFAULT_FILES = ["evals/*.yaml", "evals/*.yml"]


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("modal-eval", "LLM evaluations (pytest-modal-eval)")
    group.addoption(
        "--model",
        dest="modal_eval_model",
        metavar="ORG/NAME",
        action="append",
        default=[],
        help="model under test: a Hugging Face id or a local directory. Repeat it to compare "
        "models: each benchmark becomes one item per model, each compared with the first (the "
        "reference), and a test using eval_endpoint runs once per model. Benchmarks error "
        "without it. Default: none.",
    )
    group.addoption(
        "--override",
        dest="modal_eval_overrides",
        metavar="KEY=VALUE",
        action="append",
        type=parse_override,
        default=[],
        help="override a benchmark setting for this run, e.g. sampling.temperature=0.6 or "
        "infra.gpu=H100:2 (namespaces: infra, vllm, sampling, eval, env_args, gate; values "
        "are YAML scalars). Repeatable. Default: none.",
    )
    group.addoption(
        "--backend",
        dest="modal_eval_backend",
        choices=BACKENDS,
        default=None,
        help="how the model is served: modal (vLLM on Modal behind a local proxy), local "
        "(vLLM subprocess), endpoint (an existing OpenAI-compatible server, see --base-url). "
        "Default: ini modal_eval_backend, else endpoint if --base-url is given, else modal.",
    )
    group.addoption(
        "--base-url",
        dest="modal_eval_base_url",
        metavar="URL",
        default=None,
        help="evaluate against this OpenAI-compatible endpoint (implies --backend endpoint), "
        "e.g. http://127.0.0.1:8000/v1. Default: none.",
    )
    group.addoption(
        "--api-key-env",
        dest="modal_eval_api_key_env",
        metavar="VAR",
        default=None,
        help="name of the environment variable holding the endpoint's API key (keys are never "
        "accepted on the command line). Default: ini modal_eval_api_key_env, else "
        "OPENAI_API_KEY.",
    )
    group.addoption(
        "--eval-output-dir",
        dest="modal_eval_output_dir",
        metavar="DIR",
        default=None,
        help="where runs are written. Default: $MODAL_EVAL_OUTPUT_DIR, else ini "
        "modal_eval_output_dir, else outputs/evals.",
    )
    group.addoption(
        "--eval-fresh",
        dest="modal_eval_fresh",
        action="store_true",
        default=False,
        help="start new runs instead of resuming matching unfinished ones. Default: resume.",
    )
    group.addoption(
        "--keep-deployment",
        dest="modal_eval_keep",
        action="store_true",
        default=False,
        help="leave Modal apps this session deployed running at the end. Default: stop them.",
    )
    group.addoption(
        "--vllm-python",
        dest="modal_eval_vllm_python",
        metavar="PATH",
        default=None,
        help="interpreter that runs vLLM for --backend local (vLLM often lives in its own "
        "environment). Default: $MODAL_EVAL_VLLM_PYTHON, else ini modal_eval_vllm_python, else "
        "the current interpreter.",
    )
    group.addoption(
        "--eval-report",
        dest="modal_eval_report",
        metavar="PATH",
        default=None,
        help="where the session writes its HTML report (one self-contained file); 'none' "
        "writes none. Default: ini modal_eval_report, else report.html in the output "
        "directory.",
    )
    parser.addini(
        "modal_eval_files",
        type="linelist",
        default=DEFAULT_FILES,
        help="glob patterns (relative to rootdir) of benchmark YAML files; other YAML files are "
        f"never collected. Default: {' '.join(DEFAULT_FILES)}",
    )
    parser.addini("modal_eval_backend", default="", help="default --backend")
    parser.addini("modal_eval_api_key_env", default="", help="default --api-key-env")
    parser.addini("modal_eval_output_dir", default="", help="default --eval-output-dir")
    parser.addini("modal_eval_vllm_python", default="", help="default --vllm-python")
    parser.addini("modal_eval_report", default="", help="default --eval-report")
    parser.addini(
        "modal_eval_gpu_prices",
        type="linelist",
        default=[],
        help="USD per GPU-hour for the Modal cost estimate, one 'TYPE = PRICE' per line (e.g. "
        "H100 = 3.95); replaces the built-in list price of that GPU. Default: Modal's list "
        "prices (see docs/serving-costs.md).",
    )


def _distinct_models(models: list[str]) -> tuple[str, ...]:
    repeated = sorted({m for m in models if models.count(m) > 1})
    if repeated:
        raise pytest.UsageError(f"--model {repeated[0]} is given more than once")
    return tuple(models)


@dataclass(frozen=True)
class Settings:
    """Resolved options: plain values, so they cross to xdist workers unchanged."""

    models: tuple[str, ...]  # in command-line order; the first is the reference
    backend: str
    base_url: str | None
    api_key_env: str
    output_dir: Path
    overrides: tuple[tuple[str, Any], ...]
    fresh: bool
    keep_deployment: bool
    vllm_python: str
    files: tuple[str, ...]
    report: Path | None = None  # the session's HTML report; None: none is written
    gpu_prices: tuple[tuple[str, float], ...] = ()  # ini overrides of the Modal price table

    @property
    def model(self) -> str | None:
        """The reference model: the first ``--model`` (the only one, usually)."""
        return self.models[0] if self.models else None


def base_url_problem(base_url: str) -> str | None:
    """Why ``--base-url`` is refused (credentials in it, or a query string), or None; the
    message does not repeat the URL, which may hold a secret."""
    parts = urlsplit(base_url)
    key_hint = (
        "Put the API key in the environment variable --api-key-env names (default "
        "OPENAI_API_KEY); it is sent as 'Authorization: Bearer ...'."
    )
    if "@" in (parts.netloc or ""):
        return (
            "--base-url must not contain credentials (user:password@host): they would be sent "
            f"with every request and could end up in run records. {key_hint}"
        )
    if parts.query or parts.fragment:
        return (
            "--base-url must not have a query string or fragment (?... or #...): clients add "
            "the API path (/models, /chat/completions) after the base URL, so it would not "
            f"reach the server as meant, and a key in it could end up in run records. {key_hint}"
        )
    return None


def resolve_settings(config: pytest.Config) -> Settings:
    def option(name: str) -> Any:
        return config.getoption(name)

    def ini(name: str) -> str:
        return str(config.getini(name) or "")

    base_url = option("modal_eval_base_url")
    backend = option("modal_eval_backend") or (
        "endpoint" if base_url else (ini("modal_eval_backend") or "modal")
    )
    if backend not in BACKENDS:
        raise pytest.UsageError(
            f"ini modal_eval_backend = {backend!r}: choose one of {', '.join(BACKENDS)}"
        )
    if backend == "endpoint" and not base_url:
        raise pytest.UsageError("--backend endpoint needs --base-url URL")
    if base_url and (problem := base_url_problem(base_url)):
        raise pytest.UsageError(problem)
    if base_url and backend != "endpoint":
        raise pytest.UsageError(f"--base-url cannot be combined with --backend {backend}")
    output_dir = output_dir_from(
        option("modal_eval_output_dir"),
        ini("modal_eval_output_dir"),
        Path(config.invocation_params.dir),
        os.environ,
    )
    vllm_python = vllm_python_from(
        option("modal_eval_vllm_python"), ini("modal_eval_vllm_python"), os.environ
    )
    report_option = option("modal_eval_report") or ini("modal_eval_report") or ""
    report: Path | None = None
    if report_option.lower() != "none":
        report = Path(report_option) if report_option else output_dir / "report.html"
        if not report.is_absolute():
            report = Path(config.invocation_params.dir) / report
    return Settings(
        models=_distinct_models(option("modal_eval_model") or []),
        backend=backend,
        base_url=base_url.rstrip("/") if base_url else None,
        api_key_env=option("modal_eval_api_key_env")
        or ini("modal_eval_api_key_env")
        or "OPENAI_API_KEY",
        output_dir=output_dir,
        overrides=tuple(option("modal_eval_overrides") or ()),
        fresh=bool(option("modal_eval_fresh")),
        keep_deployment=bool(option("modal_eval_keep")),
        vllm_python=vllm_python,
        files=tuple(config.getini("modal_eval_files") or DEFAULT_FILES),
        report=report,
        gpu_prices=_gpu_prices(config.getini("modal_eval_gpu_prices") or []),
    )


def _gpu_prices(lines: list[str]) -> tuple[tuple[str, float], ...]:
    from pytest_modal_eval.serving.costs import PriceError, parse_prices

    try:
        return tuple(sorted(parse_prices(lines).items()))
    except PriceError as exc:
        raise pytest.UsageError(str(exc)) from None

"""Command-line options and ini keys, and their resolution into plain :class:`Settings`.

No pytest at run time: the plugin hands in its parser and config, and reports an
:class:`~pytest_modal_eval.exceptions.OptionError` as pytest's usage error.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pytest_modal_eval.config.backends import BACKENDS, BASE_URL_BACKEND, DEFAULT_BACKEND
from pytest_modal_eval.config.locations import output_dir_from, vllm_python_from
from pytest_modal_eval.config.overrides import parse_override
from pytest_modal_eval.exceptions import OptionError

if TYPE_CHECKING:
    import pytest

DEFAULT_FILES = ["evals/*.yaml", "evals/*.yml"]
#: Seconds a benchmark waits for a run another process evaluates (see runs/writer_lock.py).
DEFAULT_LOCK_TIMEOUT_S = 600.0
#: What --eval-lock-timeout gives for "wait as long as it takes".
NO_LOCK_TIMEOUT = -1.0
#: The Modal Volume detached runs keep their files on, unless ini modal_eval_detach_volume names
#: another.
DEFAULT_DETACH_VOLUME = "pytest-modal-eval-runs"
DEFAULT_DETACH_CPU = 2.0
DEFAULT_DETACH_MEMORY_MIB = 4096
#: Set by the detached runner's function in its container (JSON: ``{"cpu": 2.0, "memory_mib":
#: 4096}``): the container's size, which each run's cost record carries.
CONTAINER_ENV = "MODAL_EVAL_CONTAINER"


def parse_lock_timeout(text: str, source: str = "--eval-lock-timeout") -> float:
    """``--eval-lock-timeout``: seconds (0 or more), or ``none`` (:data:`NO_LOCK_TIMEOUT`)."""
    if text.strip().lower() in ("none", "inf", "infinity"):
        return NO_LOCK_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise OptionError(
            f"{source} {text!r}: give seconds (0 or more; 0 errors at once when "
            "another process is evaluating the run) or 'none' to wait as long as it takes"
        )
    return seconds


def parse_shard(text: str, source: str = "--eval-shard") -> tuple[int, int]:
    """``--eval-shard K/N``: the K-th (from 1) of N contiguous shards."""
    index, _, count = text.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        k = n = 0
    if not 1 <= k <= n:
        raise OptionError(
            f"{source} {text!r}: give K/N with 1 <= K <= N, e.g. 2/8 (the second of eight shards)"
        )
    return k, n


def parse_shards(text: str) -> tuple[str, int]:
    """``--detach-shards [BENCHMARK=]N``: ``("", N)`` for every benchmark, else that one's."""
    name, _, count = text.rpartition("=")
    try:
        n = int(count)
    except ValueError:
        n = 0
    if n < 1:
        raise OptionError(
            f"--detach-shards {text!r}: give N (every benchmark in N shards) or BENCHMARK=N, "
            "with N a whole number from 1"
        )
    return name.strip(), n


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
        choices=tuple(BACKENDS),
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
        "--early-stop",
        dest="modal_eval_early_stop",
        action="store_const",
        const=True,
        default=None,
        help="stop each gated benchmark once its verdict is decided (gate.early_stop: true for "
        "every benchmark). Default: each benchmark's gate.early_stop.",
    )
    group.addoption(
        "--no-early-stop",
        dest="modal_eval_early_stop",
        action="store_const",
        const=False,
        help="evaluate every selected example (gate.early_stop: false for every benchmark); "
        "a run stopped early goes on with the examples it did not send. Default: each "
        "benchmark's gate.early_stop.",
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
    group.addoption(
        "--eval-collect-quick",
        dest="modal_eval_collect_quick",
        action="store_true",
        default=False,
        help="with --collect-only: check each benchmark without loading its environment (the "
        "YAML, --override, the environment installed, a bundled environment's data files, a "
        "local --model's files), as every run's collection does; for tools that collect "
        "often, such as an editor's test discovery. -v then prints no plan. Default: load "
        "each environment, a full check.",
    )
    group.addoption(
        "--eval-lock-timeout",
        dest="modal_eval_lock_timeout",
        metavar="SECONDS",
        type=parse_lock_timeout,
        default=None,
        help="how long a benchmark waits for a run another process is evaluating (it then "
        "goes on from what that process finished); 0 errors at once, 'none' waits as long as "
        f"it takes. Default: ini modal_eval_lock_timeout, else {DEFAULT_LOCK_TIMEOUT_S:g}.",
    )
    group.addoption(
        "--eval-shard",
        dest="modal_eval_shard",
        metavar="K/N",
        type=parse_shard,
        default=None,
        help="evaluate only the K-th of N contiguous shards of each benchmark's selected "
        "examples (what --detach-shards gives each container); the shard's run has the "
        "benchmark's answer key. Default: every example.",
    )
    group.addoption(
        "--detach",
        dest="modal_eval_detach",
        action="store_true",
        default=False,
        help="run this pytest session on Modal, in a CPU container, and return at once with "
        "its handle; results are kept on a Modal Volume (see docs/detached.md). Default: run "
        "here.",
    )
    group.addoption(
        "--wait",
        dest="modal_eval_wait",
        action="store_true",
        default=False,
        help="with --detach: follow the session's output until it ends and exit with its exit "
        "status (--junitxml is pulled here); run again after losing it to attach. Default: "
        "return at once.",
    )
    group.addoption(
        "--detach-parallel",
        dest="modal_eval_detach_parallel",
        action="store_true",
        default=False,
        help="with --detach: each benchmark item in a container of its own, then one summary, "
        "gate and report over all of them. Default: one container runs the session.",
    )
    group.addoption(
        "--detach-shards",
        dest="modal_eval_detach_shards",
        metavar="[BENCHMARK=]N",
        action="append",
        type=parse_shards,
        default=[],
        help="with --detach (implies --detach-parallel): split a benchmark's examples into N "
        "shards, each in a container of its own (N alone: every benchmark). Repeatable. "
        "Default: no shards.",
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
    parser.addini("modal_eval_lock_timeout", default="", help="default --eval-lock-timeout")
    parser.addini(
        "modal_eval_secret_env",
        type="linelist",
        default=[],
        help="names of further environment variables whose values are secrets, one per line: "
        "their values are replaced by [redacted] in everything the plugin writes, prints or "
        "shares (as are --api-key-env's, secret-named variables' and the plugin's own "
        "credentials; see docs/security.md). Default: none.",
    )
    parser.addini(
        "modal_eval_detach_volume",
        default="",
        help=f"the Modal Volume --detach keeps sessions and runs on. Default: "
        f"{DEFAULT_DETACH_VOLUME}.",
    )
    parser.addini(
        "modal_eval_detach_env",
        type="linelist",
        default=[],
        help="names of environment variables --detach copies into the container (as a Modal "
        "secret, never into the image or the arguments), beside the session's secret ones "
        "(--api-key-env's, modal_eval_secret_env's, the plugin's credentials), which always "
        "travel. Default: none.",
    )
    parser.addini(
        "modal_eval_detach_secrets",
        type="linelist",
        default=[],
        help="names of Modal secrets (`modal secret create NAME ...`) the --detach container "
        "gets, one per line. Default: none.",
    )
    parser.addini(
        "modal_eval_detach_cpu",
        default="",
        help=f"CPU cores of a --detach container. Default: {DEFAULT_DETACH_CPU:g}.",
    )
    parser.addini(
        "modal_eval_detach_memory",
        default="",
        help=f"memory (MiB) of a --detach container. Default: {DEFAULT_DETACH_MEMORY_MIB}.",
    )
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
        raise OptionError(f"--model {repeated[0]} is given more than once")
    return tuple(models)


@dataclass(frozen=True)
class DetachSettings:
    """``--detach`` and its settings (see :mod:`pytest_modal_eval.detach`)."""

    wait: bool = False
    parallel: bool = False
    # (benchmark, shards): "" names every benchmark
    shards: tuple[tuple[str, int], ...] = ()
    volume: str = DEFAULT_DETACH_VOLUME
    env: tuple[str, ...] = ()  # further variables copied into the container
    secrets: tuple[str, ...] = ()  # named Modal secrets the container gets
    cpu: float = DEFAULT_DETACH_CPU
    memory_mib: int = DEFAULT_DETACH_MEMORY_MIB

    def shards_of(self, benchmark: str) -> int:
        """How many shards ``benchmark`` is split into (1: none)."""
        named = dict(self.shards)
        return named.get(benchmark, named.get("", 1))


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
    secret_env: tuple[str, ...] = ()  # ini modal_eval_secret_env: more secret variables
    # Seconds a benchmark waits for a run another process evaluates; None: as long as it takes.
    lock_timeout_s: float | None = DEFAULT_LOCK_TIMEOUT_S
    # --eval-shard: (K, N), this session evaluates the K-th of N shards of each benchmark.
    shard: tuple[int, int] | None = None
    # --detach: the session runs on Modal (None: here).
    detach: DetachSettings | None = None
    # Inside a detached container (CONTAINER_ENV): its CPU cores and memory (MiB).
    container: tuple[float, int] | None = None
    # --eval-collect-quick: --collect-only loads no environment.
    collect_quick: bool = False

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
    name = option("modal_eval_backend") or (
        BASE_URL_BACKEND if base_url else (ini("modal_eval_backend") or DEFAULT_BACKEND)
    )
    if name not in BACKENDS:
        raise OptionError(f"ini modal_eval_backend = {name!r}: choose one of {', '.join(BACKENDS)}")
    spec = BACKENDS[name]
    if spec.takes_base_url and not base_url:
        raise OptionError(f"--backend {name} needs --base-url URL")
    if base_url and (problem := base_url_problem(base_url)):
        raise OptionError(problem)
    if base_url and not spec.takes_base_url:
        raise OptionError(f"--base-url cannot be combined with --backend {name}")
    output_dir = output_dir_from(
        option("modal_eval_output_dir"),
        lambda: ini("modal_eval_output_dir"),
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
        backend=name,
        base_url=base_url.rstrip("/") if base_url else None,
        api_key_env=option("modal_eval_api_key_env")
        or ini("modal_eval_api_key_env")
        or "OPENAI_API_KEY",
        output_dir=output_dir,
        overrides=_with_early_stop(
            tuple(option("modal_eval_overrides") or ()), option("modal_eval_early_stop")
        ),
        fresh=bool(option("modal_eval_fresh")),
        keep_deployment=bool(option("modal_eval_keep")),
        vllm_python=vllm_python,
        files=tuple(config.getini("modal_eval_files") or DEFAULT_FILES),
        report=report,
        gpu_prices=_gpu_prices(config.getini("modal_eval_gpu_prices") or []),
        secret_env=tuple(config.getini("modal_eval_secret_env") or ()),
        lock_timeout_s=_lock_timeout(option("modal_eval_lock_timeout"), ini),
        shard=option("modal_eval_shard"),
        detach=_detach(option, config.getini, ini),
        container=_container(os.environ.get(CONTAINER_ENV)),
        collect_quick=bool(option("modal_eval_collect_quick")),
    )


def _detach(
    option: Callable[[str], Any], getini: Callable[[str], Any], ini: Callable[[str], str]
) -> DetachSettings | None:
    shards = tuple(option("modal_eval_detach_shards") or ())
    parallel = bool(option("modal_eval_detach_parallel"))
    wait = bool(option("modal_eval_wait"))
    if not option("modal_eval_detach"):
        for given, name in (
            (wait, "--wait"),
            (parallel, "--detach-parallel"),
            (shards, "--detach-shards"),
        ):
            if given:
                raise OptionError(f"{name} goes with --detach")
        return None
    return DetachSettings(
        wait=wait,
        parallel=parallel or bool(shards),
        shards=shards,
        volume=ini("modal_eval_detach_volume").strip() or DEFAULT_DETACH_VOLUME,
        env=tuple(getini("modal_eval_detach_env") or ()),
        secrets=tuple(getini("modal_eval_detach_secrets") or ()),
        cpu=_positive(ini("modal_eval_detach_cpu"), "modal_eval_detach_cpu", DEFAULT_DETACH_CPU),
        memory_mib=int(
            _positive(
                ini("modal_eval_detach_memory"),
                "modal_eval_detach_memory",
                DEFAULT_DETACH_MEMORY_MIB,
            )
        ),
    )


def _positive(text: str, key: str, default: float) -> float:
    if not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise OptionError(f"ini {key} = {text!r}: give a positive number (default {default:g})")
    return value


def _container(text: str | None) -> tuple[float, int] | None:
    """The detached container's size, from :data:`CONTAINER_ENV` (None: not in one)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        return float(data["cpu"]), int(data["memory_mib"])
    except (ValueError, KeyError, TypeError):
        raise OptionError(f"${CONTAINER_ENV} = {text!r} is not the runner's JSON") from None


def _with_early_stop(
    overrides: tuple[tuple[str, Any], ...], early_stop: bool | None
) -> tuple[tuple[str, Any], ...]:
    """``--early-stop`` / ``--no-early-stop`` as the override of ``gate.early_stop`` they are,
    applied after any ``--override`` of it."""
    if early_stop is None:
        return overrides
    return (*overrides, ("gate.early_stop", early_stop))


def _lock_timeout(given: float | None, ini: Callable[[str], str]) -> float | None:
    if given is None:
        text = ini("modal_eval_lock_timeout").strip()
        given = (
            parse_lock_timeout(text, "ini modal_eval_lock_timeout =")
            if text
            else DEFAULT_LOCK_TIMEOUT_S
        )
    return None if given == NO_LOCK_TIMEOUT else given


def _gpu_prices(lines: list[str]) -> tuple[tuple[str, float], ...]:
    from pytest_modal_eval.config.gpu_prices import PriceError, parse_prices

    try:
        return tuple(sorted(parse_prices(lines).items()))
    except PriceError as exc:
        raise OptionError(str(exc)) from None

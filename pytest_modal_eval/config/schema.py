"""Benchmark configuration: the schema of a benchmark YAML and its three layers.

Layers, later wins: the defaults written in these models -> the benchmark YAML ->
``--override KEY=VALUE``. Every model forbids unknown keys and is strict about types,
because a typo in an eval config silently changes what is measured.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
#: Model turns a v1 rollout may take when the benchmark sets no ``eval.max_turns``: a bound
#: for a model that keeps calling tools, far above what a task answered with tools needs.
DEFAULT_MAX_TURNS = 50

#: The error type of a secret flag in ``vllm.extra_args``, whose input is never shown.
SECRET_FLAG_ERROR = "secret_on_command_line"

#: Chat templates bundled in pytest_modal_eval/serving/chat_templates/, used when a model has none.
FALLBACK_TEMPLATES = ("base", "code", "math", "think")

GPU_TYPES = (
    "T4",
    "L4",
    "A10",
    "A10G",
    "L40S",
    "A100",
    "A100-40GB",
    "A100-80GB",
    "H100",
    "H200",
    "B200",
)


class InfraConfig(BaseModel):
    """Where the model runs. Never part of the answer-changing hash."""

    model_config = _STRICT

    gpu: str = Field(
        "A100-80GB:1",
        description=f"Modal GPU, TYPE[:COUNT] (e.g. 'H100:2'); TYPE one of {', '.join(GPU_TYPES)}; "
        "COUNT 1-8",
    )
    timeout: int = Field(
        3600, gt=0, description="unused on Modal Servers (a container lives until scaled down)"
    )
    scaledown_window: int = Field(300, gt=0, description="idle seconds before Modal scales to 0")
    max_concurrent_inputs: int = Field(
        256, gt=0, description="requests one vLLM container accepts at once"
    )
    startup_timeout: int = Field(
        1200, gt=0, description="seconds vLLM may take to come up (Modal and local)"
    )
    min_containers: int = Field(
        0, ge=0, description="vLLM replicas Modal keeps up even when idle (1: always warm)"
    )
    max_containers: int = Field(
        1, ge=1, description="most vLLM replicas Modal runs behind its load balancer"
    )
    target_concurrency: float | None = Field(
        None,
        gt=0,
        description="requests per replica Modal's autoscaler aims at before adding one; "
        "null = max_concurrent_inputs",
    )
    memory_snapshot: bool = Field(
        False, description="restore new containers from a memory snapshot of a started vLLM"
    )

    @field_validator("gpu")
    @classmethod
    def _check_gpu(cls, value: str) -> str:
        kind, _, count = value.partition(":")
        if kind.upper() not in GPU_TYPES:
            raise ValueError(f"unknown GPU type {kind!r}; one of {', '.join(GPU_TYPES)}")
        if count and not (count.isdigit() and 1 <= int(count) <= 8):
            raise ValueError(f"GPU count must be 1..8, got {count!r}")
        return value

    @property
    def gpu_count(self) -> int:
        _, _, count = self.gpu.partition(":")
        return int(count) if count else 1


class VllmConfig(BaseModel):
    """vLLM server arguments."""

    model_config = _STRICT

    max_model_len: int | None = Field(None, gt=0, description="context length; null = model's")
    revision: str | None = Field(
        None,
        min_length=1,
        description="Hub revision of the model (branch, tag or commit), passed to vLLM as "
        "--revision; null = the Hub's main branch as it is when the run starts",
    )
    gpu_memory_utilization: float = Field(
        0.90, gt=0, le=1, description="share of GPU memory vLLM may use (--gpu-memory-utilization)"
    )
    tensor_parallel_size: int = Field(
        1, ge=1, description="GPUs one model copy is split over (--tensor-parallel-size)"
    )
    data_parallel_size: int = Field(
        1, ge=1, description="model copies serving in parallel (--data-parallel-size)"
    )
    prefix_caching: bool = Field(True, description="reuse the KV cache of shared prompt prefixes")
    trust_remote_code: bool = Field(
        False, description="run the model repository's own Python code (--trust-remote-code)"
    )
    dtype: str = Field("auto", description="vLLM --dtype (auto, bfloat16, float16, float32)")
    enforce_eager: bool = Field(False, description="skip CUDA graph capture: faster boot")
    extra_args: list[str] = Field(
        default_factory=list,
        description="further vLLM CLI arguments, verbatim; no secret flag (--hf-token, "
        "--api-key): vLLM reads those from its environment",
    )

    @field_validator("extra_args")
    @classmethod
    def _no_secret_flags(cls, args: list[str]) -> list[str]:
        from pydantic_core import PydanticCustomError

        from pytest_modal_eval.redact import secret_flags_problem

        problem = secret_flags_problem(args)
        if problem is not None:
            # Its own type: the loader shows this error without the input (the secret).
            raise PydanticCustomError(SECRET_FLAG_ERROR, problem)
        return args


class SamplingConfig(BaseModel):
    """Sampling arguments of every request."""

    model_config = _STRICT

    temperature: float = Field(0.0, ge=0, description="sampling temperature; 0 = greedy")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling: probability mass kept")
    max_tokens: int | None = Field(
        2048, gt=0, description="tokens one completion may have; null for no limit"
    )
    seed: int | None = Field(
        0,
        description="rollout r of an example samples with seed + r, so rollouts differ yet "
        "every run draws the same ones; null leaves the seed unset",
    )

    def as_request_args(self) -> dict[str, Any]:
        """The OpenAI sampling arguments, without unset ones."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class EvalConfig(BaseModel):
    """How the examples are run."""

    model_config = _STRICT

    num_examples: int | None = Field(None, gt=0, description="the first N examples; null = all")
    rollouts: int = Field(1, ge=1, description="rollouts per example")
    max_concurrent: int = Field(
        64,
        ge=1,
        description="requests in flight (not verifiers' groups: with 4 rollouts, 16 examples)",
    )
    prefetch: int = Field(
        1,
        ge=0,
        description="examples started ahead per example in flight, waiting to send the moment "
        "an answer frees a request slot; 0 for environments whose rollouts are costly to set up",
    )
    checkpoint_every: int = Field(
        100, ge=1, description="examples between fsyncs of checkpoint.jsonl (each is flushed)"
    )
    request_timeout: float = Field(
        7200.0, gt=0, description="seconds one request may take before it counts as errored"
    )
    max_retries: int = Field(
        3,
        ge=0,
        description="client retries of one request (connection errors, timeouts, 408, 409, 429, "
        "5xx; waits for Retry-After up to 2 min, else 0.5 s doubling to 8 s)",
    )
    max_turns: int = Field(
        DEFAULT_MAX_TURNS,
        ge=1,
        description="model turns one rollout may take (verifiers 0.4 tasksets; the classic API's "
        "environments set their own); a rollout still going then is stopped and errored, not "
        "scored",
    )
    pass_k: list[int] | None = Field(
        None,
        description="k values of pass@k (each <= rollouts); null = 1 and the powers of two up "
        "to rollouts",
    )

    @field_validator("pass_k")
    @classmethod
    def _check_pass_k(cls, ks: list[int] | None) -> list[int] | None:
        if ks is not None:
            if not ks:
                raise ValueError("give at least one k, or null for the default")
            if any(k < 1 for k in ks):
                raise ValueError(f"every k must be >= 1, got {ks}")
        return ks

    @model_validator(mode="after")
    def _pass_k_within_rollouts(self) -> EvalConfig:
        too_large = [k for k in self.pass_k or () if k > self.rollouts]
        if too_large:
            raise ValueError(
                f"pass_k {too_large} needs at least {max(too_large)} rollouts per example; "
                f"raise eval.rollouts (now {self.rollouts}) or drop those k"
            )
        return self

    def pass_ks(self) -> list[int]:
        """The k values of pass@k reported for this benchmark."""
        from pytest_modal_eval.stats.pass_k import default_ks

        return sorted(set(self.pass_k)) if self.pass_k else default_ks(self.rollouts)


class AgentConfig(BaseModel):
    """How a verifiers 0.4 environment is played: its Env, its seats' harness and runtime."""

    model_config = _STRICT

    harness: str | dict[str, Any] | None = Field(
        None,
        description="harness id (bash, 'null' quoted, pytest-modal-eval-chat, an installed "
        "package) or a verifiers harness config {id: ..., ...} for every seat whose environment "
        "pins none; null = the environment's own (its bundled harness, else verifiers' bash)",
    )
    runtime: str | dict[str, Any] | None = Field(
        None,
        description="runtime of every seat: subprocess, docker, podman, apptainer or modal "
        "(one Modal sandbox per rollout), or a verifiers runtime config {type: docker, image: "
        "...}; null = the one the environment pins, else subprocess",
    )
    seat: str | None = Field(
        None,
        description="with several seats (a two-player game): the headline seat, whose reward "
        "is the run's avg_reward, its baseline and its gate (every seat has its own records and "
        "figures); null = the only seat, or with gate.every_seat the environment's first",
    )
    env: str | dict[str, Any] | None = Field(
        None,
        description="a reusable verifiers Env to play the taskset with, by id (best-of-n, "
        "user-sim, ..., or an installed package), as vf-eval --env.id; or {id: ..., <its "
        "config values>, <seat>: {model, client, sampling}}; null = the taskset's own Env, "
        "else SingleAgentEnv",
    )


class VsReferenceConfig(BaseModel):
    """With several ``--model``: fail a model significantly worse than the first (the reference)."""

    model_config = _STRICT

    max_drop: float = Field(
        0.0, ge=0, description="tolerated absolute drop in mean reward below the reference"
    )
    alpha: float = Field(
        0.05,
        gt=0,
        lt=0.5,
        description="significance level of the one-sided paired test; its interval is "
        "two-sided at 1 - 2 alpha",
    )


class GateConfig(BaseModel):
    """When the benchmark item fails."""

    model_config = _STRICT

    min_avg_reward: float | None = Field(
        None,
        description="fail when the mean reward is below this; null = no threshold (negative "
        "for an environment whose rewards go below 0, e.g. a game's payoffs)",
    )
    min_metrics: dict[str, float] = Field(
        default_factory=dict, description="{metric: minimum} for the environment's other metrics"
    )
    max_error_rate: float = Field(
        0.0, ge=0, le=1, description="tolerated share of examples that could not be evaluated"
    )
    max_drop: float = Field(
        0.0, ge=0, description="with a baseline: tolerated absolute drop in mean reward"
    )
    alpha: float = Field(
        0.05,
        gt=0,
        lt=0.5,
        description="with a baseline: significance level of the one-sided test (its interval is "
        "two-sided at 1 - 2 alpha); with early_stop: the most often an early verdict may "
        "differ from the full run's",
    )
    early_stop: bool = Field(
        False,
        description="send examples in a seeded random order and stop once confidence sequences "
        "decide min_avg_reward, min_metrics and the baseline / vs_reference comparisons (valid "
        "at every look; see docs/gates.md)",
    )
    reward_range: list[float] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="[lowest, highest] reward a rollout can get: early stop's confidence "
        "sequences need it before the first example (null = [0, 1]), and the reported "
        "interval lies within it (null: [0, 1] when every reward does, else the rewards seen)",
    )
    vs_reference: VsReferenceConfig | None = Field(
        None, description="with several --model: fail a model significantly worse than the first"
    )
    every_seat: bool = Field(
        False,
        description="with several seats (a two-player game): apply min_avg_reward and "
        "min_metrics to every seat's own figures, not only to agent.seat's (no early_stop then)",
    )

    @field_validator("reward_range")
    @classmethod
    def _check_reward_range(cls, bounds: list[float] | None) -> list[float] | None:
        if bounds is not None and not (
            math.isfinite(bounds[0] + bounds[1]) and bounds[0] < bounds[1]
        ):
            raise ValueError("give [lowest, highest] with lowest < highest, both finite")
        return bounds

    @model_validator(mode="after")
    def _early_stop_thresholds_in_range(self) -> GateConfig:
        """Early stop's sequences need every gated value's bounds before the first example:
        a minimum outside them could never be decided right."""
        if not self.early_stop or self.every_seat:  # every_seat: no early stop
            return self
        low, high = self.rewards_bounds
        if self.min_avg_reward is not None and not low <= self.min_avg_reward <= high:
            where = "gate.reward_range" if self.reward_range else "the default"
            raise ValueError(
                f"gate.min_avg_reward {self.min_avg_reward:g} is outside [{low:g}, {high:g}], "
                f"the rewards' range gate.early_stop assumes ({where}): declare the range "
                "the rubric's rewards lie in with gate.reward_range: [lowest, highest], or turn "
                "early stop off (gate.early_stop: false, --no-early-stop)"
            )
        for metric, minimum in sorted(self.min_metrics.items()):
            if not 0.0 <= minimum <= 1.0:
                raise ValueError(
                    f"gate.min_metrics.{metric} {minimum:g} is outside [0, 1], the range "
                    "gate.early_stop assumes for a metric: gate a metric in [0, 1], or turn "
                    "early stop off (gate.early_stop: false, --no-early-stop)"
                )
        return self

    @property
    def rewards_bounds(self) -> tuple[float, float]:
        """The range early stop assumes each rollout's reward lies in."""
        low, high = self.reward_range or (0.0, 1.0)
        return low, high


class BenchmarkConfig(BaseModel):
    """One benchmark YAML, fully resolved."""

    model_config = _STRICT

    env_id: str = Field(min_length=1, description="verifiers environment id (file-qa is bundled)")
    name: str | None = Field(
        None, description="item name (-k matches it); no '[' or '::'; null = the file's stem"
    )
    env_args: dict[str, Any] = Field(
        default_factory=dict, description="arguments to the environment's load_environment"
    )
    agent: AgentConfig = Field(
        default_factory=AgentConfig,  # type: ignore[arg-type]
        description="how a verifiers 0.4 environment is played: harness, runtime, scored seat, "
        "a reusable Env",
    )
    chat_template: str | None = Field(
        None,
        description=f"fallback chat template when the model has none: "
        f"{', '.join(FALLBACK_TEMPLATES)}, or a .jinja path relative to the YAML",
    )
    infra: InfraConfig = Field(
        default_factory=InfraConfig,  # type: ignore[arg-type]
        description="where the model runs",
    )
    vllm: VllmConfig = Field(
        default_factory=VllmConfig,  # type: ignore[arg-type]
        description="vLLM server arguments",
    )
    sampling: SamplingConfig = Field(
        default_factory=SamplingConfig,  # type: ignore[arg-type]
        description="sampling arguments of every request",
    )
    eval: EvalConfig = Field(
        default_factory=EvalConfig,  # type: ignore[arg-type]
        description="how the examples are run",
    )
    gate: GateConfig = Field(
        default_factory=GateConfig,  # type: ignore[arg-type]
        description="when the item fails",
    )
    tags: list[str] = Field(default_factory=list, description="markers for -m (Python identifiers)")

    @field_validator("chat_template")
    @classmethod
    def _check_template(cls, value: str | None) -> str | None:
        if value is not None and value not in FALLBACK_TEMPLATES and not value.endswith(".jinja"):
            raise ValueError(
                f"use one of {', '.join(FALLBACK_TEMPLATES)} or a path to a .jinja file"
            )
        return value

    @model_validator(mode="after")
    def _pass_k_gates_within_rollouts(self) -> BenchmarkConfig:
        from pytest_modal_eval.stats.pass_k import parse_metric_name

        for metric in self.gate.min_metrics:
            k = parse_metric_name(metric)
            if k is not None and k > self.eval.rollouts:
                raise ValueError(
                    f"gate.min_metrics.{metric} needs at least {k} rollouts per example; raise "
                    f"eval.rollouts (now {self.eval.rollouts}) or gate a smaller k"
                )
        return self

    @field_validator("tags")
    @classmethod
    def _check_tags(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not tag.isidentifier():
                raise ValueError(f"tag {tag!r} must be a Python identifier (it becomes a marker)")
        return tags


#: The namespaces ``--override`` accepts, mapped to the model that validates them.
OVERRIDE_NAMESPACES: dict[str, type[BaseModel] | None] = {
    "infra": InfraConfig,
    "vllm": VllmConfig,
    "sampling": SamplingConfig,
    "eval": EvalConfig,
    "gate": GateConfig,
    "agent": AgentConfig,
    "env_args": None,  # free-form: the environment validates its own arguments
}

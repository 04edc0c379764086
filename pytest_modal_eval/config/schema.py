"""Benchmark configuration: the schema of a benchmark YAML and its three layers.

Layers, later wins: the defaults written in these models -> the benchmark YAML ->
``--override KEY=VALUE``. Every model forbids unknown keys and is strict about types,
because a typo in an eval config silently changes what is measured.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)

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

    gpu: str = Field("A100-80GB:1", description="Modal GPU spec, TYPE[:COUNT], e.g. 'H100:2'")
    timeout: int = Field(3600, gt=0, description="Modal function timeout, seconds")
    scaledown_window: int = Field(300, gt=0, description="idle seconds before Modal scales to 0")
    max_concurrent_inputs: int = Field(
        256, gt=0, description="requests one vLLM container accepts at once"
    )
    startup_timeout: int = Field(1200, gt=0, description="seconds vLLM may take to come up")

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
    gpu_memory_utilization: float = Field(0.90, gt=0, le=1)
    tensor_parallel_size: int = Field(1, ge=1)
    data_parallel_size: int = Field(1, ge=1)
    prefix_caching: bool = True
    trust_remote_code: bool = False
    dtype: str = Field("auto", description="vLLM --dtype (auto, bfloat16, float16, float32)")
    enforce_eager: bool = Field(False, description="skip CUDA graph capture: faster boot")
    extra_args: list[str] = Field(
        default_factory=list, description="further vLLM CLI arguments, verbatim"
    )


class SamplingConfig(BaseModel):
    model_config = _STRICT

    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(2048, gt=0)
    seed: int | None = 0

    def as_request_args(self) -> dict[str, Any]:
        """The OpenAI sampling arguments, without unset ones."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class EvalConfig(BaseModel):
    model_config = _STRICT

    num_examples: int | None = Field(None, gt=0, description="null = all examples")
    rollouts: int = Field(1, ge=1, description="rollouts per example")
    max_concurrent: int = Field(64, ge=1, description="requests in flight, not groups")
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
        7200.0, gt=0, description="seconds one request may take before it errors"
    )
    max_retries: int = Field(3, ge=0, description="client retries of one request")


class GateConfig(BaseModel):
    model_config = _STRICT

    min_avg_reward: float | None = Field(None, ge=0, description="fail below this mean reward")
    min_metrics: dict[str, float] = Field(default_factory=dict)
    max_error_rate: float = Field(0.0, ge=0, le=1, description="tolerated errored fraction")
    max_drop: float = Field(
        0.0, ge=0, description="with a baseline: tolerated absolute drop in mean reward"
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="with a baseline: significance level")


class BenchmarkConfig(BaseModel):
    """One benchmark YAML, fully resolved."""

    model_config = _STRICT

    env_id: str = Field(min_length=1)
    name: str | None = None
    env_args: dict[str, Any] = Field(default_factory=dict)
    chat_template: str | None = Field(
        None, description="fallback template: base, code, math, think, or a .jinja path"
    )
    infra: InfraConfig = Field(default_factory=InfraConfig)  # type: ignore[arg-type]
    vllm: VllmConfig = Field(default_factory=VllmConfig)  # type: ignore[arg-type]
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)  # type: ignore[arg-type]
    eval: EvalConfig = Field(default_factory=EvalConfig)  # type: ignore[arg-type]
    gate: GateConfig = Field(default_factory=GateConfig)  # type: ignore[arg-type]
    tags: list[str] = Field(default_factory=list)

    @field_validator("chat_template")
    @classmethod
    def _check_template(cls, value: str | None) -> str | None:
        if value is not None and value not in FALLBACK_TEMPLATES and not value.endswith(".jinja"):
            raise ValueError(
                f"use one of {', '.join(FALLBACK_TEMPLATES)} or a path to a .jinja file"
            )
        return value

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
    "env_args": None,  # free-form: the environment validates its own arguments
}

Backend = Literal["modal", "local", "endpoint"]

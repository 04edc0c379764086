"""``pytest-modal-eval deploy``: put a benchmark's server on Modal and leave it running.

A later ``pytest evals/ --model MODEL`` finds the app by name (the name is a hash of what
the server answers with, :meth:`DeploySpec.app_name`), uses it and does not stop it: a run
stops only what it deployed itself.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from pytest_modal_eval.config.overrides import parse_override
from pytest_modal_eval.serving.modal.app import DeploySpec


def deploy_spec(
    model: str,
    benchmark_path: str | Path,
    overrides: tuple[str, ...] | list[str],
    *,
    warm: bool = False,
) -> DeploySpec:
    """The spec ``pytest --model MODEL`` would deploy for this benchmark (plus ``--warm``)."""
    from pytest_modal_eval.config.backends import MODAL
    from pytest_modal_eval.config.loader import load_benchmark
    from pytest_modal_eval.exceptions import BenchmarkError
    from pytest_modal_eval.runs.identity import hub_identity
    from pytest_modal_eval.serving.endpoint import ServerProfile

    parsed = [parse_override(text) for text in overrides]
    if warm:
        parsed.append(("infra.min_containers", 1))
    try:
        benchmark = load_benchmark(Path(benchmark_path), parsed)
    except BenchmarkError as exc:
        raise click.ClickException(str(exc)) from None
    config = benchmark.config
    template = config.chat_template
    if template is not None and template.endswith(".jinja"):
        template = str((benchmark.path.parent / template).resolve())
    vllm = config.vllm
    # At the commit the Hub names now, as `pytest --model MODEL` starts it
    # (runs/identity.pin_revision), so that run finds this app by name.
    commit = hub_identity(model, vllm.revision).hub_commit
    if commit is not None and vllm.revision != commit:
        vllm = vllm.model_copy(update={"revision": commit})
    profile = ServerProfile(MODAL.name, model, config.infra, vllm, template)
    return DeploySpec.for_profile(profile, model)


def _checked(overrides: tuple[str, ...]) -> list[str]:
    from pytest_modal_eval.cli.common import parsed_overrides

    parsed_overrides(overrides)  # a bad one is a usage error, before anything is deployed
    return list(overrides)


@click.command()
@click.option("-m", "--model", required=True, metavar="ORG/NAME", help="Hugging Face model id")
@click.option(
    "-b",
    "--benchmark",
    "benchmark_path",
    required=True,
    metavar="YAML",
    type=click.Path(exists=True, dir_okay=False),
    help="the benchmark whose server profile (infra, vllm, chat_template) to deploy",
)
@click.option(
    "--override",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    help="as for pytest, e.g. infra.max_containers=4. Repeatable.",
)
@click.option(
    "--warm", is_flag=True, help="keep one container up (infra.min_containers=1) until `stop`"
)
@click.option(
    "--wait/--no-wait",
    default=True,
    help="wait until vLLM answers and report the start-up time. Default: wait.",
)
@click.option(
    "--eval-output-dir",
    "output_dir",
    metavar="DIR",
    default=None,
    help="where the deployment's logs go (under logs/). Default: as for pytest.",
)
@click.pass_context
def deploy(
    ctx: click.Context,
    model: str,
    benchmark_path: str,
    overrides: tuple[str, ...],
    warm: bool,
    wait: bool,
    output_dir: str | None,
) -> None:
    """Deploy a benchmark's vLLM server on Modal and leave it running.

    `pytest evals/ --model MODEL` then uses it instead of deploying again, and does not stop
    it. Apply changed scaling settings by deploying again.
    """
    from pytest_modal_eval.cli.common import project_redactor, resolve_output_dir, say
    from pytest_modal_eval.config.locations import server_logs_dir
    from pytest_modal_eval.exceptions import ServingError
    from pytest_modal_eval.serving.modal.backend import ModalServer

    spec = deploy_spec(model, benchmark_path, _checked(overrides), warm=warm)
    logs = server_logs_dir(resolve_output_dir(output_dir)) / f"modal-{spec.profile.key()}"
    server = ModalServer(
        spec.profile,
        logs_dir=logs,
        keep_deployment=True,
        served_model_name=model,
        redeploy=True,
        redactor=project_redactor(None),
        **((ctx.find_root().obj or {}).get("modal_server_options") or {}),
    )
    began = time.monotonic()
    try:
        if wait:
            server.start()
            server.stop()  # the local proxy only: keep_deployment leaves the app up
        else:
            server.deploy_only()
    except ServingError as exc:
        raise click.ClickException(str(exc)) from None
    name = spec.app_name()
    say(
        f"deployed {name}  ({model}, GPU {spec.profile.infra.gpu}, "
        f"min/max containers {spec.profile.infra.min_containers}/"
        f"{spec.profile.infra.max_containers})"
    )
    say(f"url: {server.url}")
    timings = server.timings
    if timings:
        click.echo(
            "start-up: "
            + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
            + f" (total {time.monotonic() - began:.1f}s)"
        )
    click.echo(f"logs: {server.log_path}")
    click.echo(f"stop it with: pytest-modal-eval stop -m {model} -b {benchmark_path} -y")

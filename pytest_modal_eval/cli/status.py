"""``pytest-modal-eval status``: this tool's deployments on Modal."""

from __future__ import annotations

from typing import Any

import click

from pytest_modal_eval.cli.common import age, echo_json, json_option, say, shown, table
from pytest_modal_eval.cli.modal_apps import modal_apps
from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.runs.paths import parse_time


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """This tool's apps on Modal: model, GPU, TP/DP, state, containers, URL, age, start-up."""
    from pytest_modal_eval.serving.modal.backend import check_modal_token

    apps = modal_apps(ctx)
    try:
        if ctx.find_root().obj is None or "modal_apps" not in ctx.find_root().obj:
            check_modal_token()
        records = [r for r in apps.deployed() if r.ours]
        rows: list[dict[str, Any]] = []
        for r in records:
            startups = apps.startups(r.name)
            rows.append(
                {
                    "app": r.name,
                    "model": r.tags.get("model", "?"),
                    "gpu": r.tags.get("gpu", "?"),
                    "tp": r.tags.get("tp", "?"),
                    "dp": r.tags.get("dp", "?"),
                    "state": r.state,
                    "containers": r.tasks,
                    "url": apps.web_url(r.name),
                    "created_at": r.created_at,
                    "startups": startups,
                }
            )
    except ServingError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no deployments of pytest-modal-eval on Modal")
        return
    # Each cell on one line: a name or URL with a newline would break the table.
    shown_rows: list[dict[str, Any]] = [
        {k: shown(v, newlines=False) if isinstance(v, str) else v for k, v in row.items()}
        for row in rows
    ]
    say(
        table(
            ["APP", "MODEL", "GPU", "TP/DP", "STATE", "CONTAINERS", "AGE", "LAST START-UP", "URL"],
            [
                [
                    row["app"],
                    row["model"],
                    row["gpu"],
                    f"{row['tp']}/{row['dp']}",
                    row["state"],
                    str(row["containers"]),
                    age(parse_time(row["created_at"])),
                    _startup_text(row["startups"]),
                    row["url"] or "-",
                ]
                for row in shown_rows
            ],
        )
    )


def _startup_text(startups: list[dict[str, Any]]) -> str:
    if not startups:
        return "-"
    last = startups[-1]
    return f"{last['seconds']:.0f}s{' (snapshot)' if last.get('snapshot') else ''}"

"""The ``pytest-modal-eval`` command: what happens around evaluations (``pytest`` runs them).

Each command lives in its own module of this package and is registered in :data:`COMMANDS`;
the group imports a command's module only when that command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

#: Command name -> "module:attribute" of its click command, in the order ``--help`` lists them.
COMMANDS: dict[str, str] = {
    "benchmarks": "pytest_modal_eval.cli.benchmarks:benchmarks",
    "runs": "pytest_modal_eval.cli.runs:runs",
    "show": "pytest_modal_eval.cli.show:show",
    "deploy": "pytest_modal_eval.cli.deploy:deploy",
    "status": "pytest_modal_eval.cli.status:status",
    "stop": "pytest_modal_eval.cli.stop:stop",
    "doctor": "pytest_modal_eval.cli.doctor:doctor",
    "compare": "pytest_modal_eval.cli.compare:compare",
    "report": "pytest_modal_eval.cli.report:report",
    "push": "pytest_modal_eval.cli.push:push",
    "pull": "pytest_modal_eval.cli.pull:pull",
    "logs": "pytest_modal_eval.cli.logs:logs",
}


class LazyGroup(click.Group):
    """A group whose commands are imported when used (or when ``--help`` lists them).

    A damaged run file, a run that cannot be found or a file that cannot be written ends any
    command in the same one line (``Error: ...``, exit status 1), with no traceback. Every
    error line is shown as the commands' output is (``cli.common.shown``): it may quote a run
    file or a server, so secrets are replaced and control characters escaped.
    """

    def invoke(self, ctx: click.Context) -> Any:
        from pytest_modal_eval.cli.common import shown
        from pytest_modal_eval.exceptions import RecordingError, RunFileError
        from pytest_modal_eval.runs.locate import RunNotFound

        try:
            try:
                return super().invoke(ctx)
            except (RunFileError, RunNotFound, RecordingError) as exc:
                raise click.ClickException(str(exc)) from None
        except click.ClickException as exc:
            # click types ``message`` as final; it is a plain attribute its ``show`` reads.
            setattr(exc, "message", shown(exc.message, context=ctx))  # noqa: B010
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, _, attribute = COMMANDS[cmd_name].partition(":")
            command: Any = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pytest-modal-eval")
def main() -> None:
    """Deployments, runs and results of pytest-modal-eval. Evaluate with `pytest evals/`."""

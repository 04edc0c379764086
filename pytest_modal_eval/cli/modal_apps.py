"""How the Modal commands reach Modal: a :class:`ModalApps`, replaceable in tests."""

from __future__ import annotations

import click

from pytest_modal_eval.serving.modal.apps import ModalApps


def modal_apps(ctx: click.Context) -> ModalApps:
    """``ctx.obj["modal_apps"]`` when given (tests pass a stand-in), else the real Modal."""
    given = (ctx.find_root().obj or {}).get("modal_apps")
    if given is not None:
        return given  # type: ignore[no-any-return]
    from pytest_modal_eval.serving.modal.apps import ModalCliApps

    return ModalCliApps()

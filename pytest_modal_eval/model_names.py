"""A model id's spellings: the label in test ids, Modal tags and ``runs --model``; the slug in
run directories' names.

A model id has one spelling for people and paths, its label (:func:`model_label`). A run
directory's name is the label, with ``local--`` before a directory's (:func:`model_slug`), so
that ``org/x`` and a directory named ``x`` never share runs; runs stored under an earlier
spelling (:func:`earlier_model_slugs`) stay found. Which weights a name stands for is another
matter, the answer key's (``runs/identity.py``).

Standard library only: the servers' layer names its Modal apps' tags with these, and the Modal
container imports that module without this plugin's dependencies.
"""

from __future__ import annotations

import re
from pathlib import Path

_NOT_IN_A_LABEL = re.compile(r"[^A-Za-z0-9._-]")


def model_label(model: str) -> str:
    """The model's one spelling for people and paths: ``Qwen/Qwen3-8B`` -> ``Qwen--Qwen3-8B``;
    ``./ckpt/step-100/`` -> ``step-100``. Only letters, digits, ``.``, ``_`` and ``-``: it goes
    into test ids (where ``[`` or ``::`` would break ``--lf``), directory names and Modal tags."""
    path = Path(model).expanduser()
    text = path.name if path.is_dir() else "--".join(p for p in model.split("/") if p)
    return _NOT_IN_A_LABEL.sub("-", text) or "model"


def model_slug(model: str) -> str:
    """The model's part of a run directory's name: its :func:`model_label`, after the kind of
    name it is where the label alone could be mistaken for another: ``org/name`` ->
    ``org--name``; ``name`` -> ``name``; a local directory -> ``local--dirname`` (named by the
    directory a symlink points to, so a renamed link keeps its runs). An id without an
    organisation whose label holds ``--`` (no Hub id does; a served name may) is
    ``default--<label>``, so that it never reads as an ``org/name`` or a directory's slug."""
    path = Path(model).expanduser()
    if path.is_dir():
        return f"local--{model_label(str(path.resolve()))}"
    label = model_label(model)
    if len([p for p in model.split("/") if p]) > 1 or "--" not in label:
        return label
    return f"default--{label}"


def earlier_model_slugs(model: str) -> list[str]:
    """The slugs runs of ``model`` were stored under by earlier spellings, other than
    :func:`model_slug`'s, newest first: an id without an organisation was ``default--<label>``,
    and before slugs were spelled from the label, the id's plain spelling (``/`` as ``--``,
    nothing replaced: ``org--a b``). Such runs are found and continued under those names."""
    path = Path(model)
    if path.is_dir():
        earlier = [f"local--{path.resolve().name}"]
    else:
        parts = [p for p in model.strip("/").split("/") if p]
        if len(parts) > 1:
            earlier = ["--".join(parts)]
        else:
            earlier = [f"default--{model_label(model)}", f"default--{parts[0] if parts else ''}"]
    current = model_slug(model)
    return [slug for slug in dict.fromkeys(earlier) if slug != current]

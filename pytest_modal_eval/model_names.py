"""A model id's spellings: the label in test ids, Modal tags and ``runs --model``; the slug in
run directories' names.

A model id has one spelling for people and paths, its label (:func:`model_label`). A run
directory's name puts before it what kind of name it is (``local--`` a directory, ``default--``
an id without an organisation: :func:`model_slug`), so that ``org/x`` and a directory named
``x`` never share runs. Which weights a name stands for is another matter, the answer key's
(``runs/identity.py``).

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
    name it is: ``org/name`` -> ``org--name``; ``name`` -> ``default--name``; a local directory
    -> ``local--dirname`` (named by the directory a symlink points to, so a renamed link keeps
    its runs)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return f"local--{model_label(str(path.resolve()))}"
    if len([p for p in model.split("/") if p]) > 1:
        return model_label(model)
    return f"default--{model_label(model)}"


def legacy_model_slug(model: str) -> str:
    """The run-directory slug of runs made before the slug was spelled from the label. It
    differs from :func:`model_slug` only for ids with characters the label replaces (a space,
    ``~`` not expanded, ...); such a model's existing runs are found under this name."""
    path = Path(model)
    if path.is_dir():
        return f"local--{path.resolve().name}"
    parts = [p for p in model.strip("/").split("/") if p]
    return "--".join(parts) if len(parts) > 1 else f"default--{parts[0]}"

"""Which chat template a server uses, and where it came from.

The model's own template always wins; the benchmark's bundled (or user-given) fallback is used
only for models that ship none. The same functions run locally (local backend, or a local model
directory) and inside the Modal container (a Hub id, decided after the files are there), so both
sides record provenance the same way.

Stdlib only at import time: the Modal container imports this module.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modal_eval.exceptions import ServingError

TEMPLATES_DIR = Path(__file__).resolve().parent / "chat_templates"
BUNDLED_TEMPLATES = ("base", "code", "math", "think")

# The files a model's template can live in, in transformers' order of precedence: since
# transformers 4.5x a separate chat_template.jinja wins over the entry in tokenizer_config.json
# ("If independent chat template file(s) exist, they take priority"). vLLM loads the tokenizer
# through transformers, so this order is what the server really does.
MODEL_TEMPLATE_FILES = ("chat_template.jinja", "tokenizer_config.json")

#: Printed by the Modal container, one line, so the decision is greppable in `modal app logs`.
LOG_MARKER = "MODAL_EVAL_CHAT_TEMPLATE"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class FallbackTemplate:
    """A benchmark's fallback template, read locally so its text can travel to a container."""

    label: str  # "math.jinja" for a bundled one, the absolute path for a user's file
    text: str

    def to_json(self) -> dict[str, str]:
        return {"label": self.label, "text": self.text}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FallbackTemplate:
        return cls(label=str(data["label"]), text=str(data["text"]))


@dataclass(frozen=True)
class TemplateChoice:
    """The decision: ``text`` goes to ``--chat-template`` (None: the model's own is used)."""

    text: str | None
    provenance: dict[str, str]  # {"source": ..., "sha256": ...}


def load_fallback(spec: str | None) -> FallbackTemplate | None:
    """Read the fallback a benchmark names: a bundled name or an absolute ``.jinja`` path."""
    if spec is None:
        return None
    if spec in BUNDLED_TEMPLATES:
        path = TEMPLATES_DIR / f"{spec}.jinja"
        return FallbackTemplate(label=path.name, text=path.read_text(encoding="utf-8"))
    path = Path(spec)
    if not (path.is_absolute() and path.suffix == ".jinja"):
        raise ServingError(
            f"chat_template {spec!r} is neither a bundled template "
            f"({', '.join(BUNDLED_TEMPLATES)}) nor an absolute path to a .jinja file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServingError(f"cannot read chat_template {spec}: {exc}") from exc
    return FallbackTemplate(label=str(path), text=text)


def model_chat_template(model_dir: Path) -> tuple[str, str] | None:
    """The model's own template as (source, text), or None when it ships none."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return "model:chat_template.jinja", jinja.read_text(encoding="utf-8")
    config = model_dir / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, list):
            # Named templates: transformers' default is the one called "default".
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if isinstance(template, str) and template:
            return "model:tokenizer_config.json", template
    return None


def resolve_chat_template(
    model_dir: Path | None,
    fallback: FallbackTemplate | None,
    *,
    extra_args: Sequence[str] = (),
) -> TemplateChoice:
    """Decide the template for a model whose template files are in ``model_dir``.

    ``model_dir`` None means the files could not be fetched: the server will use whatever the
    model has, and the provenance says it is unknown rather than guess.
    """
    explicit = explicit_template(extra_args)
    if explicit is not None:
        # vllm.extra_args come last on the command line, so the user's explicit choice wins.
        return TemplateChoice(None, _explicit_provenance(explicit))
    if model_dir is None:
        return TemplateChoice(None, {"source": "unknown: model files not reachable", "sha256": ""})
    own = model_chat_template(model_dir)
    if own is not None:
        source, text = own
        return TemplateChoice(None, {"source": source, "sha256": sha256_text(text)})
    if fallback is not None:
        return TemplateChoice(fallback.text, _fallback_provenance(fallback))
    # Chat requests will fail in vLLM; recorded so the report can say why.
    return TemplateChoice(None, {"source": "none", "sha256": ""})


#: How vLLM's command line spells the option (its parser takes underscores for dashes too).
CHAT_TEMPLATE_OPTIONS = ("--chat-template", "--chat_template")


def explicit_template(extra_args: Sequence[str]) -> str | None:
    """The value of a ``--chat-template`` in ``extra_args`` (the last one, as argparse takes
    it), or None when there is none."""
    value = None
    for index, arg in enumerate(extra_args):
        name, equals, inline = arg.partition("=")
        if name in CHAT_TEMPLATE_OPTIONS:
            follows = extra_args[index + 1] if index + 1 < len(extra_args) else ""
            value = inline if equals else follows
    return value


def _explicit_provenance(value: str) -> dict[str, str]:
    """vLLM takes ``--chat-template`` as a file to read or, failing that, as the template
    itself: the hash is of the file's text where the file is readable here, else of the value,
    so editing the file changes the provenance (and the resume key) as a new template would."""
    try:
        text = Path(value).read_text(encoding="utf-8") if value else value
    except (OSError, ValueError):  # not a path here: a template given inline, or a remote path
        text = value
    return {"source": "extra_args:--chat-template", "sha256": sha256_text(text)}


def _fallback_provenance(fallback: FallbackTemplate) -> dict[str, str]:
    return {"source": f"fallback:{fallback.label}", "sha256": sha256_text(fallback.text)}


def template_files_dir(
    model: str, *, cached_only: bool = False, revision: str | None = None
) -> Path | None:
    """A directory holding the model's template files, or None when they cannot be fetched.

    A local directory is used as is. For a Hub id only the template files are downloaded (into
    the same HF cache vLLM then uses); HF_HUB_OFFLINE and HF_TOKEN are honoured by the hub
    library itself. ``cached_only``: what the local HF cache has, without the network.
    """
    path = Path(model)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(
            snapshot_download(
                model,
                revision=revision,
                allow_patterns=list(MODEL_TEMPLATE_FILES),
                local_files_only=cached_only,
            )
        )
    except Exception:  # any hub failure (offline, gated, missing) means "cannot know"
        return None


def decided_now(
    recorded: object,
    model: str,
    spec: str | None,
    *,
    extra_args: Sequence[str] = (),
    served_from_here: bool = True,
    revision: str | None = None,
) -> bool:
    """Whether a server started now for ``model`` would record the template provenance
    ``recorded`` (a finished run's), judged here without a server and without the network.

    Exact when the decision can be made here: an explicit ``--chat-template`` in
    ``extra_args``; for a server on this machine (``served_from_here``), a local model
    directory or a Hub model whose template files are in the local HF cache, which that
    server reads. Otherwise (the Modal container fetches the model itself) a recorded
    fallback must be the same text as the benchmark's fallback now; the model's own template
    cannot be checked, any more than its weights, and is taken to be unchanged.
    """
    if not isinstance(recorded, dict):
        return False
    try:
        fallback = load_fallback(spec)
    except ServingError:
        return False  # starting the server reports the problem
    files = None
    if served_from_here:
        local = Path(model).expanduser()
        files = template_files_dir(
            str(local) if local.is_dir() else model, cached_only=True, revision=revision
        )
    if files is not None or explicit_template(extra_args) is not None:
        return recorded == resolve_chat_template(files, fallback, extra_args=extra_args).provenance
    source = str(recorded.get("source", ""))
    if source.startswith("model:"):
        return True
    return fallback is not None and recorded == _fallback_provenance(fallback)


def resolve_for_model(
    model: str,
    fallback: FallbackTemplate | None,
    *,
    extra_args: Sequence[str] = (),
    revision: str | None = None,
) -> TemplateChoice:
    """``resolve_chat_template`` for a Hub id (at ``revision``) or a local directory."""
    files = template_files_dir(model, revision=revision)
    return resolve_chat_template(files, fallback, extra_args=extra_args)


def log_line(provenance: dict[str, str]) -> str:
    """The parseable line the Modal container prints with its decision."""
    return f"{LOG_MARKER} {json.dumps(provenance, sort_keys=True)}"


def parse_log_line(text: str) -> dict[str, str] | None:
    """The last decision printed in ``text`` (e.g. ``modal app logs`` output), if any."""
    found: dict[str, str] | None = None
    for line in text.splitlines():
        _, marker, rest = line.partition(LOG_MARKER + " ")
        if marker:
            try:
                data = json.loads(rest)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict):
                found = {str(k): str(v) for k, v in data.items()}
    return found

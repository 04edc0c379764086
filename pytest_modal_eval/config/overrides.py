"""``--override KEY=VALUE``: dotted keys over the config namespaces, YAML-scalar values."""

from __future__ import annotations

import difflib
from typing import Any

from pytest_modal_eval.exceptions import OptionError


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``--override`` value; used as the option's ``type=``, so its errors
    (:class:`~pytest_modal_eval.exceptions.OptionError`, an ``argparse.ArgumentTypeError`` as
    argparse expects of a ``type=``) are usage errors.

    Returns ``("sampling.temperature", 0.5)``. Keys are checked against the namespace's
    schema here, so a typo fails before anything starts; types are checked later by the
    same pydantic models that check the YAML.
    """
    import yaml

    from pytest_modal_eval.config.schema import OVERRIDE_NAMESPACES

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise OptionError(
            f"--override {text!r}: expected KEY=VALUE, e.g. --override sampling.temperature=0.6"
        )
    namespace, _, field_path = key.partition(".")
    if namespace not in OVERRIDE_NAMESPACES:
        hint = did_you_mean(namespace, OVERRIDE_NAMESPACES)
        raise OptionError(
            f"--override {key}: unknown namespace {namespace!r}{hint}; "
            f"valid namespaces: {', '.join(OVERRIDE_NAMESPACES)}"
        )
    if not field_path:
        raise OptionError(f"--override {key}: name a field, e.g. {namespace}.<field>")
    model = OVERRIDE_NAMESPACES[namespace]
    if model is not None:
        field = field_path.split(".", 1)[0]
        if field not in model.model_fields:
            hint = did_you_mean(field, model.model_fields)
            raise OptionError(
                f"--override {key}: unknown key {field!r} in {namespace!r}{hint}; "
                f"valid keys: {', '.join(f'{namespace}.{f}' for f in model.model_fields)}"
            )
    _refuse_secret(key, raw)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise OptionError(f"--override {key}: value {raw!r} is not valid YAML: {exc}") from exc
    _refuse_secret(key, value)
    return key, value


def _refuse_secret(key: str, value: Any) -> None:
    """A secret on the command line shows in the process list and shell history: refused,
    without repeating it."""
    from pytest_modal_eval.redact import holds_secret

    if holds_secret(key, value):
        raise OptionError(
            f"--override {key}: secrets are not accepted on the command line (the process list "
            "and shell history show them); put the value in an environment variable and name "
            "the variable instead (a judge's api_key_var, --api-key-env, ini "
            "modal_eval_secret_env)"
        )


def apply_overrides(data: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    """Return a copy of the YAML mapping with each dotted override set, later ones winning."""
    result: dict[str, Any] = dict(data)
    for key, value in overrides:
        parts = key.split(".")
        node = result
        for part in parts[:-1]:
            child = node.get(part)
            child = dict(child) if isinstance(child, dict) else {}
            node[part] = child
            node = child
        node[parts[-1]] = value
    return result


def did_you_mean(word: str, choices: Any) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to a mistyped ``word``, else ``""``: the
    one suggestion both a benchmark YAML's keys and ``--override``'s get."""
    match = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""

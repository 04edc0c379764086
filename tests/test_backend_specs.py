"""Backends are told apart by their spec's flags (config/backends.py), never by name."""

from __future__ import annotations

import ast
from pathlib import Path

from pytest_modal_eval.config.backends import BACKENDS, ENDPOINT, LOCAL, MODAL, SERVER_SECTIONS
from pytest_modal_eval.config.schema import BenchmarkConfig
from pytest_modal_eval.serving.backends import SERVER_FACTORIES

ROOT = Path(__file__).resolve().parent.parent / "pytest_modal_eval"


def name_comparisons(source: str, names: set[str]) -> list[int]:
    """Lines of ``source`` that compare something with a backend's name (``== "endpoint"``,
    ``in ("modal", "local")``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            consts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(c, ast.Constant) and c.value in names for c in consts):
                found.append(node.lineno)
                break
    return found


#: Calls that take a backend's name first: a literal name there is a second definition of it.
NAME_TAKERS = {"ServerProfile", "ServerRequest", "backend"}


def name_literals(source: str, names: set[str]) -> list[int]:
    """Lines of ``source`` that spell a backend's name as the backend of a call
    (``ServerProfile("modal", ...)``, ``backend="local"``) or as a key of a dict literal whose
    values are functions (a registry such as ``{"modal": _modal_server}``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[:1] if called in NAME_TAKERS else []
            given = [*first, *(k.value for k in node.keywords if k.arg == "backend")]
            if any(isinstance(a, ast.Constant) and a.value in names for a in given):
                found.append(node.lineno)
        elif (
            isinstance(node, ast.Dict)
            and node.values
            and all(isinstance(v, ast.Name) and v.id.startswith("_") for v in node.values)
        ) and any(isinstance(k, ast.Constant) and k.value in names for k in node.keys):
            found.append(node.lineno)
    return found


def test_a_backend_is_named_only_by_its_spec() -> None:
    names = set(BACKENDS)
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != ROOT / "config" / "backends.py"
        for line in name_literals(path.read_text(), names)
    ]
    assert not found, "use the spec's name (config/backends.py: MODAL.name, ...):\n" + "\n".join(
        found
    )


def test_a_backend_name_literal_is_found() -> None:
    source = (
        'p = ServerProfile("modal", m)\n'
        'r = x.ServerRequest(backend="local")\n'
        'F = {"modal": _modal_server}\n'
        'ok = {"endpoint": url}\n'
        "q = ServerProfile(MODAL.name, m)\n"
    )
    assert name_literals(source, {"modal", "local", "endpoint"}) == [1, 2, 3]


def test_no_module_compares_a_backend_name() -> None:
    names = set(BACKENDS)
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        for line in name_comparisons(path.read_text(), names)
    ]
    assert not found, "ask the BackendSpec (config/backends.py) instead:\n" + "\n".join(found)


def test_a_name_comparison_is_found() -> None:
    source = 'if request.backend == "endpoint":\n    pass\nok = b in ("modal", "x")\n'
    assert name_comparisons(source, {"endpoint", "modal"}) == [1, 3]
    assert name_comparisons('label = "endpoint"\n', {"endpoint"}) == []


def test_every_backend_that_starts_a_server_can_build_one() -> None:
    assert set(SERVER_FACTORIES) == {n for n, s in BACKENDS.items() if s.starts_server}
    assert [s.name for s in BACKENDS.values() if s.takes_base_url] == ["endpoint"]


def test_each_backend_names_the_server_settings_it_uses() -> None:
    """What ``show`` lists of a run's configuration: Modal's server reads every server setting,
    a local vLLM only the start-up timeout of ``infra``, an endpoint none."""
    config = BenchmarkConfig.model_validate({"env_id": "file-qa"}).model_dump(mode="json")
    used = {name: spec.server_config(config) for name, spec in BACKENDS.items()}
    assert used[MODAL.name] == {key: config[key] for key in SERVER_SECTIONS}
    assert used[LOCAL.name] == {
        "infra": {"startup_timeout": config["infra"]["startup_timeout"]},
        "vllm": config["vllm"],
        "chat_template": config["chat_template"],
    }
    assert used[ENDPOINT.name] == {}
    # Every setting a backend names is one of the server sections, and exists in the schema.
    for spec in BACKENDS.values():
        for setting in spec.server_settings:
            section, _, key = setting.partition(".")
            assert section in SERVER_SECTIONS and section in config
            assert not key or key in config[section]

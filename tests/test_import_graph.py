"""The package's modules import each other without cycles.

Every import counts: at module level, inside functions, and under ``TYPE_CHECKING``. A cycle
held apart only by an import inside a function still ties the two modules together; this test
keeps the layout a graph a reader can follow from the bottom (config, stats) up (plugin).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "pytest_modal_eval"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its body)."""
    modules = {module_name(p, root, package): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}

    def resolve(target: str) -> str | None:
        # `from a.b import c` names module a.b.c when it exists, else something in a.b.
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if target == package or target.startswith(package + "."):
                    found = resolve(target)
                    if found is not None and found != name:
                        graph[name].add(found)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_a_cycle(graph, set(c)) for c in components]


def _a_cycle(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    start = min(members)
    path = [start]
    seen = {start}

    def walk(v: str) -> Iterator[list[str]]:
        for w in sorted(graph[v] & members):
            if w == start:
                yield [*path, start]
            elif w not in seen:
                seen.add(w)
                path.append(w)
                yield from walk(w)
                path.pop()

    return next(walk(start))


def test_the_package_has_no_import_cycle() -> None:
    cycles = find_cycles(import_graph(ROOT, PACKAGE))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("where", ["module", "function", "type_checking"])
def test_a_planted_cycle_is_found(tmp_path: Path, where: str) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    back = {
        "module": "from pkg import a\n",
        "function": "def f():\n    from pkg.a import thing\n",
        "type_checking": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n"
        ),
    }[where]
    (pkg / "sub" / "b.py").write_text(back)
    cycles = find_cycles(import_graph(pkg, "pkg"))
    assert cycles == [["pkg.a", "pkg.sub.b", "pkg.a"]]


def test_an_acyclic_package_passes(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("import json\n")
    assert find_cycles(import_graph(pkg, "pkg")) == []


def test_the_public_api_resolves() -> None:
    import pytest_modal_eval

    for name in pytest_modal_eval.__all__:
        assert getattr(pytest_modal_eval, name).__name__ == name
    with pytest.raises(AttributeError):
        _ = pytest_modal_eval.not_a_name


def test_the_modal_container_imports_the_app_without_the_plugins_dependencies() -> None:
    """The container has vLLM's packages only: the app module must not pull in pytest & co."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys
        BLOCKED = {"pytest", "_pytest", "verifiers", "syrupy", "scipy", "httpx", "filelock"}

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{name} is not installed in the container")
                return None

        sys.meta_path.insert(0, Block())
        import pytest_modal_eval.serving.modal.app as app
        assert "pytest_modal_eval.serving.modal.redirect_proxy" not in sys.modules
        print("ok", app.DeploySpec.__name__)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok DeploySpec"


def test_the_plugin_costs_an_unrelated_test_suite_no_heavy_imports() -> None:
    """pytest loads the plugin in every session of an environment that has it installed: the
    evaluation's dependencies are imported only when a benchmark item runs (benchmarks/startup.py
    measures what the plugin adds to `pytest --co`)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys
        import pytest
        before = set(sys.modules)
        import pytest_modal_eval.plugin
        print(" ".join(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent
    )
    assert result.returncode == 0, result.stderr
    imported = set(result.stdout.split())
    heavy = {
        "numpy", "scipy", "pydantic", "syrupy", "jinja2", "verifiers", "openai", "httpx",
        "aiohttp", "asyncio", "yaml", "huggingface_hub", "modal", "datasets", "pyarrow",
    }  # fmt: skip
    assert imported & heavy == set(), sorted(imported)

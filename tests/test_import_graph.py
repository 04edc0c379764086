"""The package's layers, as docs/architecture.md draws them, and no import cycle.

The layer table in docs/architecture.md is read here: an import (at module level or inside a
function) from a lower layer to a higher one, or between two subpackages of one layer, fails.
Imports under ``TYPE_CHECKING`` are exempt from the layer rule but count for cycles: a cycle
held apart only by an import inside a function or an annotation still ties two modules
together. Together these keep the layout a graph a reader can follow from the bottom up.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

PACKAGE = "pytest_modal_eval"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree``; those under ``if TYPE_CHECKING:`` only when asked."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_checking)
        else:
            yield from _imports(node, type_checking)


def import_graph(root: Path, package: str, type_checking: bool = True) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its body; under
    ``TYPE_CHECKING`` too unless ``type_checking`` is false)."""
    modules = {module_name(p, root, package): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}

    def resolve(target: str) -> str | None:
        # `from a.b import c` names module a.b.c when it exists, else something in a.b.
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path)), type_checking):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
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


def unit(module: str, package: str) -> str:
    """The layer table's name for a module: its subpackage or top-level module (``__init__``
    for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def read_layers(markdown: str) -> dict[str, int]:
    """The ``## Layers`` table of an architecture page: subpackage or module -> its layer."""
    section = markdown.partition("\n## Layers\n")[2].partition("\n## ")[0]
    layers: dict[str, int] = {}
    for number, names in re.findall(r"^\| (\d+) \| ([^|]*) \|", section, re.MULTILINE):
        for name in re.findall(r"`([^`]+)`", names):
            layers[name.rstrip("/")] = int(number)
    return layers


def read_pytest_free(markdown: str) -> set[str]:
    """The ``## Layers`` table's subpackages and modules whose "pytest at run time" is "no"."""
    section = markdown.partition("\n## Layers\n")[2].partition("\n## ")[0]
    free: set[str] = set()
    for names, pytest_column in re.findall(
        r"^\| \d+ \| ([^|]*) \|[^|]*\| *(yes|no) *\|", section, re.MULTILINE
    ):
        if pytest_column == "no":
            free.update(name.rstrip("/") for name in re.findall(r"`([^`]+)`", names))
    return free


def runtime_pytest_imports(root: Path, package: str, units: set[str]) -> list[str]:
    """``path:line`` of each import of pytest or ``_pytest`` (at module level or inside a
    function, not under ``TYPE_CHECKING``) in a module of ``units``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if unit(module_name(path, root, package), package) not in units:
            continue
        for node in _imports(ast.parse(path.read_text()), type_checking=False):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            if any(name.split(".")[0] in {"pytest", "_pytest"} for name in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def package_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The module graph contracted to the layer table's units."""
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = units.setdefault(unit(module, package), set())
        mine.update(unit(t, package) for t in targets)
    for name, targets in units.items():
        targets.discard(name)
    return units


def layer_violations(
    graph: dict[str, set[str]], layers: dict[str, int], package: str
) -> Iterable[str]:
    """Each import that is not from a higher layer to a lower one, and each unit the table
    does not place."""
    for module, targets in sorted(graph.items()):
        source = unit(module, package)
        if source not in layers:
            yield f"{source} is in no layer of the table"
            continue
        for target in sorted(targets):
            dest = unit(target, package)
            if dest != source and dest in layers and layers[dest] >= layers[source]:
                yield (f"{module} (layer {layers[source]}) imports {target} (layer {layers[dest]})")


def test_the_architecture_page_places_every_subpackage() -> None:
    layers = read_layers(ARCHITECTURE.read_text())
    units = set(package_graph(import_graph(ROOT, PACKAGE), PACKAGE))
    assert units - set(layers) == set(), "add these to the table in docs/architecture.md"
    assert set(layers) - units == set(), "the table names what the package does not have"


def test_every_import_points_down_the_layers() -> None:
    layers = read_layers(ARCHITECTURE.read_text())
    graph = import_graph(ROOT, PACKAGE, type_checking=False)
    problems = list(layer_violations(graph, layers, PACKAGE))
    assert not problems, "imports against docs/architecture.md's layers:\n" + "\n".join(problems)


def test_the_package_has_no_import_cycle() -> None:
    cycles = find_cycles(import_graph(ROOT, PACKAGE))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_subpackages_have_no_import_cycle() -> None:
    cycles = find_cycles(package_graph(import_graph(ROOT, PACKAGE), PACKAGE))
    assert not cycles, "cycles between subpackages:\n" + "\n".join(" -> ".join(c) for c in cycles)


def children_graphs(
    graph: dict[str, set[str]], root: Path, package: str
) -> dict[str, dict[str, set[str]]]:
    """For the package and each of its subpackages: the module graph contracted to its
    children (its own modules and its subpackages), each child's imports of its siblings."""
    packages = [package] + [
        module_name(init.parent, root, package) if init.parent != root else package
        for init in sorted(root.rglob("__init__.py"))
        if init.parent != root
    ]
    levels: dict[str, dict[str, set[str]]] = {}
    for parent in packages:
        depth = parent.count(".") + 1

        def child(module: str, parent: str = parent, depth: int = depth) -> str | None:
            if not module.startswith(parent + "."):
                return None
            return ".".join(module.split(".")[: depth + 1])

        level: dict[str, set[str]] = {}
        for module, targets in graph.items():
            if (mine := child(module)) is None:
                continue
            siblings = level.setdefault(mine, set())
            siblings.update(c for t in targets if (c := child(t)) is not None and c != mine)
        for targets in list(level.values()):
            for target in targets:
                level.setdefault(target, set())
        levels[parent] = level
    return levels


def test_no_package_has_a_cycle_among_its_children() -> None:
    """Below the top level too: within ``serving/``, its modules and ``modal/`` and ``vllm/``
    import each other one way only."""
    levels = children_graphs(import_graph(ROOT, PACKAGE), ROOT, PACKAGE)
    assert f"{PACKAGE}.serving" in levels
    cycles = [
        " -> ".join(cycle)
        for parent, level in sorted(levels.items())
        for cycle in find_cycles(level)
    ]
    assert not cycles, "cycles between a package's children:\n" + "\n".join(cycles)


def test_a_cycle_between_a_package_and_its_subpackage_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub" / "inner").mkdir(parents=True)
    for init in (pkg, pkg / "sub", pkg / "sub" / "inner"):
        (init / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from pkg.sub.inner import c\n")
    (pkg / "sub" / "b.py").write_text("")
    (pkg / "sub" / "inner" / "c.py").write_text("")
    (pkg / "sub" / "inner" / "d.py").write_text("def f():\n    from pkg.sub import a\n")
    graph = import_graph(pkg, "pkg")
    assert find_cycles(graph) == []
    assert find_cycles(package_graph(graph, "pkg")) == []
    levels = children_graphs(graph, pkg, "pkg")
    assert find_cycles(levels["pkg.sub"]) == [["pkg.sub.a", "pkg.sub.inner", "pkg.sub.a"]]
    assert find_cycles(levels["pkg"]) == []


def test_the_endpoint_fixture_finds_a_models_identity_without_the_evaluation() -> None:
    """``eval_endpoint`` needs the model's identity, not the evaluation (verifiers, numpy)."""
    graph = import_graph(ROOT, PACKAGE)
    assert f"{PACKAGE}.collect.item_run" not in graph[f"{PACKAGE}.fixtures"]
    assert f"{PACKAGE}.runs.evaluation" not in graph[f"{PACKAGE}.runs.identity"]


def follow_model_steps(markdown: str) -> list[tuple[list[str], list[str]]]:
    """The ``## Follow `--model``` table: per step, the files it names (the step's own first,
    then the same step for other backends or APIs) and the names it says carry the model there
    (the last part of each dotted name)."""
    section = markdown.partition("\n## Follow `--model`\n")[2].partition("\n## ")[0]
    steps = []
    for row in re.findall(r"^\| \d+ \| (.*) \|$", section, re.MULTILINE):
        quoted = re.findall(r"`([^`]+)`", row)
        files = [q for q in quoted if q.endswith(".py")]
        names = [q.rpartition(".")[2] for q in quoted if re.fullmatch(r"[A-Za-z_][\w.]*", q)]
        steps.append((files, [n for n in names if n != "py"]))
    return steps


#: The most files the model may pass through on its way to the request body.
MAX_MODEL_STEPS = 8


def follow_model_problems(steps: list[tuple[list[str], list[str]]]) -> list[str]:
    """What is wrong with a ``--model`` path: too many steps, or a file it comes back to."""
    problems = []
    if len(steps) > MAX_MODEL_STEPS:
        problems.append(f"{len(steps)} steps; at most {MAX_MODEL_STEPS}")
    first_row: dict[str, int] = {}
    for number, (files, _) in enumerate(steps, 1):
        if not files:
            problems.append(f"step {number} names no file")
        for name in dict.fromkeys(files):
            if name in first_row:
                problems.append(f"{name} is step {first_row[name]} and again step {number}")
            else:
                first_row[name] = number
    return problems


def test_the_follow_model_path_is_short_and_never_returns() -> None:
    steps = follow_model_steps(ARCHITECTURE.read_text())
    assert len(steps) >= 5
    assert follow_model_problems(steps) == []


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (["a.py", "b.py", "c.py"], []),
        (["a.py", "b.py", "a.py"], ["a.py is step 1 and again step 3"]),
        ([f"f{n}.py" for n in range(9)], ["9 steps; at most 8"]),
    ],
)
def test_a_long_or_returning_model_path_is_found(table: list[str], expected: list[str]) -> None:
    rows = "\n".join(f"| {n} | `{name}` | `thing` |" for n, name in enumerate(table, 1))
    page = f"# A page\n\n## Follow `--model`\n\n| step | file | what |\n|---|---|---|\n{rows}\n"
    assert follow_model_problems(follow_model_steps(page)) == expected


def test_the_follow_model_path_names_files_and_names_that_exist() -> None:
    steps = follow_model_steps(ARCHITECTURE.read_text())
    for files, names in steps:
        sources = [(ROOT / f).read_text() for f in files]  # a missing file fails here
        for name in names:
            assert any(re.search(rf"\b{name}\b", text) for text in sources), (name, files)


@pytest.mark.parametrize("subpackage", ["serving", "client", "stats"])
def test_servers_clients_and_numbers_do_not_depend_on_pytest(subpackage: str) -> None:
    """Hooks live in session/; serving, the HTTP client and the statistics are plain objects
    any caller can drive, without pytest even in their annotations."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / subpackage).rglob("*.py"))
        for node in _imports(ast.parse(path.read_text()), type_checking=True)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
        if name.split(".")[0] in {"pytest", "_pytest"}
    ]
    assert not found, found


def test_below_the_session_layer_pytest_is_only_an_annotation() -> None:
    """Layers marked "no" in the table's last column are plain Python: a pytest object they
    need is handed in by the session layer, which holds every hook (docs/architecture.md)."""
    free = read_pytest_free(ARCHITECTURE.read_text())
    assert {"config", "serving", "client", "runs", "report", "share", "stats"} <= free
    assert not {"collect", "session", "plugin"} & free
    found = runtime_pytest_imports(ROOT, PACKAGE, free)
    assert not found, "pytest imported at run time below the session layer:\n" + "\n".join(found)


def hook_implementations(root: Path) -> dict[str, list[str]]:
    """File -> the ``pytest_*`` functions and methods it defines, and each
    ``pluginmanager.register(...)`` it calls (as ``register``)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            name = None
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = node.name if node.name.startswith("pytest_") else None
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = ast.unparse(node.func.value)
                name = (
                    "register"
                    if node.func.attr == "register" and "pluginmanager" in owner
                    else None
                )
            if name is not None:
                found.setdefault(path.relative_to(root).as_posix(), []).append(name)
    return found


def test_every_hook_is_in_the_entry_point_or_the_session_pair() -> None:
    """plugin.py keeps the hooks that make the plugin and registers the session objects;
    every other hook is a method of a session object's class (session/): the pair, and the
    sessions of ``--detach`` where it was typed and in its container."""
    found = hook_implementations(ROOT)
    assert sorted(found.pop("plugin.py")) == sorted(
        ["pytest_addoption", "pytest_addhooks", "pytest_configure", "pytest_collect_file"]
        + ["pytest_cmdline_main"]  # --detach: no xdist workers where it was typed
        # the fixtures module, the pair, and the detached and container sessions
        + ["register"] * 5
    )
    assert found.pop("hookspecs.py") == ["pytest_modal_eval_finished"]  # a specification
    assert set(found.pop("session/worker.py")) >= {"pytest_runtest_logreport"}
    assert set(found.pop("session/controller.py")) >= {"pytest_terminal_summary"}
    assert set(found.pop("session/detached.py")) >= {"pytest_runtestloop"}
    assert set(found.pop("session/container.py")) >= {"pytest_runtest_logreport"}
    assert found == {}, "hooks or plugin registrations outside plugin.py and session/"


def test_a_runtime_pytest_import_below_the_session_layer_is_found(tmp_path: Path) -> None:
    table = PLANTED_LAYERS.replace("| may import |", "| may import | pytest at run time |")
    table = table.replace("| nothing |", "| nothing | no |")
    table = table.replace("| layer 1 |", "| layer 1 | yes |")
    assert read_pytest_free(table) == {"low", "side"}
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import pytest\n")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "annotated.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pytest\n"
    )
    (pkg / "low" / "deferred.py").write_text("def f():\n    from _pytest.main import Session\n")
    (pkg / "side.py").write_text("import pytest.mark\n")
    (pkg / "high.py").write_text("import pytest\n")
    found = runtime_pytest_imports(pkg, "pkg", read_pytest_free(table))
    assert found == ["low/deferred.py:2", "side.py:1"]


PLANTED_LAYERS = """# A page

## Layers

| layer | subpackages and modules | may import |
|---|---|---|
| 1 | `low/`, `side` | nothing |
| 2 | `high` | layer 1 |

## Next
"""


@pytest.mark.parametrize(
    ("low_module", "expected"),
    [
        ("from pkg import high\n", ["pkg.low.a (layer 1) imports pkg.high (layer 2)"]),
        (
            "def f():\n    from pkg.high import thing\n",
            ["pkg.low.a (layer 1) imports pkg.high (layer 2)"],
        ),
        ("from pkg import side\n", ["pkg.low.a (layer 1) imports pkg.side (layer 1)"]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import high\n", []),
        ("from pkg.low import b\n", []),
    ],
)
def test_an_import_against_the_layers_is_found(
    tmp_path: Path, low_module: str, expected: list[str]
) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "b.py").write_text("")
    (pkg / "low" / "a.py").write_text(low_module)
    (pkg / "high.py").write_text("from pkg.low import a\n")
    (pkg / "side.py").write_text("")
    layers = read_layers(PLANTED_LAYERS)
    assert layers == {"low": 1, "side": 1, "high": 2}
    layers["__init__"] = 3
    graph = import_graph(pkg, "pkg", type_checking=False)
    assert list(layer_violations(graph, layers, "pkg")) == expected


def test_a_subpackage_cycle_is_found_where_modules_have_none(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    for sub in ("one", "two"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "one" / "a.py").write_text("from pkg.two import c\n")
    (pkg / "two" / "c.py").write_text("")
    (pkg / "two" / "d.py").write_text("from pkg.one import b\n")
    (pkg / "one" / "b.py").write_text("")
    graph = import_graph(pkg, "pkg")
    assert find_cycles(graph) == []
    assert find_cycles(package_graph(graph, "pkg")) == [["one", "two", "one"]]


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
        "opentelemetry", "wandb", "mlflow",
    }  # fmt: skip
    assert imported & heavy == set(), sorted(imported)


#: What a bundled benchmark never needs: verifiers and what it brings (datasets, Arrow, the
#: SDKs, math_verify's sympy), and at collection the numerics and Modal as well.
FRAMEWORKS = {"verifiers", "datasets", "pyarrow", "pandas", "openai", "anthropic", "sympy"}
HEAVY_AT_COLLECTION = FRAMEWORKS | {"numpy", "scipy", "modal", "aiohttp", "jinja2"}

PROBE_PLUGIN = """
import json, os, sys

def _top():
    return sorted({name.split(".")[0] for name in sys.modules})

def pytest_collection_finish(session):
    with open(os.environ["PROBE_OUT"] + ".collected", "w") as out:
        json.dump(_top(), out)

def pytest_sessionfinish(session):
    with open(os.environ["PROBE_OUT"] + ".finished", "w") as out:
        json.dump(_top(), out)
"""


def test_a_bundled_benchmark_imports_no_framework(tmp_path: Path, fake_server: Any) -> None:
    """A file-qa benchmark, collected and run to its verdict against an endpoint: collection
    imports nothing heavy, and the run no framework (the plugin runs file-qa itself,
    client/native.py). Checked by the modules loaded, not by time (benchmarks/startup.py
    measures that)."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "qa.jsonl").write_text(
        '{"question": "What is 2 + 3?", "answer": "5"}\n', encoding="utf-8"
    )
    (tmp_path / "evals" / "one.yaml").write_text(
        "env_id: file-qa\nenv_args: {path: qa.jsonl}\ngate: {min_avg_reward: 0.5}\n",
        encoding="utf-8",
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "import_probe.py").write_text(PROBE_PLUGIN, encoding="utf-8")
    probe = tmp_path / "probe"
    env = {
        **os.environ,
        "PROBE_OUT": str(probe),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT.parent)]),
    }
    command = [sys.executable, "-m", "pytest", "evals", "-p", "import_probe"]
    command += ["--model", "test-model", "--base-url", fake_server.base_url]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 passed" in result.stdout
    collected = set(json.loads(probe.with_suffix(".collected").read_text()))
    finished = set(json.loads(probe.with_suffix(".finished").read_text()))
    assert collected & HEAVY_AT_COLLECTION == set()
    assert finished & FRAMEWORKS == set()

"""Reference tables generated from the code, written into the Markdown pages under ``docs/``.

A page that contains one of the markers below holds the table between it and its end marker
(``<!-- end of reference: NAME -->``), so the reference reads the same in the repository as on
the site and cannot drift from the code:

- ``<!-- reference: benchmark-yaml -->``: every key of a benchmark YAML, from the pydantic
  models in ``pytest_modal_eval/config/schema.py`` (type, default, constraints, description);
- ``<!-- reference: options -->``: every command-line option and ini key, from
  ``pytest_modal_eval/config/options.py``;
- ``<!-- reference: hooks -->``: the plugin's hooks, from ``pytest_modal_eval/hookspecs.py``;
- ``<!-- reference: results-record -->``: the fields of a ``results.jsonl`` line, from
  ``pytest_modal_eval/runs/record.py`` (checked against what ``rollout_record`` writes);
- ``<!-- reference: modules -->``: every module with the first paragraph of its docstring.

``uv run python scripts/docs_reference.py`` rewrites the tables (``--check``: only says which
pages are stale, exit status 1). ``tests/test_docs_reference.py`` fails when a page is stale and
checks that every field, option and hook appears. ``mkdocs.yml`` also lists this file under
``hooks:``, so a site built from a stale page still shows the current tables.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import annotated_types
import pytest
from mkdocs.exceptions import PluginError
from mkdocs.structure.pages import Page
from pydantic import BaseModel
from pydantic.fields import FieldInfo

import pytest_modal_eval
from pytest_modal_eval import hookspecs, plugin
from pytest_modal_eval.config.schema import BenchmarkConfig
from pytest_modal_eval.runs.record import RolloutRecord, field_docs, rollout_record

MARKER = re.compile(r"<!-- reference: ([a-z-]+) -->")
#: A marker with the table generated after it, up to its end marker.
REGION = re.compile(
    r"<!-- reference: (?P<name>[a-z-]+) -->(?:.*?<!-- end of reference: (?P=name) -->)?", re.S
)
DOCS = Path(__file__).resolve().parent.parent / "docs"


# --- benchmark YAML --------------------------------------------------------------------------


def iter_fields(
    model: type[BaseModel], prefix: str = ""
) -> Iterator[tuple[str, FieldInfo, type[BaseModel] | None]]:
    """Yield ``(dotted key, field, nested model or None)`` for a model and its sections."""
    for name, info in model.model_fields.items():
        nested = _nested_model(info.annotation)
        yield prefix + name, info, nested
        if nested is not None:
            yield from iter_fields(nested, f"{prefix}{name}.")


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def type_name(annotation: Any) -> str:
    """``int | None`` -> ``int or null``; ``dict[str, float]`` -> ``mapping str -> float``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in args)
    if origin is typing.Literal:
        return " \\| ".join(f"`{json.dumps(arg)}`" for arg in args)
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"mapping {type_name(args[0])} → {type_name(args[1])}"
    if _nested_model(annotation) is not None:
        return "section"
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation).replace("typing.", "")


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its keys' defaults"
    return f"`{json.dumps(value)}`"


_BOUNDS = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.MinLen, "min_length", "length ≥"),
    (annotated_types.MaxLen, "max_length", "length ≤"),
)


def constraints_text(info: FieldInfo) -> str:
    parts = []
    for item in info.metadata:
        for kind, attribute, symbol in _BOUNDS:
            if isinstance(item, kind):
                parts.append(f"{symbol} {getattr(item, attribute)}")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def benchmark_yaml_reference() -> str:
    """Markdown: the top-level keys of a benchmark YAML, then one table per section."""
    sections: list[tuple[str, type[BaseModel]]] = [("", BenchmarkConfig)]
    sections += [(key, nested) for key, _, nested in iter_fields(BenchmarkConfig) if nested]
    out: list[str] = []
    for prefix, model in sections:
        if prefix:
            out.append(f"### `{prefix}`\n")
            doc = (model.__doc__ or "").strip()
            if doc:
                out.append(doc + "\n")
        out.append("| key | type | default | allowed | meaning |")
        out.append("|---|---|---|---|---|")
        for name, info in model.model_fields.items():
            key = f"{prefix}.{name}" if prefix else name
            out.append(
                f"| `{key}` | {type_name(info.annotation)} | {default_text(info)} | "
                f"{constraints_text(info)} | {_cell(info.description or '')} |"
            )
        out.append("")
    return "\n".join(out)


# --- command-line options and ini keys ---------------------------------------------------------


@dataclass
class RecordedOption:
    flags: tuple[str, ...]
    attrs: dict[str, Any]


@dataclass
class RecordedIni:
    name: str
    help: str
    type: str | None
    default: Any


@dataclass
class _Group:
    options: list[RecordedOption]

    def addoption(self, *flags: str, **attrs: Any) -> None:
        self.options.append(RecordedOption(flags, attrs))


@dataclass
class RecordingParser:
    """Stands in for ``pytest.Parser``: records what the plugin registers."""

    options: list[RecordedOption] = field(default_factory=list)
    inis: list[RecordedIni] = field(default_factory=list)
    groups: list[tuple[str, str]] = field(default_factory=list)

    def getgroup(self, name: str, description: str = "") -> _Group:
        self.groups.append((name, description))
        return _Group(self.options)

    def addoption(self, *flags: str, **attrs: Any) -> None:
        self.options.append(RecordedOption(flags, attrs))

    def addini(self, name: str, help: str, type: str | None = None, default: Any = None) -> None:
        self.inis.append(RecordedIni(name, help, type, default))


def recorded_options() -> RecordingParser:
    parser = RecordingParser()
    plugin.pytest_addoption(cast(pytest.Parser, parser))  # every option the plugin registers
    return parser


def _value_text(option: RecordedOption) -> str:
    attrs = option.attrs
    if "choices" in attrs:
        return "{" + ",".join(attrs["choices"]) + "}"
    if attrs.get("action") in ("store_true", "store_false"):
        return ""
    return str(attrs.get("metavar", ""))


def options_reference() -> str:
    parser = recorded_options()
    group = parser.groups[0][1] if parser.groups else ""
    out = [
        f'`pytest --help` lists these under "{group}".\n',
        "| option | value | meaning |",
        "|---|---|---|",
    ]
    for option in parser.options:
        flags = ", ".join(f"`{flag}`" for flag in option.flags)
        value = _value_text(option)
        repeat = " (repeatable)" if option.attrs.get("action") == "append" else ""
        out.append(
            f"| {flags} | {f'`{value}`' if value else ''}{repeat} | "
            f"{_cell(str(option.attrs.get('help', '')))} |"
        )
    out += [
        "",
        "Ini keys (in `pyproject.toml` under `[tool.pytest.ini_options]`, or `pytest.ini`):",
        "",
    ]
    out += ["| ini key | type | meaning |", "|---|---|---|"]
    for ini in parser.inis:
        out.append(f"| `{ini.name}` | {ini.type or 'string'} | {_cell(ini.help)} |")
    out.append("")
    return "\n".join(out)


# --- hooks ------------------------------------------------------------------------------------


def _rst_to_markdown(doc: str) -> str:
    """Enough reStructuredText for hook docstrings: roles, ``literals`` and ``::`` blocks."""
    doc = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", doc)
    doc = doc.replace("``", "`")
    out: list[str] = []
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            out += [line.rstrip()[:-1], "", "```python"]
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            out += [*textwrap.dedent("\n".join(block)).strip("\n").splitlines(), "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def hook_specs() -> list[tuple[str, Any]]:
    return [
        (name, function)
        for name, function in vars(hookspecs).items()
        if name.startswith("pytest_") and callable(function)
    ]


def hooks_reference() -> str:
    out: list[str] = []
    for name, function in hook_specs():
        params = ", ".join(inspect.signature(function).parameters)
        out.append(f"### `{name}({params})`\n")
        out.append(_rst_to_markdown(inspect.cleandoc(function.__doc__ or "")) + "\n")
    return "\n".join(out)


# --- module map --------------------------------------------------------------------------------


def _first_paragraph(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def modules_reference() -> str:
    """Every module of the package with the first paragraph of its docstring."""
    root = Path(pytest_modal_eval.__file__).parent
    out = ["| module | what it is |", "|---|---|"]
    for path in sorted(root.rglob("*.py"), key=lambda p: (p.parent != root, p.parent, p.name)):
        relative = path.relative_to(root.parent).as_posix()
        if path.name == "__init__.py" and path.parent != root:
            relative = relative.removesuffix("__init__.py")
        out.append(f"| `{relative}` | {_cell(_rst_to_markdown(_first_paragraph(path)))} |")
    out.append("")
    return "\n".join(out)


# --- results.jsonl ----------------------------------------------------------------------------


def results_record_reference() -> str:
    """The fields of a ``results.jsonl`` line, checked against what the code writes."""
    sample = {"example_id": 0, "metrics": {"metric_name": 1.0}}
    written = [key for key in rollout_record(sample, 0, "default") if key != "metric_name"]
    if written != list(RolloutRecord.__annotations__):
        raise ValueError(
            f"runs/record.py: RolloutRecord {list(RolloutRecord.__annotations__)} does not match "
            f"the fields rollout_record writes {written}"
        )
    out = ["| field | type | meaning |", "|---|---|---|"]
    out += [
        f"| `{name}` | `{kind}` | {_cell(text)} |" for name, (kind, text) in field_docs().items()
    ]
    out += ["", "Each of the environment's metrics is also a field of its own, named after it.", ""]
    return "\n".join(out)


# --- the mkdocs hook ---------------------------------------------------------------------------

GENERATORS = {
    "benchmark-yaml": benchmark_yaml_reference,
    "options": options_reference,
    "hooks": hooks_reference,
    "modules": modules_reference,
    "results-record": results_record_reference,
}


def render(markdown: str) -> str:
    """Each marker followed by its current table and end marker (a table already there is
    replaced); an unknown marker is an error, not a silent gap."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in GENERATORS:
            raise ValueError(f"unknown reference marker {name!r}; known: {', '.join(GENERATORS)}")
        table = GENERATORS[name]().strip("\n")
        return f"<!-- reference: {name} -->\n\n{table}\n\n<!-- end of reference: {name} -->"

    return REGION.sub(replace, markdown)


def stale_pages(docs: Path = DOCS) -> list[Path]:
    """The pages whose generated tables differ from what the code generates now."""
    return [
        page
        for page in sorted(docs.glob("*.md"))
        if render(text := page.read_text(encoding="utf-8")) != text
    ]


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """mkdocs hook: runs for each page after its Markdown is read, before it is rendered."""
    try:
        return render(markdown)
    except ValueError as exc:
        raise PluginError(f"{page.file.src_path}: {exc}") from exc


def main(argv: list[str]) -> int:
    """Rewrite the stale pages (``--check``: only name them); exit status 1 when any was."""
    stale = stale_pages()
    for page in stale:
        if "--check" not in argv:
            page.write_text(render(page.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"{'stale' if '--check' in argv else 'rewritten'}: {page.relative_to(DOCS.parent)}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))

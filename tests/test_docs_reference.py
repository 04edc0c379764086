"""The docs site's generated references cover the code: every YAML key, option, ini key, hook.

``scripts/docs_reference.py`` is the mkdocs hook that renders them; these tests load it the way
mkdocs does (from its file) and check what it renders against the code it renders from.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from pydantic import BaseModel

from pytest_modal_eval.config.schema import BenchmarkConfig

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / "scripts" / "docs_reference.py"


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def _all_keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str | None]]:
    keys = []
    for name, info in model.model_fields.items():
        keys.append((prefix + name, info.description))
        nested = info.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            keys += _all_keys(nested, f"{prefix}{name}.")
    return keys


def test_every_benchmark_key_is_documented_with_a_description(reference: ModuleType) -> None:
    page = reference.benchmark_yaml_reference()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z_.]+)` \|.*$", page, re.M)}
    keys = _all_keys(BenchmarkConfig)
    assert len(keys) > 30  # the walk reached the nested sections
    for key, description in keys:
        assert key in rows, f"{key} is missing from the generated YAML reference"
        assert description, f"{key} has no Field(description=...): the reference needs one"
        assert description.split()[0] in rows[key], f"{key}: description not rendered"


def test_reference_shows_defaults_types_and_bounds(reference: ModuleType) -> None:
    page = reference.benchmark_yaml_reference()
    assert re.search(r"^\| `env_id` \| string \| required \|", page, re.M)
    assert re.search(r"^\| `eval.rollouts` \| integer \| `1` \| ≥ 1 \|", page, re.M)
    assert re.search(
        r"^\| `sampling.max_tokens` \| integer or null \| `2048` \| > 0 \|", page, re.M
    )
    assert re.search(r"^\| `gate.alpha` \| number \| `0.05` \| > 0, < 0.5 \|", page, re.M)


def test_every_option_and_ini_key_is_documented(reference: ModuleType, tmp_path: Path) -> None:
    """Checked against ``pytest --help``, so an option registered elsewhere is caught too."""
    page = reference.options_reference()
    recorded = reference.recorded_options()
    help_text = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    group = recorded.groups[0][1]
    section = help_text.split(f"{group}:\n", 1)[1].split("\n\n", 1)[0]
    flags = re.findall(r"^  (--[a-z-]+)", section, re.M)
    inis = re.findall(r"^  (modal_eval_[a-z_]+)", help_text, re.M)
    assert flags and inis
    assert sorted(flags) == sorted(f for o in recorded.options for f in o.flags)
    assert sorted(inis) == sorted(i.name for i in recorded.inis)
    for flag in flags:
        assert f"| `{flag}` |" in page, f"{flag} is missing from the options reference"
    for ini in recorded.inis:
        assert f"| `{ini.name}` |" in page, f"{ini.name} is missing from the ini reference"
        assert ini.help


def test_every_hook_is_documented(reference: ModuleType) -> None:
    from pytest_modal_eval import hookspecs

    page = reference.hooks_reference()
    names = [name for name in vars(hookspecs) if name.startswith("pytest_")]
    assert names
    for name in names:
        assert f"### `{name}(" in page


def test_pages_use_the_generated_references(reference: ModuleType) -> None:
    """Each reference appears on a page, and every marker on a page names a generator."""
    docs = REPO / "docs"
    used = set()
    for page in docs.glob("*.md"):
        text = page.read_text(encoding="utf-8")
        used |= set(reference.MARKER.findall(text))
        reference.render(text)  # raises on an unknown marker
    assert used == set(reference.GENERATORS)


def test_the_generated_references_in_the_markdown_are_current(reference: ModuleType) -> None:
    """The tables are in the Markdown (read on GitHub and in a clone, not only on the site)
    and match the code: a stale page fails here until it is regenerated."""
    stale = [str(page.relative_to(REPO)) for page in reference.stale_pages()]
    assert not stale, f"regenerate with `uv run python scripts/docs_reference.py`: {stale}"
    page = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    assert "| `--model` |" in page and "<!-- end of reference: options -->" in page


def test_regenerating_replaces_a_table_and_keeps_its_markers(reference: ModuleType) -> None:
    once = reference.render("# Hooks\n\n<!-- reference: hooks -->\n\nafter\n")
    assert once.count("<!-- reference: hooks -->") == 1
    assert once.count("<!-- end of reference: hooks -->") == 1
    assert once.endswith("<!-- end of reference: hooks -->\n\nafter\n")
    assert reference.render(once) == once
    edited = once.replace("pytest_modal_eval_finished", "hand-edited", 1)
    assert edited != once and reference.render(edited) == once


def test_unknown_marker_is_an_error(reference: ModuleType) -> None:
    with pytest.raises(ValueError, match="unknown reference marker 'nope'"):
        reference.render("<!-- reference: nope -->")


def test_every_nav_page_exists_and_every_page_is_in_nav() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(nav: list[object]) -> list[str]:
        out: list[str] = []
        for entry in nav:
            assert isinstance(entry, dict)
            for value in entry.values():
                out += pages(value) if isinstance(value, list) else [str(value)]
        return out

    listed = pages(config["nav"])
    on_disk = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert sorted(listed) == on_disk


def test_every_file_the_docs_name_exists() -> None:
    """A module or script named in the docs or README exists (relative to the repo or package)."""
    package = REPO / "pytest_modal_eval"
    pattern = re.compile(r"`((?:[A-Za-z_.-]+/)+[A-Za-z_.-]+\.(?:py|sh|jinja|yaml|json))`")
    pages = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
    missing = []
    for page in pages:
        for name in pattern.findall(page.read_text(encoding="utf-8")):
            if "<" in name or "{" in name or name.startswith(("evals/__baselines__", "data/")):
                continue
            if not ((REPO / name).exists() or (package / name).exists()):
                missing.append(f"{page.name}: {name}")
    assert not missing, missing

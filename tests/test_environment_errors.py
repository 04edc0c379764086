"""Where an environment's error is located: its own files first, never the interpreter's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_modal_eval.client import environment_errors
from pytest_modal_eval.client.environment_errors import environment_frame, load_failure


def raised_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str
) -> Exception:
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(module, None)
    with pytest.raises(Exception) as caught:
        __import__(module).load()
    assert isinstance(caught.value, Exception) and caught.tb.tb_next is not None
    # As the plugin catches it: the traceback from the environment's code on, not this test's.
    return caught.value.with_traceback(caught.tb.tb_next)


def test_an_installed_environment_is_located_in_its_own_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment installed where the interpreter's packages are (site-packages, or a
    system Python's library) is still the environment: its own line is named."""
    exc = raised_by(tmp_path, monkeypatch, "installed_env", "def load():\n    return {}['k']\n")
    prefixes = (*environment_errors._NOT_THE_ENVIRONMENTS, str(tmp_path.resolve()) + "/")
    monkeypatch.setattr(environment_errors, "_NOT_THE_ENVIRONMENTS", prefixes)
    assert environment_frame(exc, "installed_env") == f"{tmp_path.resolve()}/installed_env.py:2"
    # Without knowing the module, code where installed packages live is nobody's own.
    assert environment_frame(exc) is None
    assert str(load_failure("x", "loading it", exc, "installed_env")) == (
        f"environment 'x': loading it raised KeyError: 'k' (at {tmp_path.resolve()}"
        "/installed_env.py:2)"
    )


def test_a_library_the_environment_calls_is_not_named_as_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The innermost frame of the environment's own code, not of pydantic below it."""
    source = (
        "import pydantic\n\n\nclass Row(pydantic.BaseModel):\n    n: int\n\n\n"
        "def load():\n    return Row(n='many')\n"
    )
    exc = raised_by(tmp_path, monkeypatch, "calls_pydantic", source)
    assert environment_frame(exc, "calls_pydantic") == (f"{tmp_path.resolve()}/calls_pydantic.py:9")
    assert environment_frame(exc) == f"{tmp_path.resolve()}/calls_pydantic.py:9"

"""The pytest project the command line works in: its rootdir and ini settings.

The plugin reads its ini keys through pytest; the command line must read the same files the
same way without starting pytest (loading every plugin costs seconds). pytest's own search
for the ini file (``determine_setup``) is private API, so it is used here only, and
``tests/test_cli.py`` pins what this module relies on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from _pytest.config.findpaths import determine_setup

from pytest_modal_eval.redact import Redactor


@dataclass(frozen=True)
class Project:
    rootdir: Path
    inipath: Path | None
    ini: Mapping[str, object] = field(default_factory=dict)
    invocation_dir: Path = field(default_factory=Path.cwd)

    @classmethod
    def find(cls, invocation_dir: Path | None = None, args: list[str] | None = None) -> Project:
        where = invocation_dir or Path.cwd()
        rootdir, inipath, inicfg, _ = determine_setup(
            inifile=None,
            override_ini=None,
            args=args or [],
            rootdir_cmd_arg=None,
            invocation_dir=where,
        )
        ini = {key: getattr(value, "value", value) for key, value in inicfg.items()}
        return cls(Path(rootdir), inipath, ini, where)

    def ini_str(self, name: str) -> str:
        value = self.ini.get(name)
        return value if isinstance(value, str) else ""

    def ini_lines(self, name: str, default: list[str]) -> list[str]:
        """A ``linelist`` ini value as pytest reads it: one item per non-empty line."""
        value = self.ini.get(name)
        if isinstance(value, str):
            return [line.strip() for line in value.splitlines() if line.strip()]
        if isinstance(value, list):
            return [str(item) for item in value]
        return list(default)

    def api_key_env(self, option: str | None) -> str:
        """The variable holding the endpoint's key, as pytest resolves ``--api-key-env``: the
        option, else ini ``modal_eval_api_key_env``, else ``OPENAI_API_KEY``."""
        return option or self.ini_str("modal_eval_api_key_env") or "OPENAI_API_KEY"

    def redactor(
        self, api_key_env: str | None, environ: Mapping[str, str] | None = None
    ) -> Redactor:
        """The secrets a pytest session of this project knows from its environment (as
        ``collect.context.session_redactor`` finds them): the key :meth:`api_key_env` names,
        the variables ini ``modal_eval_secret_env`` lists, the plugin's credentials and every
        variable with a secret-looking name."""
        names = [self.api_key_env(api_key_env), *self.ini_lines("modal_eval_secret_env", [])]
        return Redactor.from_environ(environ, names=names)

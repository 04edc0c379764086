"""Names a setting can take, apart from the schema: option parsing, which runs in every pytest
session where the plugin is installed, imports this and not pydantic."""

from __future__ import annotations

from typing import Literal

Backend = Literal["modal", "local", "endpoint"]

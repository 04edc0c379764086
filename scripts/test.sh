#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite, the real-vLLM tier included.
# Extra arguments go to pytest. Quick iteration without vLLM: uv run pytest -m "not vllm"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MODAL_EVAL_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
# The vLLM tier must run here, not skip: a missing vLLM fails instead.
export MODAL_EVAL_REQUIRE_VLLM=1
# Likewise the report's browser tests: a missing Chromium fails them.
export MODAL_EVAL_REQUIRE_BROWSER=1
if command -v uv >/dev/null 2>&1; then UV=(uv); else UV=(python3 -m uv); fi
# pytest exits 5 when it ran no test; with `set -e` that fails the script too.
exec "${UV[@]}" run --locked pytest "$@"

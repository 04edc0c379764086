#!/usr/bin/env bash
# The README's first command: set everything up (scripts/setup.sh), then evaluate the bundled
# arithmetic benchmark with real vLLM (CPU build) serving the tiny demo model on 127.0.0.1.
# Extra arguments go to pytest, e.g. `bash scripts/demo.sh -v`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if command -v uv >/dev/null 2>&1; then UV=(uv); else UV=(python3 -m uv); fi
# -p no:hypothesispytest: hypothesis (a test dependency) imports itself at every session's end
# through its pytest plugin; the demo has no use for it.
exec "${UV[@]}" run --locked pytest evals/arithmetic.yaml -p no:hypothesispytest \
  --backend local --model models/tiny-arith --vllm-python .venv-vllm/bin/python \
  --eval-fresh "$@"

"""What the harness costs next to the model server: scripts, not tests (README, "Performance").

Each script measures ratios within one run, against one server, and prints a table:
``python -m benchmarks.throughput`` (needs vLLM), ``benchmarks.scaling`` (needs vLLM),
``benchmarks.proxy_cost``, ``benchmarks.resume_cost``, ``benchmarks.memory``,
``benchmarks.startup``.
"""

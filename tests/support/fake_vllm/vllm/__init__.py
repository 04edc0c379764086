"""A stand-in for the ``vllm`` package in fast tests (see ``entrypoints/openai/api_server.py``).

Only importable when ``tests/support/fake_vllm`` is on ``PYTHONPATH``; it is never installed.
"""

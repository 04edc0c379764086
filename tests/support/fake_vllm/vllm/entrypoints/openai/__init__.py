"""Stand-in for ``vllm.entrypoints.openai``."""

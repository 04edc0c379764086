"""Serving on Modal: the app that runs vLLM, the backend that deploys it, and the local
redirect proxy that follows Modal's 303s."""

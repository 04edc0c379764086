"""Serving on Modal: the app that runs vLLM, the backend that deploys it, the local redirect
proxy that follows Modal's 303s, and finding and ending this tool's apps and sandboxes."""

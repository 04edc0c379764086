"""Detached sessions: the pytest session run on Modal, its results on a Modal Volume, fanned out
over containers, followed, pulled and stopped from anywhere (``--detach``; docs/detached.md)."""

"""Runs on disk: the run-directory layout, checkpoints, run state, resume, and the evaluation
that ties them together."""

"""Judging a run: the gate's verdict and stored baselines."""

"""The gate: a benchmark's verdict, stored baselines and the session's reference model."""

"""Sharing finished runs: a Hugging Face Hub dataset repository, an MLflow tracking store.

``bundle`` reads a run (secrets removed by ``redact``); ``hub`` and ``card`` push it;
``tracking`` logs it to MLflow; ``controller`` does both when a pytest session ends.
"""

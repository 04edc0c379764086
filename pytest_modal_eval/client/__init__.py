"""The evaluation's client side: the verifiers adapter, the direct HTTP client, rollout seeds,
request order, the answer journal and the environment's HTTP(S) proxy settings."""

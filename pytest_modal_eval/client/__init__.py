"""The evaluation's client side: the verifiers adapter, the bundled file-qa run natively, the
direct HTTP client, rollout seeds, request order, the answer journal and the environment's
HTTP(S) proxy settings."""

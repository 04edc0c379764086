"""vLLM on this machine (``--backend local``) and the vLLM command line shared with Modal."""

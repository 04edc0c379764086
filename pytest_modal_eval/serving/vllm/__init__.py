"""serving/vllm"""

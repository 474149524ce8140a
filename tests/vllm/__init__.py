"""Opt-in end-to-end tests against a real vLLM (CPU): `make test-vllm`."""

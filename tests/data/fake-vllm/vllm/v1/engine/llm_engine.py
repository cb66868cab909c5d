"""Preloaded by the forkserver, like vLLM's."""

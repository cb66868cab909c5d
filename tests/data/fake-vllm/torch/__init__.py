"""Fake torch for the engine process tests: no accelerator."""

from types import SimpleNamespace

__version__ = "0.0.fake"
version = SimpleNamespace(cuda=None)
cuda = SimpleNamespace(is_available=lambda: False, max_memory_allocated=lambda: 0)

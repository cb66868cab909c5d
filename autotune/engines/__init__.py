"""Engines: simulated vLLM (``sim``), any engine through a command (``cmd``), real vLLM (``vllm``)."""

from __future__ import annotations

import importlib
from typing import Any

from autotune.engines._base import EngineBackend, EngineError

__all__ = ["ENGINES", "EngineBackend", "EngineError", "make_engine"]

#: Registry name -> "module:Class", imported lazily so that e.g. ``sim`` never imports vLLM helpers.
ENGINES: dict[str, str] = {
    "sim": "autotune.engines.sim:SimEngine",
    "cmd": "autotune.engines.cmd:CmdEngine",
    "vllm": "autotune.engines.vllm:VllmEngine",
}


def make_engine(name: str, cache_dir: str | None = None, **options: Any) -> EngineBackend:
    """Build the engine registered as ``name``.

    Raises:
        EngineError: unknown name.
    """
    try:
        target = ENGINES[name]
    except KeyError:
        raise EngineError(f"unknown engine {name!r}: choose one of {', '.join(sorted(ENGINES))}") from None
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(cache_dir=cache_dir, **options)

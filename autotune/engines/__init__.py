"""Engines: simulated vLLM (``sim``), any engine through a command (``cmd``), real vLLM (``vllm``)."""

from __future__ import annotations

import importlib

from autotune.engines._base import EngineBackend, RestartEngine
from autotune.engines._errors import EngineError, EngineOptionError
from autotune.engines._options import EngineOptions, OptionValue, RawOptions, SimOptions

__all__ = ["ENGINES", "EngineBackend", "EngineError", "EngineOptionError", "EngineOptions", "OptionValue",
           "RawOptions", "RestartEngine", "SimOptions", "engine_settings", "make_engine"]

#: Registry name -> "module:Class", imported lazily so that e.g. ``sim`` never imports vLLM helpers.
ENGINES: dict[str, str] = {
    "sim": "autotune.engines.sim:SimEngine",
    "cmd": "autotune.engines.cmd:CmdEngine",
    "vllm": "autotune.engines.vllm:VllmEngine",
}


def _engine_class(name: str) -> type[EngineBackend]:
    try:
        target = ENGINES[name]
    except KeyError:
        raise EngineError(f"unknown engine {name!r}: choose one of {', '.join(sorted(ENGINES))}") from None
    module_name, class_name = target.split(":")
    found: type[EngineBackend] = getattr(importlib.import_module(module_name), class_name)
    return found


def make_engine(name: str, cache_dir: str | None = None, **options: OptionValue) -> EngineBackend:
    """Build the engine registered as ``name``; its options are validated here, once (``engine.settings``).

    Raises:
        EngineError: unknown name, or a bad option naming ``engine.<name>.<key>``.
    """
    return _engine_class(name)(cache_dir=cache_dir, **options)


def engine_settings(name: str, options: RawOptions) -> EngineOptions:
    """``options`` validated by the model the engine ``name`` validates them with (what ``engine.settings`` would
    be), without making the engine: for commands that read the options but start nothing (``doctor``).

    Raises:
        EngineError: as :func:`make_engine`.
    """
    return _engine_class(name).Settings.parse(options)

"""What the user writes: the search space (YAML -> Optuna parameters -> ``EngineConfig``) and the workload.

:data:`MAX_NUMBER` (the largest number a setting takes) and :func:`load_yaml` (YAML with duplicate keys refused and
aliases bounded) are here for the command line's ``KEY=VALUE`` flags, which are read by the same rules as the file.
"""

from __future__ import annotations

from typing import Any

__all__ = ["K_HARD_MAX", "MAX_NUMBER", "load_yaml"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the engines import config.workload, which needs neither pydantic nor YAML, and the face
    # would otherwise make them pay for both (~0.13 s of a 0.3 s import of the simulator).
    if name == "K_HARD_MAX":
        from autotune.config._models import K_HARD_MAX

        return K_HARD_MAX
    if name == "MAX_NUMBER":
        from autotune.config._models import MAX_NUMBER

        return MAX_NUMBER
    if name == "load_yaml":
        from autotune.config._yaml import load_yaml

        return load_yaml
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

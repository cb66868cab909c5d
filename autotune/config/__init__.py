"""What the user writes: the search space (YAML -> Optuna parameters -> ``EngineConfig``) and the workload.

:data:`MAX_NUMBER` (the largest number a setting takes) and :func:`load_yaml` (YAML with duplicate keys refused and
aliases bounded) are here for the command line's ``KEY=VALUE`` flags, which are read by the same rules as the file.
"""

from autotune.config._models import MAX_NUMBER
from autotune.config._yaml import load_yaml

__all__ = ["MAX_NUMBER", "load_yaml"]

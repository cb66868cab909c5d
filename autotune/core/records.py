"""Frozen records that a trial flows through.

Everything autotune persists (Optuna user attrs, MLflow, reports, exports) goes through these records and
the record layer (:mod:`autotune.records`: ``encode``, ``decode``), so there is one JSON shape per concept.

* :class:`Dataset` - where a workload's prompts come from.
* :class:`Workload` - what one timed pass runs.
* :class:`EngineConfig` - what we ask the engine for, in vLLM's own names.
* :class:`Resolved` - what the engine says it actually ran after start-up (defined in :mod:`autotune.core.resolved`,
  with the differences it reveals).
* :class:`RestartResult` - one fresh engine process: status, passes, resolved config, error.
* :class:`EngineFacts` - which engine ran: name, version, GPU, driver, CUDA.

The records live in private modules by concept (``_workload``, ``_engine_config``, ``_restart``); this module is
their one public name, so every import reads ``from autotune.core.records import ...``.
"""

from __future__ import annotations

from autotune.core._engine_config import EngineConfig, EngineFacts, config_differences, speculation_plan_change
from autotune.core._restart import LevelResult, RestartResult, RestartStatus
from autotune.core._workload import (AGGREGATES, GOODPUT_METRICS, LATENCY_METRICS, LATENCY_PERCENTILES, OBJECTIVE_UNITS,
                                     OBJECTIVES, Dataset, Workload, combine_latency, latency_key)
from autotune.core.plausible import MAX_TOK_S, throughput_problem
from autotune.core.resolved import Detail, Difference, Resolved

__all__ = [
    "AGGREGATES",
    "GOODPUT_METRICS",
    "LATENCY_METRICS",
    "LATENCY_PERCENTILES",
    "MAX_TOK_S",
    "OBJECTIVES",
    "OBJECTIVE_UNITS",
    "Dataset",
    "Detail",
    "Difference",
    "EngineConfig",
    "EngineFacts",
    "LevelResult",
    "RestartResult",
    "RestartStatus",
    "Resolved",
    "Workload",
    "combine_latency",
    "config_differences",
    "latency_key",
    "speculation_plan_change",
    "throughput_problem",
]


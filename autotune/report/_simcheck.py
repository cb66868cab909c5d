"""The simulator's check of a study: the winner's true value against the best configuration in the space.

Only the sim engine knows the truth; a report of a real engine has no such line.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from autotune.core.records import EngineConfig

__all__ = ["SimulatorCheck", "simulator_check"]


@dataclasses.dataclass(frozen=True)
class SimulatorCheck:
    """Simulator only: the winner's true throughput against the best configuration in the space."""

    winner_true: float
    best_true: float
    best_label: str
    ratio_to_best: float
    under_slo: bool = False
    winner_meets_slo: bool = True



def simulator_check(engine: Any, space: Any, winner: EngineConfig) -> SimulatorCheck | None:
    """For the sim engine only: where the winner's true throughput stands against the best in the space."""
    if getattr(engine, "name", None) != "sim" or not hasattr(engine, "true_throughput"):
        return None
    slo = dict(getattr(space, "slo", {}) or {})

    if getattr(space, "objective", "throughput") == "goodput":
        slo = {}  # goodput counts the limits per request: every configuration competes

    def meets(cfg: EngineConfig) -> bool:
        # Under latency limits the best configuration is the best of those whose true latency meets them.
        if not slo:
            return True
        latency = engine.true_latency(cfg, space.workload) or {}
        return all(latency.get(key, math.inf) <= limit for key, limit in slo.items())

    # The true value under the study's objective and load levels (tok/s, or goodput), where the engine knows it.
    truth = getattr(engine, "true_value", engine.true_throughput)
    truths = []
    for params in space.all_params():
        cfg = space.config_from_params(params)
        value = truth(cfg, space.workload)
        if value is not None and meets(cfg):
            truths.append((value, cfg.label()))
    if not truths:
        return None
    best, best_label = max(truths)
    winner_true = truth(winner, space.workload) or 0.0
    return SimulatorCheck(winner_true, best, best_label, winner_true / best, bool(slo), meets(winner))

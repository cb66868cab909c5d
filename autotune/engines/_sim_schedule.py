"""A K schedule in the ``sim`` engine: the K a load level runs, and the plan and configuration at that K.

With ``speculative_config.num_speculative_tokens_per_batch_size`` the simulated worker runs, at each load level,
the K of the range that holds the level's batch (the sequences decoding together, :func:`batch_size`); the step
cost, the acceptance and the latency of that level are then those of a fixed-K configuration at that K, on the
schedule's own resolved capture mode and sizes (:func:`autotune.engines._sim_plan.plan_config` decides those:
a schedule on the V1 runner loses full graphs). Nothing here is measured.
"""

from __future__ import annotations

import dataclasses

from autotune.core.records import EngineConfig, Workload
from autotune.core.schedule import SCHEDULE_KEY, KSchedule
from autotune.engines._sim_plan import Plan
from autotune.engines._sim_speed import batch_size

__all__ = ["at_level"]


def at_level(plan: Plan, config: EngineConfig, workload: Workload) -> tuple[Plan, EngineConfig]:
    """The plan and configuration a level of ``workload`` runs: unchanged for one K; with a schedule, its K at the
    level's batch (the batch is taken before the ``max_num_batched_tokens`` cap, which depends on K)."""
    if plan.schedule is None:
        return plan, config
    schedule = KSchedule(plan.schedule)
    k = schedule.k_at(batch_size(dataclasses.replace(plan, max_num_batched_tokens=None), workload))
    spec = {key: value for key, value in dict(config.speculative_config or {}).items() if key != SCHEDULE_KEY}
    spec["num_speculative_tokens"] = k
    if isinstance(spec.get("synthetic_acceptance_rates"), list):
        spec["synthetic_acceptance_rates"] = spec["synthetic_acceptance_rates"][:k]
    fixed = dataclasses.replace(config, speculative_config=spec if k else None)
    return dataclasses.replace(plan, k=k, method=plan.method if k else None), fixed

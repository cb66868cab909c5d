"""A transient failure (the memory guard's trip) and the small study it is injected into: shared by the transient
and held-out reliability tests."""

from __future__ import annotations

from pathlib import Path

from autotune.core.records import EngineConfig
from autotune.decisions.racing import RacingPolicy
from autotune.machine import GUARD_PREFIX
from autotune.study import StudyOptions

#: What the memory guard says when it kills a start (a passing memory burst on a shared host).
TRIP = (f"{GUARD_PREFIX} MemAvailable fell below the floor 7.0 s into the restart; killed the engine's process group "
        "(MemAvailable 8.4 GiB, floor 8.5 GiB, lowest 8.4 GiB, Cached 3.0 GiB, MemTotal 121.7 GiB); a configuration "
        "that does this twice is infeasible")


def study_options(tmp_path: Path, **kw) -> StudyOptions:
    """A small random-sampled study with fixed restarts, one candidate verified with two restarts a side."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    base = dict(study_name="t", storage=f"sqlite:///{tmp_path}/o.db", workdir=str(tmp_path / "w"), trials=4,
                policy=RacingPolicy(min_restarts=1, racing=False), top_k=1, verify_restarts=2, sampler="random")
    base.update(kw)
    return StudyOptions(**base)


def speed(config: EngineConfig) -> float:
    """True throughput by K: each draft token adds 50 tok/s to 100."""
    return 100.0 + 50 * config.num_speculative_tokens

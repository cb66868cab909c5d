"""The simulator's passes in one process: a warm-up transient, pass-to-pass noise, passes sized by time.

Every process's first pass runs slow by ``first_pass_slowdown`` (its profile's range), decaying by
:data:`~autotune.engines._sim_model.WARMUP_DECAY` a pass. A speculative configuration also ramps, as measured on
the H200 (vLLM 0.26.0, issue 21: 720, 1586, 2089, 3826 tok/s while a baseline did not ramp): its first pass runs at
a fraction drawn from :data:`SPEC_FIRST_PASS` of steady state and climbs geometrically to it over a number of passes
drawn from :data:`SPEC_RAMP_PASSES`. Both ranges are generic (every profile, every landscape), anchored to that one
measurement: empirical.

Warm-up stops by the same rule the vLLM runner uses (:func:`autotune.engines.vllm._warmup.warmup_end`), and each
timed pass runs as many rounds of the prompts as the last warm-up pass says fill ``workload.pass_seconds``
(:func:`~autotune.engines.vllm._warmup.timed_rounds`); a pass of ``R`` rounds averages ``R`` rounds' noise.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from typing import Any

from autotune.core.records import Workload
from autotune.engines import _sim_model as model
from autotune.engines.vllm._warmup import timed_rounds, warmup_stop

__all__ = ["SPEC_FIRST_PASS", "SPEC_RAMP_PASSES", "ProcessPasses", "simulate_passes"]

#: A speculative configuration's first pass, as a fraction of its steady throughput (3-5x slower). Empirical.
SPEC_FIRST_PASS = (0.20, 0.35)
#: Passes a speculative configuration takes to reach steady state (the first included). Empirical.
SPEC_RAMP_PASSES = (2, 4)


@dataclasses.dataclass(frozen=True)
class ProcessPasses:
    """One load level's passes in one simulated process: tok/s of each warm-up and timed pass, and seconds."""

    warmup: list[float]
    timed: list[float]
    warmup_s: list[float]
    timed_s: list[float]
    rounds: int
    stop: str = "none"


def simulate_passes(level: float, rng: random.Random, workload: Workload, hw: model.HardwareProfile,
                    speculative: bool, prior: Any = None,
                    pass_noise: Callable[[float], float] | None = None) -> ProcessPasses:
    """Warm-up passes until the rule says warm, then ``workload.timed_passes`` passes sized by time.

    ``level`` is the process's steady tok/s (restart noise and coldness included); a warm-up cut short leaks its
    slowness into the timed passes, as it would on a real engine. ``prior`` is the study's noise prior
    (:func:`autotune.engines.vllm._warmup.warmup_end`). Every pass the process could run draws its noise up front,
    so where warm-up stops does not shift the draws after it. ``pass_noise`` (a drifting machine,
    :class:`autotune.engines.drift.PassChain`): each pass's log noise from the pass's length in seconds, in process
    order, in place of the profile's independent pass noise.
    """
    first = rng.uniform(*hw.first_pass_slowdown)
    ramp_from = rng.uniform(*SPEC_FIRST_PASS) if speculative else 1.0
    ramp_passes = rng.randint(*SPEC_RAMP_PASSES) if speculative else 1
    tokens = workload.num_prompts * workload.output_len
    cap = max(workload.warmup_passes, workload.max_warmup_passes)
    draws = iter([rng.gauss(0.0, 1.0) for _ in range(cap + workload.timed_passes)])

    def one_pass(j: int, rounds: int = 1) -> float:
        ramp = ramp_from ** max(0.0, 1.0 - j / ramp_passes) if j < ramp_passes else 1.0
        own = next(draws)
        speed = level * ramp * (1.0 - first * model.WARMUP_DECAY**j)
        if pass_noise is not None:
            return speed * math.exp(pass_noise(rounds * tokens / speed))
        return speed * math.exp(own * hw.pass_noise_sd / math.sqrt(rounds))

    warmup: list[float] = []
    while (stop := warmup_stop(warmup, workload.warmup_passes, workload.max_warmup_passes, prior)) is None:
        warmup.append(one_pass(len(warmup)))
    warmup_s = [tokens / x for x in warmup]
    rounds = timed_rounds(workload.pass_seconds, warmup_s[-1] if warmup_s else None)
    timed = [one_pass(len(warmup) + i, rounds) for i in range(workload.timed_passes)]
    return ProcessPasses(warmup, timed, warmup_s, [rounds * tokens / x for x in timed], rounds, stop)

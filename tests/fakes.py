"""A table-driven engine for study-level tests: the engine boundary is the only place anything is faked.

Throughput is a per-configuration true mean (looked up by parameters) times deterministic lognormal noise
keyed on (config, seed). Optional knobs make restarts slow (for kill -9 tests), fail, or lucky on the search's
seeds only (for verification tests).
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from autotune.engines import EngineBackend
from autotune.records import EngineConfig, Resolved, RestartResult, Workload

VERIFY_SEED_FLOOR = 50_000


def _rng(*parts: Any) -> random.Random:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class TableEngine(EngineBackend):
    """``true_mean(config) -> float`` decides each configuration's truth.

    Args:
        true_mean: Maps a configuration to its true mean throughput.
        noise: Relative restart-to-restart sd.
        sleep_s: Real seconds each restart takes (for interruption tests).
        lucky: Configuration predicate that gets ``lucky_factor`` on search seeds only (seed mod 100,000 below 50,000).
        fail: Configuration predicate whose restarts fail.
        resolve: Optional function returning the Resolved the engine "ran".
    """

    name = "table"

    def __init__(self, true_mean: Callable[[EngineConfig], float], noise: float = 0.03, sleep_s: float = 0.0,
                 lucky: Callable[[EngineConfig], bool] | None = None, lucky_factor: float = 1.5,
                 fail: Callable[[EngineConfig], bool] | None = None,
                 resolve: Callable[[EngineConfig], Resolved] | None = None, cache_dir: str | None = None) -> None:
        super().__init__(cache_dir=cache_dir)
        self.true_mean, self.noise, self.sleep_s = true_mean, noise, sleep_s
        self.lucky, self.lucky_factor, self.fail, self.resolve = lucky, lucky_factor, fail, resolve
        self.calls: list[tuple[str, int]] = []

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        self.calls.append((config.key(), seed))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.fail is not None and self.fail(config):
            return RestartResult.failure("failed", "RuntimeError: engine rejected the configuration",
                                         restart=restart, seed=seed, wall_s=10.0)
        mean = self.true_mean(config)
        if self.lucky is not None and self.lucky(config) and seed % 100_000 < VERIFY_SEED_FLOOR:
            mean *= self.lucky_factor
        rng = _rng(config.key(), seed)
        value = mean * math.exp(rng.gauss(0.0, self.noise))
        passes = tuple(value * math.exp(rng.gauss(0.0, 0.005)) for _ in range(workload.timed_passes))
        resolved = self.resolve(config) if self.resolve else Resolved(
            cudagraph_mode=config.cudagraph_mode, cudagraph_capture_sizes=config.capture_sizes)
        return RestartResult(status="ok", restart=restart, seed=seed, passes_tok_s=passes, warmup_tok_s=(value * 0.7,),
                             startup_s=30.0, wall_s=60.0, resolved=resolved,
                             accept_len=2.5 if config.num_speculative_tokens else None)


def by_params(table: Mapping[tuple[str, int], float], default: float = 100.0) -> Callable[[EngineConfig], float]:
    """True mean from ``(cudagraph_mode param, K)`` pairs; others get ``default``."""

    def true_mean(config: EngineConfig) -> float:
        key = (config.params.get("cudagraph_mode", "default"), int(config.params.get("num_speculative_tokens", 0)))
        return table.get(key, default)

    return true_mean


SMALL_SPACE = {
    "name": "small",
    "engine_args": {"model": "org/model", "max_num_seqs": 4},
    "workload": {"num_prompts": 4, "input_len": 16, "output_len": 16, "concurrency": 4, "timed_passes": 2},
    "search": {
        "cudagraph_mode": ["NONE", "PIECEWISE", "FULL_AND_PIECEWISE"],
        "capture_sizes": {"tiny": [1, 2, 4, 8]},
        "num_speculative_tokens": {"low": 0, "high": 2},
        "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
    },
}

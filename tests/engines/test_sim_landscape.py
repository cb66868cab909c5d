"""The simulator's random landscapes (``profile: random``): one per seed, deterministic, truth a function of the
resolved plan, and a family varied enough to be a held-out check (docs/simulator.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engines._base import EngineError
from autotune.engines._sim_landscape import draw_landscape
from autotune.engines.sim import SimEngine
from autotune.config.space import load_space

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def space():
    return load_space(ROOT / "search_spaces" / "h200.yaml")


def _truth(space, seed: int) -> dict[str, float | None]:
    engine = SimEngine(profile="random", landscape_seed=seed)
    return {space.config_from_params(p).key(): engine.true_throughput(space.config_from_params(p), space.workload)
            for p in space.all_params()}


def test_landscapes_differ_by_seed_and_are_deterministic_per_seed(space):
    first, again, other = _truth(space, 1), _truth(space, 1), _truth(space, 2)
    assert first == again
    assert first != other
    # Not a rescaling of one shape: the best configuration itself moves between seeds.
    best = {seed: max((v, k) for k, v in _truth(space, seed).items() if v is not None)[1] for seed in range(8)}
    assert len(set(best.values())) >= 3


def test_noisy_restarts_are_deterministic_per_seed_too(space):
    config = space.config_from_params(space.all_params()[7])
    runs = [SimEngine(profile="random", landscape_seed=5).run_restart(config, space.workload, restart=1, seed=3)
            for _ in range(2)]
    assert runs[0].passes_tok_s == runs[1].passes_tok_s
    assert runs[0].value is not None and runs[0].value > 0


def test_truth_depends_only_on_the_resolved_plan(space):
    engine = SimEngine(profile="random", landscape_seed=11)
    by_plan: dict[tuple, set[float]] = {}
    for params in space.all_params():
        config = space.config_from_params(params)
        value = engine.true_throughput(config, space.workload)
        if value is None:
            continue
        resolved = engine.resolve(config)
        plan = (resolved.cudagraph_mode, resolved.cudagraph_capture_sizes, config.num_speculative_tokens,
                config.spec_method if config.num_speculative_tokens else None)
        by_plan.setdefault(plan, set()).add(round(value, 6))
    assert all(len(values) == 1 for values in by_plan.values())
    assert len(by_plan) > 20


def test_the_family_has_silent_changes_and_no_fixed_winner():
    drawn = [draw_landscape(seed) for seed in range(40)]
    assert any(d.spec_default_to_none for d in drawn) and not all(d.spec_default_to_none for d in drawn)
    assert any(d.round_sizes_with_spec for d in drawn) and not all(d.round_sizes_with_spec for d in drawn)
    assert len({d.hardware.cold_slowdown for d in drawn}) > 2
    assert 0.02 <= min(d.hardware.noise_sd for d in drawn) and max(d.hardware.noise_sd for d in drawn) <= 0.08


def test_landscape_seed_is_validated_and_described():
    with pytest.raises(EngineError, match=r"engine\.sim\.landscape_seed"):
        SimEngine(profile="random", landscape_seed="seven")
    with pytest.raises(EngineError, match="random"):
        SimEngine(profile="tpu")
    facts = SimEngine(profile="random", landscape_seed=4).describe()
    assert facts.simulated and facts.extra["landscape_seed"] == 4
    assert "landscape_seed" not in SimEngine(profile="h200").describe().extra


def test_latency_follows_the_landscapes_speed(space):
    engine = SimEngine(profile="random", landscape_seed=2)
    configs = [space.config_from_params(p) for p in space.all_params()]
    runnable = [(engine.true_throughput(c, space.workload), c) for c in configs]
    runnable = sorted(((v, c) for v, c in runnable if v is not None), key=lambda vc: vc[0])
    (slow_v, slow), (fast_v, fast) = runnable[0], runnable[-1]
    slow_tpot = engine.true_latency(slow, space.workload)["tpot_mean_ms"]
    fast_tpot = engine.true_latency(fast, space.workload)["tpot_mean_ms"]
    assert fast_v > 1.5 * slow_v
    assert fast_tpot < slow_tpot  # a faster plan streams its tokens faster

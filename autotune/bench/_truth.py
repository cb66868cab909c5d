"""Ground truth: the benchmark's profiles on the simulator, and the noiseless throughput of every configuration
(read only here, to score picks; the tuner never sees it)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.config.space import SearchSpace, load_space
from autotune.core.records import EngineConfig
from autotune.engines.sim import SimEngine


@dataclasses.dataclass(frozen=True)
class Profile:
    """A benchmark profile: a search space file run on the simulator with some hardware and model profile."""

    name: str
    space_file: str
    sim: Mapping[str, str]
    description: str


PROFILES: dict[str, Profile] = {
    "gb10": Profile("gb10", "search_spaces/gb10.yaml", {"profile": "gb10", "model_profile": "moe"},
                    "GB10 sparse MoE: spec + default mode silently runs eager; noisy restarts"),
    "h200": Profile("h200", "search_spaces/h200.yaml", {"profile": "h200", "model_profile": "dense"},
                    "H200 dense model"),
    "flat": Profile("flat", "search_spaces/h200.yaml", {"profile": "flat", "model_profile": "dense"},
                    "no configuration beats the baseline by more than 1%: every 'faster' is a false win"),
    # A different landscape for every seed (engines/_sim_landscape.py): the check that nothing is tuned to the
    # profiles above.
    "random": Profile("random", "search_spaces/h200.yaml", {"profile": "random"},
                      "a landscape drawn per seed: random effects, interactions, silent changes and noise"),
}
#: Profiles whose landscape is drawn from the run's seed (``landscape_seed`` = the benchmark seed).
PER_SEED_PROFILES = ("random",)


@dataclasses.dataclass(frozen=True)
class Truth:
    """The simulator's noiseless throughput of every configuration of a profile's space.

    Attributes:
        values: Config key -> true tok/s (configurations that cannot run are absent).
        best: The best true throughput in the space.
        best_label: A configuration that reaches it.
        baseline: The baseline's true throughput.
        n_configs: Distinct configurations in the space.
    """

    values: Mapping[str, float]
    best: float
    best_label: str
    baseline: float
    n_configs: int

    def of(self, config: EngineConfig | None) -> float:
        """True throughput of ``config``; 0 for no pick or a configuration that cannot run."""
        if config is None:
            return 0.0
        return float(self.values.get(config.key(), 0.0))

    def regret(self, config: EngineConfig | None) -> float:
        """Simple regret relative to the best: 0 is the best configuration, 1 is nothing that runs."""
        return 1.0 if config is None else self.regret_of_key(config.key())

    def regret_of_key(self, key: str) -> float:
        """:meth:`regret` of the configuration with ``key``."""
        return (self.best - float(self.values.get(key, 0.0))) / self.best


# -- ground truth ----------------------------------------------------------------------------------------


def make_engine(profile: Profile, seed: int = 0, drift: str = "off") -> SimEngine:
    """A fresh simulated engine for ``profile`` (empty compile cache: first starts are cold).

    ``seed`` picks the landscape of a per-seed profile (:data:`PER_SEED_PROFILES`); the others ignore it. ``drift``:
    a drifting machine's preset (the ground truth is the same: only the restarts' noise changes), its level's path
    drawn from ``seed``.
    """
    options: dict[str, Any] = dict(profile.sim)
    if profile.name in PER_SEED_PROFILES:
        options["landscape_seed"] = seed
    if drift != "off":
        options.update(drift=drift, drift_seed=seed)
    return SimEngine(cache_dir=None, **options)


def load_profile_space(profile: Profile, root: str | os.PathLike[str] = ".") -> SearchSpace:
    """The profile's search space, its file resolved against ``root``."""
    return load_space(Path(root) / profile.space_file)


def ground_truth(space: SearchSpace, engine: SimEngine) -> Truth:
    """The true throughput of every configuration in ``space`` (the benchmark's scorer, never the tuner's)."""
    values: dict[str, float] = {}
    labels: dict[str, str] = {}
    for params in space.all_params():
        config = space.config_from_params(params)
        value = engine.true_throughput(config, space.workload)
        if value is not None:
            values[config.key()] = value
            labels[config.key()] = config.label()
    best_key = max(values, key=values.__getitem__)
    baseline = engine.true_throughput(space.baseline(), space.workload) or 0.0
    return Truth(values, values[best_key], labels[best_key], baseline, len(space.all_params()))


_TRUTH_CACHE: dict[tuple[str, str, int], tuple[SearchSpace, Truth]] = {}


def _space_and_truth(profile: Profile, root: str, seed: int = 0) -> tuple[SearchSpace, Truth]:
    # Each worker computes a landscape's ground truth once (a few hundred model evaluations).
    key = (profile.name, str(root), seed if profile.name in PER_SEED_PROFILES else 0)
    if key not in _TRUTH_CACHE:
        space = load_profile_space(profile, root)
        _TRUTH_CACHE[key] = (space, ground_truth(space, make_engine(profile, seed)))
    return _TRUTH_CACHE[key]

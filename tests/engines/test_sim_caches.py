"""The simulator models caches as the vLLM engine decides them: a configuration's start is warm where its cache
(a marker in the workdir) is present, so a copied workdir starts warm and a fresh one cold (issue 21, item 5)."""

from __future__ import annotations

import shutil

from autotune.config.space import parse_space
from autotune.engines.sim import SimEngine
from tests.conftest import SMALL_SPACE


def test_the_simulators_cold_starts_follow_the_workdirs_caches(tmp_path):
    space = parse_space(SMALL_SPACE)
    config, workload = space.baseline(), space.workload
    work = tmp_path / "study"
    engine = SimEngine(cache_dir=str(work), profile="h200")
    assert engine.run_restart(config, workload, restart=0, seed=1).cold
    assert not engine.run_restart(config, workload, restart=1, seed=2).cold
    shutil.copytree(work, tmp_path / "copied")
    assert not SimEngine(cache_dir=str(tmp_path / "copied"), profile="h200").run_restart(
        config, workload, restart=0, seed=3).cold, "a copied workdir brings its caches"
    assert SimEngine(cache_dir=str(tmp_path / "fresh"), profile="h200").run_restart(
        config, workload, restart=0, seed=3).cold, "a fresh workdir (the database copied alone) starts cold"

"""The replay benchmark on the recorded H200 restarts (issue 31, item 5): a few draws, behaviour only."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.bench.replay import _ci, load_models, replay_cell


def test_the_replay_models_the_recorded_moe_study_and_its_policies_differ_as_designed():
    info = load_models(scenario="h200-moe30")
    models = info["models"]
    base, win = models[info["baseline"]], models[info["winner"]]
    assert base.sd > win.sd > 0  # the engine defaults are the noisy side
    fixed = replay_cell(info, "fixed", 30.0, 8, seed=1)
    plan = replay_cell(info, "plan", 30.0, 8, seed=1)
    assert fixed["starts"] == 6.0  # 3 + 3, always
    assert plan["starts"] > fixed["starts"]  # the plan gives the noisy baseline more
    assert plan["configs"] <= fixed["configs"]  # and holds back more of the search
    assert plan["over"] <= max(base.price, win.price) + 1e-9  # at most one restart over the budget


def test_a_false_faster_on_the_null_stays_within_its_bound_on_a_small_draw():
    info = load_models(scenario="h200-moe30")
    null = replay_cell(info, "plan", 30.0, 20, seed=2, null="baseline")
    low, _ = _ci(int(null["faster_n"]), 20)
    assert low <= 0.05


def test_every_policy_replays_on_the_drifting_machine_within_its_budget():
    # The drift scenario runs each policy's verification on a machine whose restarts are priced by their timed
    # window: every policy completes, none overruns by more than one restart, and the paired policies record the
    # window they ran (the search's two passes unless the plan sized another).
    from autotune.bench.replay import DRIFT_PASS_S, DRIFT_PASSES, DRIFT_RESTART_MIN, POLICIES

    for policy in POLICIES:
        cell = replay_cell(None, policy, 30.0, 4, seed=3, drift="h100", effect=1.13)
        assert cell["starts"] >= 6 and cell["configs"] >= 2, policy
        longest = (60.0 * DRIFT_RESTART_MIN - DRIFT_PASSES * DRIFT_PASS_S + 12 * DRIFT_PASS_S) / 60.0
        assert cell["over"] <= longest + 1e-9, policy


def test_the_start_up_covariate_is_measured_within_series_not_across_configurations():
    # Two challengers whose own start-up cost and speed differ (offsets): within each, the log ratio falls exactly as
    # the start-up difference grows. Centred per series the correlation is -1; pooled raw, the offsets would hide it.
    from autotune.bench.covariate import _centred, _line

    a = [(0.5 + x, -0.3 - x) for x in (-0.1, 0.0, 0.1)]
    b = [(-0.5 + x, 0.4 - x) for x in (-0.2, 0.0, 0.2)]
    x, y, kept = _centred([a, b, [(9.0, 9.0)]])  # a series of one round says nothing within itself
    assert kept == 2 and len(x) == 6
    assert np.corrcoef(x, y)[0, 1] == pytest.approx(-1.0)
    assert "= -1.00" in _line("t", [a, b])
    assert "too few" in _line("t", [a[:2]])

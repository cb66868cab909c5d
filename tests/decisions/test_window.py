"""Verification's timed window sized with its rounds (issue 41, item 6): the within- and between-restart components
(Kalibera & Jones), the window that buys the most for the budget, the search's window kept unless the gain is
material, and a study that runs its verification restarts with the window its plan stored."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from autotune.cli._main import raw_main
from autotune.decisions.planning import plan_rounds
from autotune.decisions.window import MIN_GAIN, WindowCosts, sized_plan
from autotune.stats.components import Components, components
from autotune.store import ledger as ledger_mod
from tests.conftest import SMALL_SPACE


def _groups(rng, configs, restarts, passes, within_sd, between_sd):
    return [[list(3000.0 * np.exp(rng.normal(0.0, between_sd) + rng.normal(0.0, within_sd, passes)))
             for _ in range(restarts)] for _ in range(configs)]


def test_the_components_are_recovered_from_restarts_of_several_passes():
    rng = np.random.default_rng(7)
    parts = components(_groups(rng, 60, 6, 5, 0.10, 0.05))
    assert parts is not None
    assert parts.within_df == 60 * 6 * 4 and parts.between_df == 60 * 5 and parts.passes == 5
    assert parts.within == pytest.approx(0.01, rel=0.08)
    assert parts.between == pytest.approx(0.0025, rel=0.25)
    assert parts.restart_var(5) == pytest.approx(parts.between + parts.within / 5)


def test_without_two_passes_nothing_separates_the_levels_and_one_restart_a_configuration_leaves_between_unknown():
    assert components([[[3000.0], [3100.0]], [[2900.0]]]) is None
    parts = components([[[3000.0, 3100.0, 2950.0]], [[2800.0, 2900.0]]])
    assert parts is not None and parts.between_df == 0 and parts.between == 0.0 and parts.within > 0
    # Passes that are not throughput (a failed pass, 0) are left out, not taken as a huge spread.
    assert components([[[3000.0, 0.0, 3010.0, float("nan")]]]).within_df == 1


def _plan_at(max_minutes):
    def plan_at(vc, vb, mc, mb):
        return plan_rounds(vc, vb, max_minutes=max_minutes, search_effect=1.13, challenger_minutes=mc,
                           baseline_minutes=mb)
    return plan_at


def test_expensive_starts_and_noisy_passes_get_a_longer_window():
    # A pass varies 20%, restarts little beyond their passes, a start costs five minutes and a pass five seconds:
    # Kalibera & Jones' case for more passes per restart.
    parts = Components(within=0.04, within_df=40, between=0.0004, between_df=20, passes=1)
    costs = WindowCosts(pass_s=5.0, restart_s=300.0)
    base = 0.0004 + 0.04 + 0.005  # a one-pass restart's planning variance
    plan = sized_plan(_plan_at(60.0), base, base, 5.1, 5.1, parts, 1, costs)
    assert plan.timed_passes is not None and plan.timed_passes > 1
    fixed = _plan_at(60.0)(base, base, 5.1, 5.1)
    assert plan.resolvable < fixed.resolvable
    assert "timed window" in plan.window and plan.window in plan.describe()


def test_cheap_starts_long_quiet_passes_and_a_drifting_level_get_a_shorter_window():
    # Passes barely vary, a pass is 30 s and a start 5 s: four passes set the round's sides two minutes apart on a
    # level that drifts, and cost four times a one-pass round.
    parts = Components(within=0.0001, within_df=40, between=0.0, between_df=20, passes=4)
    plan = sized_plan(_plan_at(20.0), 0.01, 0.01, 125 / 60, 125 / 60, parts, 4, WindowCosts(30.0, 5.0))
    assert plan.timed_passes == 1


def test_a_gain_inside_the_components_error_keeps_the_searchs_window():
    parts = Components(within=0.0057, within_df=20, between=0.0, between_df=10, passes=2)
    costs = WindowCosts(pass_s=5.0, restart_s=26.0)
    plan = sized_plan(_plan_at(7.5), 0.0146, 0.0146, 0.6, 0.6, parts, 2, costs)
    assert plan.timed_passes == 2
    # ... and the best other window was indeed predicted better, by less than the material gain.
    other = sized_plan(_plan_at(7.5), 0.0146, 0.0146, 0.6, 0.6, parts, 2, costs, most=1)
    assert other.timed_passes in (1, 2)
    if other.timed_passes == 1:
        assert math.log(other.resolvable) > (1 - MIN_GAIN) * math.log(plan.resolvable)


def test_without_components_or_costs_the_plan_is_the_searchs():
    plain = _plan_at(30.0)(0.01, 0.01, 1.0, 1.0)
    parts = Components(within=0.01, within_df=2, between=0.0, between_df=0, passes=2)  # too few df
    for p, c in ((None, WindowCosts(5.0, 30.0)), (parts, WindowCosts(5.0, 30.0)),
                 (Components(0.01, 40, 0.0, 10, 2), None)):
        plan = sized_plan(_plan_at(30.0), 0.01, 0.01, 1.0, 1.0, p, 2, c)
        assert plan == plain and plan.timed_passes is None


@pytest.mark.parametrize("budget", [["--budget-minutes", "150"], ["--budget-restarts", "30"]])
def test_a_study_runs_verification_with_the_window_its_plan_stored(tmp_path, capsys, budget):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**SMALL_SPACE, "engine": {"name": "sim"}}))
    storage = f"sqlite:///{tmp_path}/o.db"
    raw_main(["tune", "--space", str(space), "--engine", "sim", "--study", "window", *budget, "--storage", storage,
              "--workdir", str(tmp_path / "w"), "--no-mlflow", "--trials", "6"])
    out = capsys.readouterr().out
    lg = ledger_mod.load("window", storage)
    plan = lg.verify_plan()
    assert plan is not None
    runs = [len(r["passes_tok_s"]) for by_key in lg.verify_rounds().values() for rs in by_key.values() for r in rs
            if r["status"] == "ok" and not r.get("cold")]
    assert runs
    if budget[0] == "--budget-minutes":
        # Engine-minutes are the cost: the window is sized, stated in the plan line, and every counted
        # verification restart ran it.
        assert plan.timed_passes is not None and set(runs) == {plan.timed_passes}
        assert "timed window" in out
    else:
        # A start costs one whatever its passes: the search's window.
        searched = {len(r.passes_tok_s) for t in lg.measured_complete() for r in lg.restarts(t) if r.ok}
        assert plan.timed_passes is None and set(runs) == searched


def test_with_load_levels_the_window_is_not_sized(tmp_path, capsys):
    # A restart's passes then run at several loads: their spread is the loads', not one pass's noise.
    space = tmp_path / "space.yaml"
    levels = {**SMALL_SPACE, "engine": {"name": "sim"},
              "workload": {**SMALL_SPACE.get("workload", {}), "concurrency": [4, 16], "aggregate": "min"}}
    space.write_text(yaml.safe_dump(levels))
    storage = f"sqlite:///{tmp_path}/o.db"
    raw_main(["tune", "--space", str(space), "--engine", "sim", "--study", "levels", "--budget-minutes", "150",
              "--storage", storage, "--workdir", str(tmp_path / "w"), "--no-mlflow", "--trials", "6"])
    plan = ledger_mod.load("levels", storage).verify_plan()
    assert plan is not None and plan.timed_passes is None and "timed window" not in capsys.readouterr().out

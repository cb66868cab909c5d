"""Issue 41, item 2: whether a control measured through the search would pay, computed and checked by drawing."""

from __future__ import annotations

import pytest

from autotune.bench.control import LARGER, adjusted_var, break_even_s, drawn_vars, raw_var
from autotune.engines.drift import PRESETS


@pytest.mark.parametrize("name, delta", [("h100", 60.0), ("pooled", 120.0)])
def test_the_variance_formulas_match_restarts_drawn_on_the_drifting_machine(name, delta):
    params = PRESETS[name]
    raw, adjusted = drawn_vars(params, delta, pairs=3000, seed=5)
    assert raw == pytest.approx(raw_var(params), rel=0.1)
    assert adjusted == pytest.approx(adjusted_var(params, delta), rel=0.1)


def test_a_control_adds_variance_on_the_fitted_machines_at_any_spacing_a_restart_allows():
    # A warm restart takes 36-60 s on the H100: a control can never be closer than that.
    assert break_even_s(PRESETS["h100"]) < 36.0
    assert break_even_s(PRESETS["pooled"]) == 0.0


def test_a_control_pays_where_the_level_is_large_and_remembered_for_minutes():
    assert break_even_s(LARGER) > 60.0
    assert adjusted_var(LARGER, 60.0) < 0.85 * raw_var(LARGER)

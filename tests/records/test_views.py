"""The emitted views the record layer writes, against the shapes their hand-written methods wrote (key order too:
``report --json`` is read by scripts, and diffed)."""

from __future__ import annotations

import json
import math

from autotune.decisions.outputs import OutputCheck
from autotune.records import encode
from autotune.report._report import Budget, ChangedConfig
from autotune.report._rows import CompareResult
from autotune.report.outputs import OutputChecks, TrialOutputs
from autotune.report.latency import SloOutcome
from autotune.report.phases import PhaseTotals
from autotune.stats.latency import SloCheck


def test_the_output_checks_keep_their_shape_a_lossy_unchecked_method_flagged_only_when_so() -> None:
    checked = TrialOutputs(3, "ngram K=3", OutputCheck(0.5, 0.9))
    lossy = TrialOutputs(4, "fly K=2", OutputCheck(None, 0.9, lossy=True), skipped="no outputs")
    view = encode(OutputChecks(0.9, (checked, lossy), winner_unchecked=None))
    assert json.dumps(view) == json.dumps({
        "min_agreement": 0.9, "differ": [3, 4],
        "trials": [{"trial": 3, "label": "ngram K=3", "output_agreement": 0.5, "threshold": 0.9, "differs": True,
                    "skipped": None},
                   {"trial": 4, "label": "fly K=2", "output_agreement": None, "threshold": 0.9, "differs": True,
                    "lossy_unchecked": True, "skipped": "no outputs"}],
        "winner_unchecked": None})


def test_the_speedup_keeps_its_key_order_and_a_missing_interval_is_null() -> None:
    view = encode(CompareResult(1.5, None, None, 0.95, "faster", p_value=0.01, comparisons=2, pairs=None))
    assert list(view) == ["speedup", "ci_low", "ci_high", "p_value", "confidence", "comparisons", "verdict", "pairs"]


def test_optional_report_keys_are_left_out_while_unset_and_renamed_keys_keep_their_names() -> None:
    assert "verification_restarts" not in encode(Budget(3, 1.5))
    assert encode(Budget(3, 1.5, verification_restarts=2))["verification_restarts"] == 2
    assert "phase" not in encode(ChangedConfig(1, "x", ("a",)))
    totals = encode(PhaseTotals({"phase_load_s": 2.0, "phase_timed_s": math.nan}, 2, 1, 5))
    assert list(totals) == ["seconds", "total_s", "restarts", "restarts_without_phases", "warmup_passes",
                            "warmup_rules"]
    assert totals["seconds"] == {"phase_load_s": 2.0, "phase_timed_s": None}


def test_the_slo_outcome_lists_each_missed_configuration_first_as_an_object() -> None:
    check = SloCheck("tpot_p99_ms", 50.0, "misses", 61.0, 58.0, 64.0)
    view = encode(SloOutcome((("ngram K=3", "candidate", (check,)),), any_met=False, baseline_meets=True,
                             winner_meets=False))
    assert list(view) == ["missed", "any_met", "baseline_meets", "winner_meets"]
    assert view["missed"] == [{"label": "ngram K=3", "role": "candidate", "missed": [encode(check)]}]
    assert encode(check)["fails"] is True

"""The output check: greedy outputs that differ from the baseline's are flagged and cannot win (issue 20, item 6).

End to end through the real cmd engine (a wrapper that reports its output tokens, as a vLLM wrapper would), and the
pieces on their own: digests, agreement, the threshold's validation.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from optuna.trial import TrialState

from autotune.config.output_check import min_agreement
from autotune.config.space import SpaceError, parse_space
from autotune.core.facts import OUTPUT_DIGESTS
from autotune.core.outputs import CHECK_TOKENS, agreement, check_prompts, digest_outputs, parse_digests
from autotune.decisions.racing import RacingPolicy
from autotune.engines.cmd import CmdEngine
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.study import StudyOptions, run_study
from tests.conftest import SMALL_SPACE

# The fastest configuration (FULL_AND_PIECEWISE with K=2) writes garbage, as NVFP4 kernels have on sm_12x.
WRAPPER = textwrap.dedent("""
    import json, sys
    req = json.loads(sys.stdin.read())
    p = req["config"]["params"]
    mode, k = p.get("cudagraph_mode", "default"), int(p.get("num_speculative_tokens", 0))
    speed = {("FULL_AND_PIECEWISE", 2): 300.0, ("FULL_AND_PIECEWISE", 1): 250.0, ("PIECEWISE", 2): 220.0,
             ("NONE", 0): 40.0}.get((mode, k), 200.0)
    check = req["output_check"]
    broken = (mode, k) == ("FULL_AND_PIECEWISE", 2)
    tokens = {str(i): [0] * check["tokens"] if broken else [i * 7 + j for j in range(check["tokens"])]
              for i in check["prompts"]}
    print(json.dumps({"status": "ok", "passes_tok_s": [speed, speed], "resolved": {"cudagraph_mode": mode},
                      "output_tokens": tokens}))
""")


def test_outputs_that_differ_from_the_baseline_are_flagged_and_cannot_win(tmp_path):
    script = tmp_path / "engine.py"
    script.write_text(WRAPPER)
    space = parse_space({**SMALL_SPACE, "workload": {**SMALL_SPACE["workload"], "num_prompts": 12}})
    engine = CmdEngine(command=[sys.executable, str(script)], memory_floor_gib=0, timeout_s=60)
    # Right after the baselines, so the baseline's outputs are there when it finishes.
    opts = StudyOptions(study_name="t", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "work"),
                        trials=6, policy=RacingPolicy(min_restarts=1, racing=False), top_k=2, verify_restarts=2,
                        seed=1, enqueue=({"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": "tiny",
                                          "num_speculative_tokens": 2, "draft": "ngram"},))
    ledger = run_study(space, engine, opts)
    broken = [t for t in ledger.study.trials if t.params.get("cudagraph_mode") == "FULL_AND_PIECEWISE"
              and t.params.get("num_speculative_tokens") == 2 and t.state == TrialState.COMPLETE]
    assert broken and all(t.constraints["output_agreement"] > 0 for t in broken), "Optuna records it infeasible"
    others = [t for t in ledger.study.trials if t.state == TrialState.COMPLETE and t not in broken]
    assert others and all(t.constraints.get("output_agreement", 0.0) <= 0 for t in others)
    # Every restart recorded one digest per checked prompt: 8 of the workload's 12, the same for every config.
    digests = {r.facts[OUTPUT_DIGESTS] for t in ledger.study.trials for r in ledger.restarts(t)
               if r.ok and (t not in broken)}
    assert len(digests) == 1 and sorted(parse_digests(digests.pop())) == check_prompts(12, space.workload.seed)
    report = build_report(ledger)
    # The fastest configuration measured cannot win, nor take a verification slot.
    assert (report.winner.config.cudagraph_mode, report.winner.config.num_speculative_tokens) != (
        "FULL_AND_PIECEWISE", 2)
    assert report.search_best.trial in {t.number for t in broken}
    assert all(e.trial_number not in {t.number for t in broken} for e in report.verification.entries)
    data = report.to_json()["output_check"]
    assert data["min_agreement"] == 0.9 and set(data["differ"]) == {t.number for t in broken}
    by_trial = {e["trial"]: e for e in data["trials"]}
    assert all(by_trial[t.number]["output_agreement"] == 0.0 for t in broken)
    assert all(by_trial[t.number]["output_agreement"] == 1.0 for t in others)
    text = render_report(report)
    assert "outputs differ from the baseline (0% of prompts agree)" in text
    assert json.loads(json.dumps(report.to_json()))  # JSON-ready


def test_agreement_counts_prompts_whose_first_tokens_match():
    base = digest_outputs({1: list(range(40)), 5: [3] * 32, 9: [4] * 32})
    # Tokens past the first 32 do not count; one prompt of three differs.
    other = digest_outputs({1: list(range(32)) + [99] * 8, 5: [3] * 32, 9: [5] * 32})
    assert agreement(parse_digests(other), parse_digests(base)) == pytest.approx(2 / 3)
    assert agreement(parse_digests(base), {}) is None
    assert CHECK_TOKENS == 32 and check_prompts(100, 3) == check_prompts(100, 3) != check_prompts(100, 4)
    assert len(check_prompts(100, 3)) == 8 and check_prompts(5, 3) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("value,ok", [(0.95, True), (0, True), (1.5, False), ("most", False)])
def test_the_threshold_is_validated_in_one_line(value, ok):
    raw = {**SMALL_SPACE, "output_check": {"min_agreement": value}}
    if ok:
        assert min_agreement(parse_space(raw)) == value
        return
    with pytest.raises(SpaceError) as err:
        parse_space(raw)
    assert "output_check.min_agreement" in str(err.value) and "\n" not in str(err.value)
    assert min_agreement(parse_space(SMALL_SPACE)) == 0.9

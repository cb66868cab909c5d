"""Verification: which configurations are verified, where extra rounds go, resumption and determinism."""

from __future__ import annotations

import pytest

from autotune.records import encode
from autotune.stats.intervals import shrunk_means
from autotune.report._build import build_report
from autotune.core.records import EngineConfig, Resolved, Workload
from autotune.config.space import parse_space
from autotune.study import StudyOptions, run_study, run_verification
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate, SearchEvidence, plan_key, select_candidates
from tests.conftest import SMALL_SPACE, FakeEngine, by_params

WORKLOAD = Workload(timed_passes=2)
SPEC = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


def _cfg(mode: str | None = None, spec: dict | None = None, sizes=(1, 2, 4, 8)) -> EngineConfig:
    comp = {} if mode is None else {"cudagraph_mode": mode, "cudagraph_capture_sizes": list(sizes)}
    return EngineConfig(engine_args={"model": "m"}, compilation_config=comp, speculative_config=spec)


def _ev(number, config, values, mode=None, sizes=(1, 2, 4, 8), as_configured=True) -> SearchEvidence:
    return SearchEvidence(number, config, tuple(values), mode or config.cudagraph_mode or "PIECEWISE", sizes,
                          as_configured)


# -- which configurations are verified ---------------------------------------------------------------------


def test_configurations_that_resolve_to_the_same_plan_share_one_slot():
    default_spec = _cfg(None, SPEC)  # engine default mode that resolves to PIECEWISE with these sizes
    explicit = _cfg("PIECEWISE", SPEC)
    other = _cfg("FULL_AND_PIECEWISE", SPEC)
    baseline = _cfg(None, None)
    evidence = [
        _ev(0, baseline, [100.0, 101.0], mode="FULL_AND_PIECEWISE"),
        _ev(1, default_spec, [150.0, 152.0], mode="PIECEWISE", as_configured=False),
        _ev(2, explicit, [149.0, 151.0]),
        _ev(3, other, [140.0, 141.0]),
    ]
    assert plan_key(default_spec, "PIECEWISE", (8, 4, 2, 1)) == plan_key(explicit, "CUDAGraphMode.PIECEWISE",
                                                                           (1, 2, 4, 8))
    chosen = select_candidates(evidence, baseline, top_k=2)
    assert [c.role for c in chosen] == [CANDIDATE, CANDIDATE, BASELINE]
    first, second = chosen[0], chosen[1]
    # One slot for trials 1 and 2, verified through the one that ran as configured; the second slot goes on.
    assert first.trial_number == 2 and first.shares_slot_with == (1,)
    assert first.search_mean == pytest.approx(150.5)
    assert second.trial_number == 3
    assert chosen[-1].trial_number == 0 and chosen[-1].config == baseline


def test_a_configuration_that_runs_the_baselines_plan_is_not_verified_against_it():
    baseline = _cfg(None, None)
    same_as_base = _cfg("FULL_AND_PIECEWISE", None)  # what the default resolved to: the baseline in disguise
    evidence = [_ev(0, baseline, [100.0, 102.0], mode="FULL_AND_PIECEWISE"),
                _ev(1, same_as_base, [130.0, 131.0]), _ev(2, _cfg("PIECEWISE", SPEC), [110.0, 111.0])]
    chosen = select_candidates(evidence, baseline, top_k=1)
    assert [c.trial_number for c in chosen] == [2, 0]


def test_unknown_resolution_keeps_configurations_apart():
    a, b = _cfg(None, SPEC), _cfg("PIECEWISE", SPEC)
    assert plan_key(a, None, None) != plan_key(b, None, None)


def test_one_lucky_restart_does_not_outrank_several_good_ones():
    # About 10% restart noise; one configuration seen once on a good restart, one seen five times.
    rng_values = [[100.0, 112.0, 89.0], [90.0, 101.0, 80.0], [80.0, 90.0, 71.0], [70.0, 78.0, 63.0]]
    lucky_once = [121.0]
    steady = [118.0, 131.0, 106.0, 121.0, 114.0]
    raw = [sum(v) / len(v) for v in (lucky_once, steady)]
    assert raw[0] > raw[1]
    est = shrunk_means([lucky_once, steady, *rng_values])
    assert est[1] > est[0]  # the steady one ranks first once each mean is weighed by its own noise
    assert 121.0 - est[0] > 2 * (raw[1] - est[1]) > 0  # one restart is moved much further than five
    baseline = _cfg(None, None)
    # The baseline's restarts inform the estimate too.
    evidence = [_ev(0, baseline, rng_values[0], mode="FULL"), _ev(1, _cfg("PIECEWISE"), lucky_once),
                _ev(2, _cfg("FULL_AND_PIECEWISE"), steady), _ev(3, _cfg("NONE"), rng_values[1]),
                _ev(4, _cfg("PIECEWISE", SPEC), rng_values[2]), _ev(5, _cfg("NONE", SPEC), rng_values[3])]
    assert select_candidates(evidence, baseline, top_k=1)[0].trial_number == 2


def test_shrinkage_needs_a_noise_estimate_and_three_groups():
    assert shrunk_means([[100.0], [120.0], [90.0]]) == pytest.approx([100.0, 120.0, 90.0])
    assert shrunk_means([[100.0, 102.0], [120.0]]) == pytest.approx([101.0, 120.0], rel=1e-3)


# -- where verification restarts go ---------------------------------------------------------------------


def _cands(*modes: str) -> list[Candidate]:
    out = [Candidate(CANDIDATE, _cfg(m)) for m in modes]
    return out + [Candidate(BASELINE, _cfg(None))]


def _engine(truth: dict[str | None, float], noise: float = 0.03) -> FakeEngine:
    return FakeEngine(lambda c: truth[c.cudagraph_mode], noise=noise)


def _seed(rnd: int) -> int:
    return 50_000 + rnd


def test_near_ties_with_the_leader_get_more_rounds_up_to_the_cap_with_the_baseline_alongside():
    truth = {"FULL": 120.0, "FULL_AND_PIECEWISE": 119.5, "NONE": 60.0, None: 100.0}
    engine = _engine(truth)
    cands = _cands("FULL", "FULL_AND_PIECEWISE", "NONE")
    v = run_verification(engine, WORKLOAD, cands, restarts=3, seed_for=_seed, max_restarts=6)
    n = {e.candidate.config.cudagraph_mode: e.summary.n for e in v.entries}
    assert n == {"FULL": 6, "FULL_AND_PIECEWISE": 6, "NONE": 3, None: 6}
    keys = {c.config.key(): c.config.cudagraph_mode for c in cands}
    extra = [(keys[k], s) for k, s in engine.calls[12:]]
    # Extra rounds interleave the tied pair with the baseline, one matched seed per round.
    assert extra == [(m, _seed(r)) for r in (3, 4, 5) for m in ("FULL", "FULL_AND_PIECEWISE", None)]
    assert v.max_restarts == 6 and v.restarts_per_config == 3
    assert v.restarts_used == 3 * 4 + 3 * 3


def test_a_settled_winner_gets_no_extra_rounds():
    engine = _engine({"FULL": 180.0, "FULL_AND_PIECEWISE": 120.0, "NONE": 60.0, None: 100.0})
    v = run_verification(engine, WORKLOAD, _cands("FULL", "FULL_AND_PIECEWISE", "NONE"), restarts=3, seed_for=_seed,
                         max_restarts=6)
    assert [e.summary.n for e in v.entries] == [3, 3, 3, 3] and v.restarts_used == 12


def test_a_tie_with_the_baseline_alone_gets_no_extra_rounds():
    # One challenger level with the baseline: more rounds would be optional stopping on the verdict itself.
    engine = _engine({"FULL": 100.0, None: 100.0})
    v = run_verification(engine, WORKLOAD, _cands("FULL"), restarts=3, seed_for=_seed, max_restarts=6)
    assert [e.summary.n for e in v.entries] == [3, 3]


def test_extra_rounds_stay_within_the_budget_and_run_whole_or_not_at_all():
    truth = {"FULL": 120.0, "FULL_AND_PIECEWISE": 119.5, "NONE": 60.0, None: 100.0}
    engine = _engine(truth)
    asked = []

    def may_start(n: int) -> bool:
        asked.append(n)
        return len(engine.calls) + n <= 17  # room for one extra round of 3, not two

    v = run_verification(engine, WORKLOAD, _cands("FULL", "FULL_AND_PIECEWISE", "NONE"), restarts=3, seed_for=_seed,
                         max_restarts=6, may_start=may_start)
    assert asked == [3, 3] and len(engine.calls) == 15 and v.restarts_used == 15
    assert [e.summary.n for e in v.entries] == [4, 4, 3, 4]


def test_without_a_cap_verification_is_the_common_rounds_only():
    engine = _engine({"FULL": 120.0, "FULL_AND_PIECEWISE": 119.5, None: 100.0})
    v = run_verification(engine, WORKLOAD, _cands("FULL", "FULL_AND_PIECEWISE"), restarts=3, seed_for=_seed)
    assert [e.summary.n for e in v.entries] == [3, 3, 3]


class _Stop(Exception):
    pass


class _StopsAfter(FakeEngine):
    def __init__(self, *args, after: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.after = after

    def run_restart(self, config, workload, *, restart, seed):
        if len(self.calls) == self.after:
            raise _Stop
        return super().run_restart(config, workload, restart=restart, seed=seed)


@pytest.mark.parametrize("after", [0, 5, 11, 12, 13, 14, 16, 19])
def test_an_interrupted_verification_resumes_without_repeating_a_restart(after):
    truth = {"FULL": 120.0, "FULL_AND_PIECEWISE": 119.5, "NONE": 60.0, None: 100.0}
    cands = _cands("FULL", "FULL_AND_PIECEWISE", "NONE")
    whole_engine = _engine(truth)
    whole = run_verification(whole_engine, WORKLOAD, cands, restarts=3, seed_for=_seed, max_restarts=6)

    saved: dict = {}
    first = _StopsAfter(lambda c: truth[c.cudagraph_mode], noise=0.03, after=after)
    with pytest.raises(_Stop):
        run_verification(first, WORKLOAD, cands, restarts=3, seed_for=_seed, max_restarts=6,
                         save_progress=lambda p: saved.update({k: list(v) for k, v in p.items()}))
    second = _engine(truth)
    resumed = run_verification(second, WORKLOAD, cands, restarts=3, seed_for=_seed, max_restarts=6, done=saved)
    ran = first.calls + second.calls
    assert len(ran) == len(set(ran)) == len(whole_engine.calls)  # nothing run twice, nothing missing
    assert sorted(ran) == sorted(whole_engine.calls)
    assert encode(resumed) == encode(whole)


def test_verification_is_deterministic_for_a_seed():
    truth = {"FULL": 120.0, "FULL_AND_PIECEWISE": 119.0, "NONE": 118.0, None: 100.0}
    runs = [encode(run_verification(_engine(truth, noise=0.08), WORKLOAD, _cands("FULL", "FULL_AND_PIECEWISE", "NONE"),
                                    restarts=3, seed_for=_seed, max_restarts=6)) for _ in range(2)]
    assert runs[0] == runs[1]


# -- in a study ----------------------------------------------------------------------------------------------


def test_a_study_verifies_one_configuration_per_engine_plan(tmp_path):
    # The engine runs FULL_AND_PIECEWISE whatever mode is asked for when speculating: every K > 0 configuration
    # with the same K is one plan, whatever its mode.
    def resolve(cfg):
        mode = "FULL_AND_PIECEWISE" if cfg.num_speculative_tokens else (cfg.cudagraph_mode or "PIECEWISE")
        return Resolved(cudagraph_mode=mode, cudagraph_capture_sizes=cfg.capture_sizes or (1, 2, 4, 8))

    truth = {("FULL_AND_PIECEWISE", 2): 300.0, ("PIECEWISE", 2): 300.0, ("NONE", 2): 300.0,
             ("default", 2): 300.0, ("default", 0): 100.0}
    options = StudyOptions(study_name="plans", storage=f"sqlite:///{tmp_path}/optuna.db",
                           workdir=str(tmp_path / "work"), trials=14, top_k=3, seed=3)
    ledger = run_study(parse_space(SMALL_SPACE), FakeEngine(by_params(truth), resolve=resolve), options)
    measured = ledger.measured_complete()
    searched = {ledger.config_key(t) for t in measured if t.params.get("num_speculative_tokens") == 2}
    assert len(searched) >= 2  # several configurations of that one plan were measured in the search
    chosen = ledger.verify_candidates()
    plans = [plan_key(c.config, resolve(c.config).cudagraph_mode, resolve(c.config).cudagraph_capture_sizes)
             for c in chosen if c.role == CANDIDATE]
    assert len(plans) == len(set(plans))
    spec2 = [c for c in chosen if c.config.num_speculative_tokens == 2]
    assert len(spec2) == 1  # the best plan by far, verified once for all its configurations
    # The report says which search trials the slot stood for.
    entries = build_report(ledger).verification.entries
    entry = next(e for e in entries if e.trial_number == spec2[0].trial_number)
    numbers = {t.number for t in measured if ledger.config_key(t) in searched}
    assert entry.shares_slot_with and set(entry.shares_slot_with) | {entry.trial_number} == numbers

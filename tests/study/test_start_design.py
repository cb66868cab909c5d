"""The search's start design: its first configurations spread over every dimension of the space."""

from __future__ import annotations

import itertools

from autotune.config.space import parse_space
from autotune.study._start_design import START_DESIGN_TRIALS, _param_distance
from autotune.study import StudyOptions, run_study
from tests.conftest import SMALL_SPACE, FakeEngine

#: Five capture modes, three size lists, K 0-4 and two drafts: ten random draws often leave a mode or a draft out.
SPACE = {**SMALL_SPACE, "search": {
    "cudagraph_mode": ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"],
    "capture_sizes": {"tiny": [1, 2, 4, 8], "wide": [1, 2, 4, 8, 16, 32], "step8": {"pattern": "step8", "max": 64}},
    "num_speculative_tokens": {"low": 0, "high": 4},
    "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4},
               "ngram-long": {"method": "ngram", "prompt_lookup_min": 3, "prompt_lookup_max": 6}},
}}


def test_parameter_distance_counts_each_differing_parameter_once():
    assert _param_distance({"mode": "NONE", "k": 2}, {"mode": "NONE", "k": 2}) == 0
    assert _param_distance({"mode": "NONE", "k": 2}, {"mode": "FULL", "k": 3}) == 2
    # A parameter only one side has (the draft of a configuration with speculation on) differs too.
    assert _param_distance({"k": 0}, {"k": 2, "draft": "ngram"}) == 2


def _first_trials(tmp_path, sampler: str, seed: int) -> list[dict]:
    options = StudyOptions(study_name=f"design-{sampler}-{seed}", storage=f"sqlite:///{tmp_path}/{sampler}{seed}.db",
                           workdir=str(tmp_path / f"{sampler}{seed}"), trials=START_DESIGN_TRIALS, verify=False,
                           seed=seed, sampler=sampler)
    ledger = run_study(parse_space(SPACE), FakeEngine(lambda config: 100.0), options)
    return [t.params for t in ledger.study.get_trials(deepcopy=False)][:START_DESIGN_TRIALS]


def test_the_start_design_spreads_its_configurations_over_every_dimension(tmp_path):
    for seed in range(4):
        params = _first_trials(tmp_path, "tpe", seed)
        assert len(params) == START_DESIGN_TRIALS
        design = params[2:]  # after the two baselines
        # Every pair of design points differs in at least two parameters: no near-duplicates, no repeats.
        assert min(_param_distance(a, b) for a, b in itertools.combinations(design, 2)) >= 2, seed
        assert {p["num_speculative_tokens"] for p in params} == {0, 1, 2, 3, 4}, seed
        assert len({p["cudagraph_mode"] for p in params}) >= 5, seed
        assert {p["draft"] for p in params if "draft" in p} == {"ngram", "ngram-long"}, seed


def test_the_random_control_keeps_its_independent_draws(tmp_path):
    # bench's "random" strategy is the study without a model: the design is not applied to it, and independent
    # draws do come close to each other (seed 0: two of its first ten differ in at most one parameter).
    params = _first_trials(tmp_path, "random", 0)[2:]
    assert min(_param_distance(a, b) for a, b in itertools.combinations(params, 2)) <= 1

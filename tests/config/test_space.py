"""Search-space loading: validation errors name the file, field and fix; the space is conditional."""

from __future__ import annotations

import copy
from pathlib import Path

import optuna
import pytest

from autotune.config.space import DEFAULT, Infeasible, SpaceError, load_space, parse_space
from tests.conftest import SMALL_SPACE


def _space(**changes):
    raw = copy.deepcopy(SMALL_SPACE)
    for dotted, value in changes.items():
        node = raw
        *path, last = dotted.split("__")
        for key in path:
            node = node[key]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return raw


@pytest.mark.parametrize(
    ("changes", "field", "fix_word"),
    [
        ({"colour": "blue"}, "colour", "use one of"),
        ({"search__cudagraph_mode": []}, "search.cudagraph_mode", "list some of"),
        ({"search__cudagraph_mode": ["FULLEST"]}, "search.cudagraph_mode[0]", "use one of"),
        ({"search__num_speculative_tokens": {"low": 0, "high": "six"}}, "search.num_speculative_tokens.high",
         "whole number"),
        ({"search__num_speculative_tokens": {"low": 3, "high": 1}}, "search.num_speculative_tokens.high",
         "high >= low"),
        ({"search__num_speculative_tokens": {"low": 0, "high": 40}}, "search.num_speculative_tokens.high",
         "at most"),
        ({"search__capture_sizes": {"empty": []}}, "search.capture_sizes.empty", "at least one"),
        ({"search__capture_sizes": {"gen": {"pattern": "fibonacci", "max": 8}}}, "search.capture_sizes.gen.pattern",
         "pow2"),
        ({"search__drafts": {"d": {"method": "telepathy"}}}, "search.drafts.d.method", "ngram"),
        ({"search__drafts": {"d": {"method": "draft_model"}}}, "search.drafts.d.model", "model:"),
        ({"search__drafts": {}}, "search.drafts", "declare at least one draft"),
        ({"workload__concurrency": 0}, "workload.concurrency", ">= 1"),
        ({"workload__prompts": 3}, "workload.prompts", "use one of"),
        ({"engine_args__compilation_config": {}}, "engine_args.compilation_config", "search:"),
        ({"search": None}, "search", "add a 'search:' section"),
    ],
)
def test_invalid_spaces_name_field_and_fix(changes, field, fix_word):
    with pytest.raises(SpaceError) as info:
        parse_space(_space(**changes), source="spaces/x.yaml")
    message = str(info.value)
    assert message.startswith(f"spaces/x.yaml: {field}:"), message
    assert "fix:" in message and fix_word in message
    assert "\n" not in message


def test_bad_yaml_syntax_reports_line(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nsearch:\n  cudagraph_mode: [NONE\n  other: 1\n")
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert str(path) in str(info.value) and "line" in str(info.value) and "YAML" in str(info.value)


def test_missing_file_is_a_space_error(tmp_path: Path):
    with pytest.raises(SpaceError, match="does not exist"):
        load_space(tmp_path / "nope.yaml")


def test_real_engine_model_paths_must_exist(tmp_path: Path):
    space = parse_space(_space(engine_args__model="./no/such/model"), source="s.yaml", base_dir=tmp_path)
    with pytest.raises(SpaceError, match="engine_args.model: model path './no/such/model' does not exist"):
        space.check_model_paths()
    draft = {"d": {"method": "draft_model", "model": "./missing-draft"}}
    space = parse_space(_space(search__drafts=draft), source="s.yaml", base_dir=tmp_path)
    with pytest.raises(SpaceError, match="search.drafts.d.model"):
        space.check_model_paths()
    (tmp_path / "draft").mkdir()
    ok = parse_space(_space(search__drafts={"d": {"method": "draft_model", "model": "./draft"}}),
                     source="s.yaml", base_dir=tmp_path)
    ok.check_model_paths()  # a hub id for the target and an existing local draft pass
    assert ok.drafts[0].fragment["model"] == str((tmp_path / "draft").resolve())


def _suggest_all(space, n=60):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append((trial, space.suggest(trial)))
        study.tell(trial, 1.0)
    return out


def test_conditional_space_draws_draft_only_when_speculating():
    space = parse_space(_space())
    seen_k = set()
    for trial, config in _suggest_all(space):
        k = trial.params["num_speculative_tokens"]
        seen_k.add(k)
        assert ("draft" in trial.params) == (k > 0)
        assert ("capture_sizes" in trial.params) == (trial.params["cudagraph_mode"] != "NONE")
        assert config.num_speculative_tokens == k
        if k:
            assert config.speculative_config == {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4,
                                                 "num_speculative_tokens": k}
        else:
            assert config.speculative_config is None
    assert seen_k == {0, 1, 2}


def test_configs_use_vllm_names_and_default_means_unset():
    space = parse_space(_space())
    base = space.baseline()
    assert base.compilation_config == {} and base.speculative_config is None
    cfg = space.config_from_params({"cudagraph_mode": "PIECEWISE", "capture_sizes": "tiny",
                                    "num_speculative_tokens": 2, "draft": "ngram"})
    kwargs = cfg.llm_kwargs()
    assert kwargs["compilation_config"] == {"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8]}
    assert kwargs["speculative_config"]["num_speculative_tokens"] == 2
    assert kwargs["model"] == "org/model" and kwargs["max_num_seqs"] == 4
    none = space.config_from_params({"cudagraph_mode": "NONE", "capture_sizes": "tiny", "num_speculative_tokens": 0})
    assert none.compilation_config == {"cudagraph_mode": "NONE"}  # sizes mean nothing without graphs


def test_generated_sizes_align_to_one_plus_k():
    raw = _space(search__capture_sizes={"al": {"pattern": "aligned", "max": 32}, "p2": {"pattern": "pow2", "max": 16},
                                        "s8": {"pattern": "step8", "max": 32}})
    space = parse_space(raw)
    sizes = {k: space.config_from_params({"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": "al",
                                          "num_speculative_tokens": k, "draft": "ngram"}).capture_sizes
             for k in (0, 1, 2)}
    assert sizes == {0: (1, 2, 4, 8, 16, 32), 1: (2, 4, 8, 16, 32), 2: (3, 6, 12, 24)}
    p2 = space.config_from_params({"cudagraph_mode": "PIECEWISE", "capture_sizes": "p2", "num_speculative_tokens": 0})
    assert p2.capture_sizes == (1, 2, 4, 8, 16)
    s8 = space.config_from_params({"cudagraph_mode": "PIECEWISE", "capture_sizes": "s8", "num_speculative_tokens": 0})
    assert s8.capture_sizes == (1, 2, 4, 8, 16, 24, 32)


def test_a_parameter_of_the_wrong_type_is_named_not_handed_on():
    # Trial parameters are typed values (autotune.core.params): a mode that is no choice's name is the KeyError of a
    # choice the space lacks, and a K that is no number says which parameter, rather than int()'s own message.
    space = parse_space(_space())
    with pytest.raises(KeyError, match="cudagraph_mode has no choice 3"):
        space.config_from_params({"cudagraph_mode": 3, "num_speculative_tokens": 0})
    with pytest.raises(TypeError, match=r"num_speculative_tokens must be a whole number, got \[2\]"):
        space.config_from_params({"cudagraph_mode": "PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": [2]})


def test_draft_max_k_makes_combinations_infeasible():
    space = parse_space(_space(search__drafts={"mtp": {"method": "mtp", "max_k": 1}}))
    with pytest.raises(Infeasible, match="at most 1"):
        space.config_from_params({"cudagraph_mode": "FULL", "num_speculative_tokens": 2, "draft": "mtp"})
    assert all(p.get("num_speculative_tokens", 0) <= 1 for p in space.all_params())


def test_baselines_are_spec_off_defaults_then_first_draft():
    space = parse_space(_space())
    first, second = space.baseline_params()
    assert first == {"cudagraph_mode": DEFAULT, "capture_sizes": DEFAULT, "num_speculative_tokens": 0}
    assert second["draft"] == "ngram" and second["num_speculative_tokens"] == 2  # min(3, high)


def test_shipped_spaces_load():
    for path in sorted(Path("search_spaces").glob("*.yaml")):
        space = load_space(path)
        assert space.all_params(), path
        assert space.baseline().speculative_config is None


def test_synthetic_acceptance_rates_are_cut_to_k():
    draft = {"d": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4,
                   "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.6, 0.5, 0.4]}}
    space = parse_space(_space(search__drafts=draft))
    cfg = space.config_from_params({"cudagraph_mode": "FULL", "capture_sizes": "default",
                                    "num_speculative_tokens": 2, "draft": "d"})
    assert cfg.speculative_config["synthetic_acceptance_rates"] == [0.8, 0.6]

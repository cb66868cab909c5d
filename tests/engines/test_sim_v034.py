"""The simulator's vLLM 0.34 profile, held to vLLM 0.34.0's own capture-size code (copied into
``tests/data/vllm034/capture_sizes.py``, file and lines named there), and the seed's trap in its 0.34 form."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from pathlib import Path

import pytest

from autotune.core.records import EngineConfig, Resolved, config_differences
from autotune.engines._sim_v034 import Rejected034, capture_v034
from autotune.engines.sim import SimEngine
from autotune.core.records import Workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from vllm034.capture_sizes import resolve as vllm_resolve  # noqa: E402  (vLLM 0.34.0's own code)

COMPILATIONS = [
    {}, {"cudagraph_capture_sizes": [1, 2, 4, 8]}, {"cudagraph_capture_sizes": [1, 2, 3]},
    {"cudagraph_capture_sizes": [1, 2, 4, 6, 16, 64]}, {"max_cudagraph_capture_size": 2},
    {"max_cudagraph_capture_size": 10}, {"decode_cudagraph_capture_request_sizes": [1, 2, 4, 300]},
    {"max_decode_cudagraph_capture_requests": 8}, {"max_prefill_cudagraph_capture_tokens": 64},
    {"prefill_cudagraph_capture_token_sizes": [1, 2, 4, 8], "decode_cudagraph_capture_request_sizes": [1, 2]},
    {"decode_cudagraph_capture_request_sizes": [1, 2, 4], "max_decode_cudagraph_capture_requests": 2},
    {"cudagraph_capture_sizes": [4], "decode_cudagraph_capture_request_sizes": [1]},
    {"max_decode_cudagraph_capture_tokens": 16}, {"cudagraph_capture_sizes": [1, 2, 4, 8],
                                                  "max_cudagraph_capture_size": 4},
    # decode token budgets that drop listed decode graphs (the record keeps them; the runner does not capture them)
    {"max_decode_cudagraph_capture_tokens": 2}, {"max_decode_cudagraph_capture_tokens": 12,
                                                 "max_prefill_cudagraph_capture_tokens": 12},
    {"decode_cudagraph_capture_request_sizes": [1, 2, 4, 8], "max_decode_cudagraph_capture_tokens": 8},
    {"max_decode_cudagraph_capture_requests": 16, "max_decode_cudagraph_capture_tokens": 24},
]


def _vllm(mode: str, k: int, seqs: int, tokens: int, comp: dict, method: str) -> tuple:
    try:
        got = vllm_resolve(mode=mode, k=k, method=method, max_num_seqs=seqs, max_num_batched_tokens=tokens,
                           compilation=comp)
    except (ValueError, AssertionError):
        return ("refused",)
    none = got["mode"] == "NONE"
    return (got["mode"], got["sizes"], [] if none else got["prefill"], [] if none else got["decode"],
            [list(g) for g in got["graphs"]])


def _sim(mode: str, k: int, seqs: int, tokens: int, comp: dict, method: str) -> tuple:
    try:
        got = capture_v034(mode, k, comp, max_num_seqs=seqs, max_num_batched_tokens=tokens, method=method)
    except Rejected034:
        return ("refused",)
    return got.mode, list(got.sizes), list(got.prefill), list(got.decode), [list(g) for g in got.graphs]


@pytest.mark.parametrize("mode", ["FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "PIECEWISE", "FULL"])
def test_the_ported_capture_sizes_are_vllm_034s_own(mode: str) -> None:
    cases = list(itertools.product([0, 1, 3, 7], [1, 4, 64, 512], [256, 8192], COMPILATIONS, ["ngram", "eagle3"]))
    wrong = [(case, _vllm(mode, *case), _sim(mode, *case)) for case in cases if _vllm(mode, *case) != _sim(mode, *case)]
    assert not wrong, wrong[:3]


def _config(comp: dict, k: int = 3, method: str = "ngram", **args) -> EngineConfig:
    spec = None if not k else {"method": method, "num_speculative_tokens": k,
                               **({"model": "draft"} if method != "ngram" else {})}
    return EngineConfig(engine_args={"model": "m", "max_num_seqs": 4, **args},
                        compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE", **comp}, speculative_config=spec)


WORK = Workload(num_prompts=16, input_len=256, output_len=256, concurrency=4, repetitive_prompts=True)


def test_token_sizes_rounded_to_whole_requests_are_flagged_where_the_recorded_sizes_look_unchanged() -> None:
    trap = _config({"cudagraph_capture_sizes": [1, 2, 4, 8]})
    resolved = SimEngine(engine_version="0.34.0").resolve(trap)
    # 0.34 records prefill and decode graphs together: [1, 2, 4, 8] again, so the old comparison saw nothing.
    assert list(resolved.cudagraph_capture_sizes) == [1, 2, 4, 8]
    assert resolved.details["decode_cudagraph_capture_request_sizes"] == [1, 2]
    diffs = {d.field: d for d in config_differences(trap, resolved)}
    assert "decode_graphs" in diffs and "4, 8 tokens" in str(diffs["decode_graphs"].resolved)
    assert "cudagraph_capture_sizes" not in diffs  # the prefill graphs are what was asked
    # and it costs: four requests of 4 tokens fit no graph, so decode runs eagerly
    sim = SimEngine(engine_version="0.34.0")
    assert sim.true_throughput(trap, WORK) < 0.8 * sim.true_throughput(_config({}), WORK)


def test_an_explicit_maximum_below_one_request_drops_every_decode_graph_and_is_flagged() -> None:
    trap = _config({"max_cudagraph_capture_size": 2})
    resolved = SimEngine(engine_version="0.34.0").resolve(trap)
    assert resolved.cudagraph_mode == "FULL_AND_PIECEWISE" and resolved.details[
        "decode_cudagraph_capture_request_sizes"] == []
    diffs = {d.field: d for d in config_differences(trap, resolved)}
    assert "no decode graph" in str(diffs["decode_graphs"].resolved)
    # The same maximum on 0.26 (token sizes rounded up to 4) still captured a graph: the trap is 0.34's form.
    old = SimEngine(engine_version="0.26.0").resolve(_config({"cudagraph_capture_sizes": [1, 2]}))
    assert old.cudagraph_capture_sizes == (4,)


def test_request_sizes_in_0_34s_own_field_that_it_keeps_are_not_flagged() -> None:
    config = _config({"decode_cudagraph_capture_request_sizes": [1, 2, 4, 8]})  # 8 > max_num_seqs: unreachable
    resolved = SimEngine(engine_version="0.34.0").resolve(config)
    assert resolved.details["decode_cudagraph_capture_request_sizes"] == [1, 2, 4]
    assert config_differences(config, resolved) == []
    above = _config({"decode_cudagraph_capture_request_sizes": [1, 2, 4]}, max_num_seqs=2)
    assert "decode_graphs" not in {d.field for d in config_differences(above, SimEngine(
        engine_version="0.34.0").resolve(above))}  # 4 requests never run with max_num_seqs 2


def test_0_34_removed_v1_and_medusa_and_refuses_mixed_fields_and_new_fields_before_it() -> None:
    old, new = SimEngine(engine_version="0.26.0"), SimEngine(engine_version="0.34.0")
    draft = _config({}, method="draft_model")
    assert old.resolve(draft).details["model_runner"] == "v1"
    assert new.resolve(draft).details["model_runner"] == "v2"  # no fallback left
    medusa = _config({}, method="medusa")
    assert old.resolve(medusa).details["speculative_method"] == "medusa"
    for engine, config, why in ((new, medusa, "medusa"),
                                # (a mix that re-states what the token sizes resolve to is accepted, as in vLLM)
                                (new, _config({"cudagraph_capture_sizes": [1, 2, 4, 8],
                                               "decode_cudagraph_capture_request_sizes": [3]}), "cannot be combined"),
                                (old, _config({"decode_cudagraph_capture_request_sizes": [1]}), "came in 0.34")):
        result = engine.run_restart(config, WORK, restart=0, seed=0)
        assert not result.ok and why in (result.error or "")


def test_a_k_schedule_switched_off_by_data_parallelism_is_flagged() -> None:
    config = EngineConfig(
        engine_args={"model": "m", "max_num_seqs": 8, "data_parallel_size": 2},
        compilation_config={"cudagraph_mode": "PIECEWISE"},
        speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                            "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 8, 1]]})
    resolved = SimEngine(engine_version="0.34.0").resolve(config)
    assert resolved.details.get("num_speculative_tokens_per_batch_size") is None
    assert any("data parallelism" in note for note in resolved.notes)
    assert "num_speculative_tokens_per_batch_size" in {d.field for d in config_differences(config, resolved)}
    single = dict(config.engine_args, data_parallel_size=1)
    kept = SimEngine(engine_version="0.34.0").resolve(EngineConfig(single, config.compilation_config,
                                                                   config.speculative_config))
    assert kept.details["num_speculative_tokens_per_batch_size"] == [[1, 4, 3], [5, 8, 1]]


def test_an_older_engine_reports_no_decode_requests_and_nothing_new_is_flagged() -> None:
    config = _config({"cudagraph_capture_sizes": [4, 8]})
    resolved = Resolved(cudagraph_mode="FULL_AND_PIECEWISE", cudagraph_capture_sizes=(4, 8),
                        details={"num_speculative_tokens": 3})
    assert config_differences(config, resolved) == []


# -- an explicit maximum that drops decode graphs (vLLM #54933 and 0.34's decode token budget) -----------------


def test_the_audits_captured_decode_graphs_are_those_vllm_034s_runner_captures() -> None:
    """core.capture.captured_decode_requests, read from what vLLM resolved, against the graphs its runner builds."""
    from autotune.core.capture import captured_decode_requests

    checked = 0
    for mode, k, seqs, comp in itertools.product(["FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"], [0, 1, 3, 7],
                                                 [1, 4, 64], COMPILATIONS):
        try:
            got = vllm_resolve(mode=mode, k=k, max_num_seqs=seqs, compilation=comp)
        except (ValueError, AssertionError):
            continue
        if got["mode"] == "NONE":
            continue
        budget = comp.get("max_decode_cudagraph_capture_tokens")
        cap = min(v for v in (max(got["sizes"]), budget) if v)
        assert captured_decode_requests(got["decode"], 1 + k, seqs, cap) == [n for n, _ in got["graphs"]], (
            mode, k, seqs, comp)
        checked += 1
    assert checked > 300


def test_a_decode_token_budget_that_drops_listed_graphs_is_flagged_while_the_record_looks_whole() -> None:
    listed = _config({"decode_cudagraph_capture_request_sizes": [1, 2, 4, 8],
                      "max_decode_cudagraph_capture_tokens": 8}, max_num_seqs=8)
    resolved = SimEngine(engine_version="0.34.0").resolve(listed)
    assert resolved.details["decode_cudagraph_capture_request_sizes"] == [1, 2, 4, 8]  # vLLM records them all
    assert resolved.details["max_decode_cudagraph_capture_tokens"] == 8
    diffs = {d.field: d for d in config_differences(listed, resolved)}
    assert str(diffs["decode_graphs"].resolved).startswith("1, 2 requests = 4, 8 tokens")
    assert "max_decode_cudagraph_capture_tokens=8" in str(diffs["decode_graphs"].resolved)
    # and it costs: eight requests of 4 tokens find no full graph
    sim, work = SimEngine(engine_version="0.34.0"), dataclasses.replace(WORK, concurrency=8)
    whole = _config({"decode_cudagraph_capture_request_sizes": [1, 2, 4, 8]}, max_num_seqs=8)
    assert config_differences(whole, sim.resolve(whole)) == []
    assert sim.true_throughput(listed, work) < 0.9 * sim.true_throughput(whole, work)


@pytest.mark.parametrize("comp, seqs, configured, resolved", [
    # below one request of 1+K tokens: no decode graph, in 0.34's own budget and in the deprecated maximum
    ({"max_decode_cudagraph_capture_tokens": 2, "max_prefill_cudagraph_capture_tokens": 2}, 4,
     "up to 2 tokens (max_decode_cudagraph_capture_tokens)", "no decode graph"),
    ({"max_decode_cudagraph_capture_tokens": 3}, 4, "up to 3 tokens", "no decode graph"),
    ({"max_cudagraph_capture_size": 3}, 4, "up to 3 tokens (max_cudagraph_capture_size)", "no decode graph"),
    # a request maximum the budget cuts: the engine's grid up to 8 requests, captured up to 4
    ({"max_decode_cudagraph_capture_requests": 8, "max_decode_cudagraph_capture_tokens": 16}, 8,
     "1, 2, 3, 4, 5, 6, 8 requests", "1, 2, 3, 4 requests"),
])
def test_an_explicit_maximum_that_drops_decode_graphs_is_flagged_in_every_field(
        comp: dict, seqs: int, configured: str, resolved: str) -> None:
    config = _config(comp, max_num_seqs=seqs)
    diffs = {d.field: d for d in config_differences(config, SimEngine(engine_version="0.34.0").resolve(config))}
    assert configured in str(diffs["decode_graphs"].configured) and resolved in str(diffs["decode_graphs"].resolved)


def test_a_token_maximum_that_keeps_decode_graphs_up_to_it_is_what_it_asks_for() -> None:
    for comp in ({"max_decode_cudagraph_capture_tokens": 12, "max_prefill_cudagraph_capture_tokens": 12},
                 {"max_cudagraph_capture_size": 16}):
        config = _config(comp, max_num_seqs=8)
        resolved = SimEngine(engine_version="0.34.0").resolve(config)
        assert "decode_graphs" not in {d.field for d in config_differences(config, resolved)}

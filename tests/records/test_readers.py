"""The readers each record type registers for shapes older autotune stored (the fixtures hold few of these)."""

from __future__ import annotations

import math

from autotune.core.failure import FailureKind
from autotune.core.records import EngineFacts, RestartResult, Workload
from autotune.core.resolved import Detail, Resolved
from autotune.decisions.planning import RestartPlan
from autotune.records import decode, encode


def test_engine_facts_stored_under_older_names_read_under_the_fields_and_the_rest_are_extras() -> None:
    facts = decode(EngineFacts, {"engine": "vllm", "vllm": "0.26.0", "gpu_name": "H200", "driver_version": 570,
                                 "cuda": "", "simulated": 1, "mode": "offline"})
    assert facts == EngineFacts(name="vllm", version="0.26.0", gpu="H200", driver="570", simulated=True,
                                extra={"mode": "offline"})
    assert encode(facts) == {"engine": "vllm", "engine_version": "0.26.0", "gpu": "H200", "driver": "570",
                             "simulated": True, "mode": "offline"}


def test_a_resolved_record_reads_legacy_detail_names_and_a_numeric_compile_level() -> None:
    resolved = decode(Resolved, {"details": {"spec_method": "ngram"}, "compile_mode": 3, "notes": None})
    assert resolved.details == {Detail.SPEC_METHOD: "ngram"} and resolved.compile_mode == "3" and resolved.notes == ()


def test_a_restart_drops_unmeasured_latency_and_reads_an_unknown_failure_kind_as_none() -> None:
    restart = decode(RestartResult, {"status": "failed", "error": "memory guard: below the floor",
                                     "latency": {"ttft_p99_ms": None, "tpot_p99_ms": 4.0},
                                     "failure_kind": "from-a-newer-autotune", "facts": ["not", "a", "mapping"]})
    assert restart.latency == {"tpot_p99_ms": 4.0} and restart.failure_kind is None and restart.facts == {}
    tripped = RestartResult.failure("failed", "memory guard", failure_kind=FailureKind.GUARD)
    guard = decode(RestartResult, encode(tripped))
    assert guard.failure_kind is FailureKind.GUARD


def test_a_workload_keeps_its_single_level_shape_and_reads_its_json_back() -> None:
    assert set(encode(Workload())) == {"num_prompts", "input_len", "output_len", "concurrency", "seed",
                                       "warmup_passes", "max_warmup_passes", "timed_passes", "repetitive_prompts",
                                       "dataset", "temperature", "top_p", "slo"}
    levels = Workload(concurrency=(1, 8), aggregate="mean", weights=(1.0, 2.0), slo=(("tpot_p99_ms", 50.0),))
    assert encode(levels)["slo"] == {"tpot_p99_ms": 50.0} and encode(levels)["concurrency"] == [1, 8]
    assert decode(Workload, encode(levels)) == levels


def test_a_plan_that_resolves_no_effect_stores_null_and_reads_back_infinite() -> None:
    plan = RestartPlan(3, 3, 1, 0.05, 0.05, 1.1, 1.05, 0.8, 0.05, math.inf, "min_effect")
    stored = encode(plan)
    assert stored["resolvable"] is None
    assert decode(RestartPlan, stored) == plan

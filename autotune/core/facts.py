"""Names of the per-restart facts (:attr:`autotune.core.records.RestartResult.facts`): one owner for each key.

A restart's facts are what it measured besides throughput: memory (the settle wait, the guard's floor and lowest
MemAvailable, Cached, the page-cache policy), the engine's KV capacity, the machine's state (clocks, throttling),
where its time went (phases), and the output check. They are flat (``str -> number | str | bool``) so that the
trial's record, MLflow (numbers become metrics) and ``report --json`` carry them unchanged. Producers (engines,
:mod:`autotune.machine`) and readers (audit, report, observers) name keys through these constants, never by literal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["KV_CACHE_GIB", "KV_CACHE_TOKENS", "PAGE_CACHE_ADDED_GIB", "FactValue", "clean_facts", "numeric_facts"]

FactValue = float | int | str | bool

# -- KV capacity and page cache (the vllm engine's log parser, the simulator's unified memory) -------------
#: Memory given to the KV cache, GiB.
KV_CACHE_GIB = "kv_cache_gib"
#: KV cache size in tokens.
KV_CACHE_TOKENS = "kv_cache_tokens"
#: Page cache the start's weight loading added (GiB): a cold start from disk adds the weights, a warm one little.
PAGE_CACHE_ADDED_GIB = "page_cache_added_gib"


def clean_facts(facts: Mapping[str, Any] | None) -> dict[str, FactValue]:
    """The facts with ``None`` values and non-scalar values left out, and non-finite floats refused as ``None``.

    The record's boundary: whatever an engine (or an old record) says, a fact is a finite number, a string or a bool.
    """
    out: dict[str, FactValue] = {}
    for key, value in dict(facts or {}).items():
        if value is None:
            continue
        if isinstance(value, bool | str):
            out[str(key)] = value
        elif isinstance(value, int | float):
            number = float(value)
            if number != number or number in (float("inf"), float("-inf")):
                continue
            out[str(key)] = value
    return out


def numeric_facts(facts: Mapping[str, FactValue]) -> dict[str, float]:
    """The facts that are numbers (bools are not), as floats: what MLflow logs as metrics."""
    return {k: float(v) for k, v in facts.items() if isinstance(v, int | float) and not isinstance(v, bool)}

"""Memory and capacity facts from a vLLM start-up log, and the audits that say when throughput is not comparable.

vLLM says at start-up how much memory went where, in lines like these (0.26.0 on an H200)::

    INFO 11-30 08:09:38 [gpu_model_runner.py:5347] Model loading took 1.65 GiB memory and 0.584778 seconds
    INFO 11-30 08:09:53 [monitor.py:53] torch.compile took 14.88 s in total
    INFO 11-30 08:09:57 [gpu_model_runner.py:6737] Estimated CUDA graph memory: 0.04 GiB total
    INFO 11-30 08:09:58 [gpu_worker.py:560] Available KV cache memory: 60.72 GiB
    INFO 11-30 08:09:58 [kv_cache_utils.py:2177] GPU KV cache size: 994,800 tokens
    INFO 11-30 08:09:58 [kv_cache_utils.py:2178] Maximum concurrency for 1,024 tokens per request: 971.48x
    INFO 11-30 08:10:00 [gpu_model_runner.py:6844] Graph capturing finished in 1 secs, took 0.06 GiB

and, on the CPU worker, ``Explicitly set (1.0/15.51) GiB for KV cache on node 0.`` with the two KV lines merged
into one (``GPU KV cache size: 29,056 tokens, Maximum concurrency for 2,048 tokens per request: 14.19x``).
:func:`parse_kv_facts` reads them into :class:`KvFacts`; a line vLLM did not print leaves its field ``None``.

The audits (:func:`kv_audit`) flag the three ways a KV budget makes throughput incomparable: KV capacity moving
by more than 5% across restarts of one configuration (page cache or profiling drift: NVIDIA/xr-ai #462, vllm
#50780), KV capacity below what the workload needs at once (the run measures the cache, not graphs or
speculation), and a negative graph-memory estimate (vllm #44740, which then ran out of memory).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core import facts
from autotune.records import encode, record

__all__ = ["KV_DRIFT_TOLERANCE", "KvFacts", "graph_memory_problem", "kv_audit", "kv_bound", "kv_drift",
           "log_facts", "parse_kv_facts"]

#: KV capacity may differ by this fraction across restarts of one configuration before the audit flags it. Cold
#: and warm starts of one H200 configuration differed by 0.1% (docs/measurements/h200-vllm026); page-cache drift on
#: unified memory is reported as tens of percent. Empirical.
KV_DRIFT_TOLERANCE = 0.05

_NUM = r"(-?[\d,]*\.?\d+)"
_WEIGHTS = re.compile(rf"Model loading took {_NUM} GiB(?: memory)?(?: and {_NUM} seconds)?")
_LOAD_S = re.compile(rf"Loading weights took {_NUM} seconds")
_COMPILE_S = re.compile(rf"torch\.compile took {_NUM} s in total")
_GRAPH_EST = re.compile(rf"Estimated CUDA graph memory: {_NUM} GiB")
_GRAPH_POOL = re.compile(rf"CUDA graph pool memory: {_NUM} GiB \(actual\)")
_CAPTURE = re.compile(rf"Graph capturing finished in {_NUM} secs?(?:, took {_NUM} GiB)?")
_KV_GIB = re.compile(rf"Available KV cache memory: {_NUM} GiB")
_KV_GIB_CPU = re.compile(rf"Explicitly set \({_NUM}/{_NUM}\) GiB for KV cache")
_KV_TOKENS = re.compile(rf"KV cache size: {_NUM} tokens")
_CONCURRENCY = re.compile(rf"Maximum concurrency for {_NUM} tokens per request: {_NUM}x")
_INIT = re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} s")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


#: A fact the log did not give is left out of the record.
@record(omit_at_default=("weights_gib", "load_s", "compile_s", "capture_s", "graph_memory_gib", "graph_pool_gib",
                         "kv_gib", "kv_tokens", "max_concurrency", "max_model_len", "init_s"))
@dataclasses.dataclass(frozen=True)
class KvFacts:
    """Memory and capacity facts of one start (GiB, seconds, tokens); ``None``: the log did not say.

    Attributes:
        weights_gib: Memory the model's weights took (target plus drafts: every ``Model loading`` line).
        load_s: Seconds loading weights.
        compile_s: Seconds in torch.compile (every compiled model: the target and a draft).
        capture_s: Seconds capturing CUDA graphs.
        graph_memory_gib: vLLM's CUDA-graph memory estimate (negative: vLLM #44740's trap).
        graph_pool_gib: The graph pool's actual size.
        kv_gib: Memory given to the KV cache.
        kv_tokens: KV cache size in tokens.
        max_concurrency: Requests of ``max_model_len`` tokens that fit in the KV cache at once.
        max_model_len: The length that concurrency is for.
        init_s: vLLM's "init engine (profile, create kv cache, warmup model)" seconds.
    """

    weights_gib: float | None = None
    load_s: float | None = None
    compile_s: float | None = None
    capture_s: float | None = None
    graph_memory_gib: float | None = None
    graph_pool_gib: float | None = None
    kv_gib: float | None = None
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    max_model_len: int | None = None
    init_s: float | None = None

    def to_facts(self) -> dict[str, Any]:
        """The facts a restart's record keeps (:mod:`autotune.core.facts` names)."""
        return {_FACT_NAMES[k]: v for k, v in encode(self).items()}

    @classmethod
    def from_facts(cls, restart_facts: Mapping[str, Any]) -> KvFacts:
        """Read back from a restart's stored facts (what the audit runs on); absent keys stay ``None``."""
        found: dict[str, Any] = {}
        for field, key in _FACT_NAMES.items():
            value = restart_facts.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                found[field] = int(value) if field in ("kv_tokens", "max_model_len") else float(value)
        return cls(**found)


#: Each :class:`KvFacts` field's name in a restart's facts.
_FACT_NAMES = {
    "weights_gib": facts.WEIGHTS_GIB, "load_s": facts.VLLM_LOAD_S, "compile_s": facts.VLLM_COMPILE_S,
    "capture_s": facts.VLLM_CAPTURE_S, "graph_memory_gib": facts.GRAPH_MEMORY_GIB,
    "graph_pool_gib": facts.GRAPH_POOL_GIB, "kv_gib": facts.KV_GIB, "kv_tokens": facts.KV_TOKENS,
    "max_concurrency": facts.MAX_CONCURRENCY, "max_model_len": facts.MAX_MODEL_LEN, "init_s": facts.VLLM_INIT_S,
}


def log_facts(log_path: str | None) -> dict[str, Any]:
    """The restart facts in a restart's vLLM log file (none when there is no log)."""
    if not log_path:
        return {}
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return {}
    return parse_kv_facts(text).to_facts()


def parse_kv_facts(log_text: str) -> KvFacts:
    """The facts in a vLLM start-up log (the first KV lines: a restart prints them once per engine)."""
    found: dict[str, Any] = {}
    weights = [m for m in _WEIGHTS.finditer(log_text)]
    if weights:
        found["weights_gib"] = sum(_f(m.group(1)) for m in weights)
        seconds = [_f(m.group(2)) for m in weights if m.group(2)]
        if seconds:
            found["load_s"] = sum(seconds)
    loads = [_f(m.group(1)) for m in _LOAD_S.finditer(log_text)]
    if loads and "load_s" not in found:
        found["load_s"] = sum(loads)
    compiles = [_f(m.group(1)) for m in _COMPILE_S.finditer(log_text)]
    if compiles:
        found["compile_s"] = sum(compiles)
    if m := _CAPTURE.search(log_text):
        found["capture_s"] = _f(m.group(1))
    if m := _GRAPH_EST.search(log_text):
        found["graph_memory_gib"] = _f(m.group(1))
    if m := _GRAPH_POOL.search(log_text):
        found["graph_pool_gib"] = _f(m.group(1))
    if m := _KV_GIB.search(log_text):
        found["kv_gib"] = _f(m.group(1))
    elif m := _KV_GIB_CPU.search(log_text):
        found["kv_gib"] = _f(m.group(1))
    if m := _KV_TOKENS.search(log_text):
        found["kv_tokens"] = int(_f(m.group(1)))
    if m := _CONCURRENCY.search(log_text):
        found["max_model_len"] = int(_f(m.group(1)))
        found["max_concurrency"] = _f(m.group(2))
    if m := _INIT.search(log_text):
        found["init_s"] = _f(m.group(1))
    return KvFacts(**found)


# -- audits ----------------------------------------------------------------------------------------------


def kv_drift(kv_tokens: Sequence[int | None], tolerance: float = KV_DRIFT_TOLERANCE) -> str | None:
    """Why the KV capacity of one configuration's restarts is not one budget, or ``None``."""
    known = [t for t in kv_tokens if t is not None]
    if len(known) < 2 or max(known) <= 0:
        return None
    spread = (max(known) - min(known)) / max(known)
    if spread <= tolerance:
        return None
    return (f"KV capacity moved {spread:.0%} across restarts of this configuration ({min(known):,} to "
            f"{max(known):,} tokens): page-cache or profiling drift; its restarts ran under different KV budgets")


def kv_bound(kv_tokens: int | None, max_num_seqs: int, input_len: int, output_len: int) -> str | None:
    """Why the KV cache cannot hold the workload's concurrent sequences, or ``None``."""
    need = max_num_seqs * (input_len + output_len)
    if kv_tokens is None or kv_tokens >= need:
        return None
    return (f"KV capacity {kv_tokens:,} tokens is below max_num_seqs x (input + output) = {max_num_seqs} x "
            f"({input_len} + {output_len}) = {need:,}: this configuration's throughput measures the KV cache, not "
            "graphs or speculation")


def graph_memory_problem(graph_memory_gib: float | None) -> str | None:
    """Why a CUDA-graph memory estimate cannot be trusted (a negative one), or ``None``."""
    if graph_memory_gib is None or graph_memory_gib >= 0:
        return None
    return (f"vLLM estimated the CUDA-graph memory at {graph_memory_gib:g} GiB: a negative estimate inflates the "
            "KV cache and has ended in out-of-memory (vllm #44740)")


def kv_audit(restarts: Sequence[KvFacts], max_num_seqs: int, input_len: int, output_len: int) -> list[str]:
    """Every audit finding for one configuration's restarts, each once."""
    found = [kv_drift([r.kv_tokens for r in restarts])]
    found += [kv_bound(r.kv_tokens, max_num_seqs, input_len, output_len) for r in restarts]
    found += [graph_memory_problem(r.graph_memory_gib) for r in restarts]
    out: list[str] = []
    for item in found:
        if item is not None and item not in out:
            out.append(item)
    return out

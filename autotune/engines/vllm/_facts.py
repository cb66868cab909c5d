"""What a restart's engine reports about itself: the configuration it resolved, the device, spec-decode counters,
peak memory and one offline request's timings.

Imported by :mod:`._runner` from its own directory (the runner runs by path in vLLM's interpreter), so like the
runner it imports nothing but the standard library at module level; vLLM and torch are imported by the functions
that need them, after the runner has read its request.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the type checker reads the sibling under the package it sits in
    from autotune.engines.vllm import _dataset
else:
    import _dataset

#: Counters whose deltas give the mean acceptance length (1 + accepted drafts per verification step).
_DRAFTS = "vllm:spec_decode_num_drafts"
_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"


def spec_counters(llm: Any) -> dict[str, float]:
    """Current speculative-decoding counters (summed over label sets); empty when stats are off."""
    out: dict[str, float] = {}
    for metric in llm.get_metrics():
        if metric.name in (_DRAFTS, _ACCEPTED):
            out[metric.name] = out.get(metric.name, 0.0) + float(getattr(metric, "value", 0) or 0)
    return out


def accept_length(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Mean acceptance length between two counter snapshots, ``None`` without drafts."""
    drafts = after.get(_DRAFTS, 0.0) - before.get(_DRAFTS, 0.0)
    if drafts <= 0:
        return None
    return 1.0 + (after.get(_ACCEPTED, 0.0) - before.get(_ACCEPTED, 0.0)) / drafts


def resolved_engine_args(config: Any, names: list[str]) -> dict[str, Any]:
    """The values vLLM runs for the named engine arguments, found by name on its sub-configs (scheduler, cache,
    model, parallel); names it does not keep are left out."""
    out: dict[str, Any] = {}
    for name in names:
        for part in ("scheduler_config", "cache_config", "model_config", "parallel_config", None):
            holder = config if part is None else getattr(config, part, None)
            value = _safe_attr(holder, name) if holder is not None else None
            if isinstance(value, (bool, int, float, str)):
                out[name] = value
                break
    return out


def resolved_config(llm: Any, engine_args: list[str] | None = None) -> dict[str, Any]:
    """What the engine resolved: the worker's compilation config and the facts that change the plan."""
    config = llm.llm_engine.vllm_config
    comp = config.compilation_config
    sizes = comp.cudagraph_capture_sizes
    details: dict[str, Any] = {}
    spec = getattr(config, "speculative_config", None)
    # Keys are autotune.core.records.Detail's names (this file cannot import autotune; a test holds them equal).
    details["speculative_method"] = None if spec is None else getattr(spec, "method", None)
    details["num_speculative_tokens"] = 0 if spec is None else getattr(spec, "num_speculative_tokens", None)
    if spec is not None and hasattr(spec, "num_speculative_tokens_per_batch_size"):
        # vLLM >= 0.26.0: the K schedule it runs ([[start, end, K], ...]); None when it runs one K.
        details["num_speculative_tokens_per_batch_size"] = _schedule_rows(
            _safe_attr(spec, "num_speculative_tokens_per_batch_size"))
    scheduler = getattr(config, "scheduler_config", None)
    if scheduler is not None and hasattr(scheduler, "async_scheduling"):
        details["async_scheduling"] = scheduler.async_scheduling
    # vLLM >= 0.34: decode graphs in requests, prefill graphs in tokens, as the worker resolved them.
    decode = _safe_attr(comp, "decode_cudagraph_capture_request_sizes")
    if isinstance(decode, (list, tuple)):
        details["decode_cudagraph_capture_request_sizes"] = [int(v) for v in decode]
        # The decode token budget: graphs of listed request counts above it are not captured (the list keeps them).
        budget = _safe_attr(comp, "max_decode_cudagraph_capture_tokens")
        details["max_decode_cudagraph_capture_tokens"] = budget if isinstance(budget, int) else None
    prefill = _safe_attr(comp, "prefill_cudagraph_capture_token_sizes")
    if isinstance(prefill, (list, tuple)):
        details["prefill_cudagraph_capture_token_sizes"] = [int(v) for v in prefill]
    breakable = _safe_attr(comp, "use_breakable_cudagraph")
    if isinstance(breakable, bool):
        details["use_breakable_cudagraph"] = breakable
    runner_v2 = _safe_attr(config, "use_v2_model_runner")
    if isinstance(runner_v2, bool):
        details["model_runner"] = "v2" if runner_v2 else "v1"
    if engine_args:
        details["engine_args"] = resolved_engine_args(config, engine_args)
    compile_mode = getattr(comp, "mode", None)
    if compile_mode is None:
        compile_mode = getattr(comp, "level", None)  # older vLLM names it level
    return {
        "cudagraph_mode": None if comp.cudagraph_mode is None else str(comp.cudagraph_mode),
        "cudagraph_capture_sizes": None if sizes is None else [int(s) for s in sizes],
        "compile_mode": None if compile_mode is None else _enum_name(compile_mode),
        "details": details,
    }


def _schedule_rows(value: Any) -> list[list[int]] | None:
    """A K schedule as plain ``[start, end, K]`` rows (vLLM may keep tuples), ``None`` when unset or unreadable."""
    if not value:
        return None
    try:
        return [[int(x) for x in row] for row in value]
    except (TypeError, ValueError):
        return None


def _enum_name(value: Any) -> str:
    name = getattr(value, "name", None)
    return str(name) if name is not None else str(value)


def _safe_attr(obj: Any, name: str) -> Any:
    # Properties that decide things can raise on odd configs; a missing fact is better than a failed restart.
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001
        return None


def device_facts() -> dict[str, Any]:
    """vLLM/torch versions, accelerator name, CUDA version and driver, as far as this machine knows them."""
    import torch
    import vllm

    facts: dict[str, Any] = {"vllm": vllm.__version__, "torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["driver"] = nvidia_driver()
    else:
        facts["gpu"] = None
    return facts


def nvidia_driver() -> str | None:
    """The NVIDIA driver version from nvidia-smi, when it is installed."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    line = out.stdout.strip().splitlines()
    return line[0].strip() if out.returncode == 0 and line else None


def peak_memory_gib() -> float | None:
    """Peak accelerator memory this process allocated (the worker runs in-process), GiB."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / 2**30


def offline_timing(output: Any) -> dict[str, Any] | None:
    """One finished request's timings from vLLM's per-request stats (``None`` when stats are off)."""
    stats = getattr(output, "metrics", None)
    if stats is None or not getattr(stats, "first_token_ts", 0.0):
        return None
    ttft = float(stats.first_token_latency)
    decode = float(stats.last_token_ts) - float(stats.first_token_ts)
    return _dataset.request_timing(ttft, ttft + decode, int(stats.num_generation_tokens), None)

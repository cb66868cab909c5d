"""How fast a planned configuration runs in the ``sim`` engine: step times, batch, acceptance, start-up phases.

:mod:`autotune.engines._sim_plan` says what vLLM would run (:func:`~autotune.engines._sim_plan.plan_config`);
:mod:`autotune.engines._sim_model` holds every constant, with the formulas in its docstring; this module evaluates those formulas for a
:class:`~autotune.engines._sim_plan.Plan`: decode and prefill step times, the batch that decodes together, the
acceptance length, steady throughput, per-request latencies and start-up seconds by phase. Nothing here draws noise
(the engine in :mod:`autotune.engines.sim` adds it).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence

from autotune.core.records import EngineConfig, Workload
from autotune.engines._sim_v034 import BREAKABLE_PIECEWISE_SHARE
from autotune.engines._sim_model import (
    ACCEPTANCE,
    DRAFT_LOAD_S,
    EAGER,
    FULL,
    FULL_AND_PIECEWISE,
    FULL_DECODE_ONLY,
    FULL_MODES,
    GRAPH_FULL,
    GRAPH_PIECEWISE,
    LOOKUP_METHODS,
    NGRAM_RANDOM_PROMPTS,
    NONE,
    PAD_COST_FRACTION,
    PIECEWISE,
    PIECEWISE_MODES,
    ForwardCost,
    HardwareProfile,
    ModelProfile,
    drafter_cost,
)
from autotune.engines._sim_plan import Plan

__all__ = [
    "accept_len",
    "batch_size",
    "decode_step_ms",
    "graph_counts",
    "prefill_step_ms",
    "request_latency_ms",
    "startup_phases",
    "startup_seconds",
    "steady_throughput",
]


#: Invented: how much more often the lossy ``fly`` rejection accepts a draft token (the sim has no outputs to change).
FLY_ACCEPT_GAIN = 1.15
#: A PIECEWISE step on vLLM >= 0.34's breakable graphs.
GRAPH_BREAKABLE = "piecewise-breakable"


def _captured_size(n: int, sizes: Sequence[int]) -> int | None:
    """The smallest captured size that holds ``n`` tokens, ``None`` if none does (the step runs eagerly)."""
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def _decode_graph(plan: Plan, hw: HardwareProfile, n: int) -> tuple[str, int]:
    if plan.decode_requests is not None:
        return _decode_graph_v034(plan, hw, n)
    size = _captured_size(n, plan.sizes)
    if plan.mode == NONE or size is None:
        return EAGER, n
    if plan.mode == PIECEWISE:
        return GRAPH_PIECEWISE, size
    full_ok = plan.k == 0 or hw.uniform_batch_full_graphs
    if full_ok:
        return GRAPH_FULL, size
    return (GRAPH_PIECEWISE, size) if plan.mode == FULL_AND_PIECEWISE else (EAGER, n)


def _decode_graph_v034(plan: Plan, hw: HardwareProfile, n: int) -> tuple[str, int]:
    """vLLM >= 0.34: a uniform decode batch of ``n`` tokens (``n / (1+K)`` requests) replays the smallest decode
    graph captured for its query length that holds its requests in FULL_DECODE_ONLY and FULL_AND_PIECEWISE (the
    captured graphs, not the recorded list: a decode token budget leaves listed ones out); without one it takes the
    prefill graphs (piecewise in FULL_AND_PIECEWISE) or runs eagerly. PIECEWISE and FULL run every batch on the
    prefill graphs."""
    q = 1 + plan.k
    if plan.mode in (FULL_DECODE_ONLY, FULL_AND_PIECEWISE):
        requests = _captured_size(-(-n // q), sorted(r for r, width in plan.decode_graphs if width == q))
        if requests is not None and (plan.k == 0 or hw.uniform_batch_full_graphs):
            return GRAPH_FULL, requests * q
        if plan.mode == FULL_DECODE_ONLY:
            return EAGER, n
    size = _captured_size(n, plan.prefill_sizes or ())
    if plan.mode == NONE or size is None:
        return EAGER, n
    return (GRAPH_FULL if plan.mode == FULL else _piecewise(plan)), size


def _piecewise(plan: Plan) -> str:
    return GRAPH_BREAKABLE if plan.breakable else GRAPH_PIECEWISE


def _prefill_graph(plan: Plan, n: int) -> tuple[str, int]:
    # Mixed/prefill batches: piecewise graphs in PIECEWISE and FULL_AND_PIECEWISE, full graphs in FULL,
    # nothing in FULL_DECODE_ONLY; prompts usually exceed every captured size and run eagerly anyway.
    size = _captured_size(n, plan.sizes if plan.prefill_sizes is None else plan.prefill_sizes)
    if size is None or plan.mode in (NONE, FULL_DECODE_ONLY):
        return EAGER, n
    return (GRAPH_FULL if plan.mode == FULL else _piecewise(plan)), size


def _drafter_graph(plan: Plan, n: int) -> tuple[str, int]:
    size = _captured_size(n, plan.sizes)
    if size is None:
        return EAGER, n
    if plan.drafter_full_graphs and plan.mode in FULL_MODES:
        return GRAPH_FULL, size
    if plan.mode in PIECEWISE_MODES:
        return GRAPH_PIECEWISE, size
    return EAGER, n


def _gpu_ms(cost: ForwardCost, n: int, hw: HardwareProfile, token_ms: float | None = None) -> float:
    per_token = cost.token_ms if token_ms is None else token_ms
    experts = cost.expert_ms * (1.0 - (1.0 - cost.expert_touch_p) ** n)
    return hw.weight_scale * (cost.weight_ms + experts) + hw.token_scale * per_token * n


def _launch_ms(cost: ForwardCost, graph: str, hw: HardwareProfile) -> float:
    if graph == EAGER:
        ms = cost.launch_ms
    elif graph == GRAPH_PIECEWISE:
        ms = cost.launch_ms * cost.attn_launch_frac + cost.piecewise_replay_ms
    elif graph == GRAPH_BREAKABLE:  # vLLM >= 0.34's breakable graphs (an invented saving: _sim_v034)
        ms = (cost.launch_ms * cost.attn_launch_frac + cost.piecewise_replay_ms) * BREAKABLE_PIECEWISE_SHARE
    else:
        ms = cost.full_replay_ms
    return hw.launch_scale * ms


def _forward_ms(cost: ForwardCost, n: int, graph: tuple[str, int], hw: HardwareProfile,
                token_ms: float | None = None) -> float:
    kind, padded = graph
    gpu = _gpu_ms(cost, n, hw, token_ms)
    if padded > n:
        gpu += hw.pad_scale * PAD_COST_FRACTION * (_gpu_ms(cost, padded, hw, token_ms) - gpu)
    return gpu + _launch_ms(cost, kind, hw)


def _cpu_ms(plan: Plan, hw: HardwareProfile, model: ModelProfile) -> float:
    sched = model.sched_ms * ((1.0 - model.async_hidden_frac) if plan.async_scheduling else 1.0)
    spec = (model.spec_fixed_ms + model.spec_per_token_ms * plan.k) if plan.k else 0.0
    return hw.cpu_scale * (sched + spec)


def _draft_ms(plan: Plan, hw: HardwareProfile, model: ModelProfile, b: int) -> float:
    drafter = drafter_cost(model, plan.method)
    if drafter is None or not plan.k:
        return 0.0
    total = hw.cpu_scale * (drafter.lookup_ms + drafter.lookup_per_seq_ms * b)
    if drafter.forward is not None:
        steps = plan.k if drafter.steps_per_k else 1
        step = _forward_ms(drafter.forward, b, _drafter_graph(plan, b), hw) + hw.cpu_scale * drafter.fixed_ms
        total += steps * step
    return total


def decode_step_ms(plan: Plan, hw: HardwareProfile, model: ModelProfile, b: int) -> float:
    """One decode (or verification) step for ``b`` sequences, in milliseconds."""
    n = b * (1 + plan.k)
    target = _forward_ms(model.target, n, _decode_graph(plan, hw, n), hw)
    return target + _cpu_ms(plan, hw, model) + _draft_ms(plan, hw, model, b)


def prefill_step_ms(plan: Plan, hw: HardwareProfile, model: ModelProfile, b: int, input_len: int) -> float:
    """Prefilling a wave of ``b`` prompts, in milliseconds: one step, or one per ``max_num_batched_tokens`` chunk."""
    total = b * input_len
    chunk = min(total, plan.max_num_batched_tokens or total)
    steps = math.ceil(total / chunk)
    forward = _forward_ms(model.target, chunk, _prefill_graph(plan, chunk), hw, token_ms=model.prefill_token_ms)
    return steps * (forward + hw.cpu_scale * model.sched_ms)


def accept_len(config: EngineConfig, workload: Workload) -> float:
    """Expected acceptance length: 1 + expected accepted draft tokens per step (1.0 without speculation).

    ``speculative_config.synthetic_acceptance_rates`` (vLLM's synthetic rejection sampler, used by the reference
    probe) overrides the method's profile: entry j is the probability that drafts 1..j are all accepted.
    """
    k = config.num_speculative_tokens
    if k <= 0:
        return 1.0
    spec = config.speculative_config or {}
    rates = spec.get("synthetic_acceptance_rates")
    if rates:
        cumulative = [float(r) for r in list(rates)[:k]]
    else:
        method = str(spec.get("method"))
        profile = ACCEPTANCE.get(method, ACCEPTANCE["draft_model"])
        if method in LOOKUP_METHODS and not workload.repetitive_prompts:
            profile = NGRAM_RANDOM_PROMPTS
        if spec.get("rejection_sample_method") == "fly":
            # Lossy acceptance (vLLM >= 0.33's FLy): more drafts accepted, outputs no longer the target's. Invented.
            profile = dataclasses.replace(profile, a=min(0.97, profile.a * FLY_ACCEPT_GAIN), d=min(0.99, profile.d * 1.05))
        cumulative = profile.cumulative(k)
    return 1.0 + sum(cumulative)


def batch_size(plan: Plan, workload: Workload) -> int:
    """Sequences decoding together: the workload's concurrency within the engine's limits.

    A step verifies ``1+K`` tokens per sequence, so a ``max_num_batched_tokens`` budget admits at most
    ``budget // (1+K)`` sequences (a 32-token budget with K=2 runs 10).
    """
    (concurrency,) = workload.levels  # the simulator measures several load levels one at a time (Workload.at)
    b = min(concurrency, plan.max_num_seqs, workload.num_prompts)
    if plan.max_num_batched_tokens is not None:
        b = min(b, plan.max_num_batched_tokens // (1 + plan.k))
    return max(1, b)


def steady_throughput(plan: Plan, config: EngineConfig, workload: Workload, hw: HardwareProfile,
                      model: ModelProfile) -> float:
    """True steady-state output tokens/s of a warm engine (no noise, no cold start, no warm-up)."""
    b = batch_size(plan, workload)
    length = accept_len(config, workload)
    waves = math.ceil(workload.num_prompts / b)
    wave_ms = (prefill_step_ms(plan, hw, model, b, workload.input_len)
               + workload.output_len / length * decode_step_ms(plan, hw, model, b))
    return workload.num_prompts * workload.output_len / (waves * wave_ms / 1000.0)


def request_latency_ms(plan: Plan, config: EngineConfig, workload: Workload, hw: HardwareProfile,
                       model: ModelProfile) -> dict[str, list[float]]:
    """Noiseless per-request latencies of one pass (ms): every request arrives when the pass starts.

    Requests run in waves of :func:`batch_size`: request ``i`` waits for ``i // B`` earlier waves, then its own
    prefill (TTFT); each decode step then delivers ``accept_len`` tokens (ITL = one step, TPOT = step / accept_len);
    end-to-end = TTFT + (output_len - 1) x TPOT. This is what the ``vllm`` engine's offline mode measures.
    """
    b = batch_size(plan, workload)
    length = accept_len(config, workload)
    step = decode_step_ms(plan, hw, model, b)
    prefill = prefill_step_ms(plan, hw, model, b, workload.input_len)
    wave = prefill + workload.output_len / length * step
    tpot = step / length
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": [], "e2el": []}
    for i in range(workload.num_prompts):
        ttft = (i // b) * wave + prefill
        out["ttft"].append(ttft)
        out["tpot"].append(tpot)
        out["itl"].append(step)
        out["e2el"].append(ttft + max(0, workload.output_len - 1) * tpot)
    return out


def startup_seconds(plan: Plan, hw: HardwareProfile, model: ModelProfile, cold: bool) -> float:
    """Engine start-up: init and weight load, compile (longer when cold), one capture per graph and size."""
    return sum(startup_phases(plan, hw, model, cold).values())


def graph_counts(plan: Plan, model: ModelProfile) -> tuple[int, int, bool]:
    """Graphs per captured size for the target and for the drafter, and whether a drafter model is loaded: what
    start-up charges capture time for (:func:`startup_phases`) and the unified-memory model capture memory for."""
    per_size = {NONE: 0, PIECEWISE: 1, FULL: 1, FULL_DECODE_ONLY: 1, FULL_AND_PIECEWISE: 2}[plan.mode]
    drafter = drafter_cost(model, plan.method)
    drafter_graphs = 1 if drafter is not None and drafter.forward is not None and plan.mode != NONE else 0
    return per_size, drafter_graphs, bool(drafter is not None and drafter.loads_model)


def startup_phases(plan: Plan, hw: HardwareProfile, model: ModelProfile, cold: bool) -> dict[str, float]:
    """Start-up seconds by phase: ``load`` (init and weights, a draft model's too), ``compile``, ``capture``."""
    graphs_per_size, drafter_graphs, loads_drafter = graph_counts(plan, model)
    compile_s = hw.compile_cold_s if cold else hw.compile_warm_s
    load = hw.init_s * model.startup_scale + (DRAFT_LOAD_S if loads_drafter else 0.0)
    return {"load": load, "compile": compile_s * model.startup_scale,
            "capture": hw.capture_s * len(plan.sizes) * (graphs_per_size + drafter_graphs)}

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

__all__ = ["FactValue", "clean_facts", "gpu_fact", "numeric_facts", "phase_facts"]

FactValue = float | int | str | bool

# -- memory around each start (autotune.machine.StartSafety.restart_facts) ------------------------------------
#: Seconds the start waited for memory to come back (``settle``).
SETTLE_WAIT_S = "settle_wait_s"
#: Whether memory was not back at once, so the start waited (the wait above is then more than one check).
SETTLE_WAITED = "settle_waited"
#: The guard's MemAvailable floor, GiB (0: no floor).
MEMORY_FLOOR_GIB = "memory_floor_gib"
#: How many times the guard read /proc/meminfo over the restart.
MEMORY_SAMPLES = "memory_samples"
#: CPU seconds the memory guard's sampling used over the restart (its cost against the restart's wall time).
MEMORY_GUARD_CPU_S = "memory_guard_cpu_s"
#: The lowest MemAvailable the guard saw, GiB.
MEM_AVAILABLE_MIN_GIB = "mem_available_min_gib"
#: Cached (page cache) at the guard's last sample, GiB.
CACHED_GIB = "cached_gib"
#: Why the guard killed the engine (``floor`` or ``driver``); absent when it did not.
MEMORY_GUARD = "memory_guard"

# -- the machine's state at the start (autotune.machine.MachineState) -----------------------------------------
#: Mean and minimum CPU clock over cores (``scaling_cur_freq``), MHz.
CPU_MHZ_MEAN = "cpu_mhz_mean"
CPU_MHZ_MIN = "cpu_mhz_min"
#: Every GPU's active throttle reasons, ``gpu<i>:<reason>`` joined by commas; absent when none.
GPU_THROTTLE = "gpu_throttle"
#: Per-GPU figures, named by :func:`gpu_fact`.
GPU_SM_CLOCK_MHZ = "sm_clock_mhz"
GPU_POWER_W = "power_w"
GPU_TEMPERATURE_C = "temperature_c"
GPU_FIGURES = (GPU_SM_CLOCK_MHZ, GPU_POWER_W, GPU_TEMPERATURE_C)

# -- memory and capacity from vLLM's start-up log (autotune.engines.vllm._kvfacts) -----------------------------
WEIGHTS_GIB = "weights_gib"
KV_GIB = "kv_gib"
KV_TOKENS = "kv_tokens"
#: Requests of ``max_model_len`` tokens that fit in the KV cache at once, and that length.
MAX_CONCURRENCY = "max_concurrency"
MAX_MODEL_LEN = "max_model_len"
#: vLLM's CUDA-graph memory estimate and the graph pool's actual size, GiB.
GRAPH_MEMORY_GIB = "graph_memory_gib"
GRAPH_POOL_GIB = "graph_pool_gib"
#: Seconds as vLLM's own log gives them (prefixed: autotune's phase timings are measured, not read from the log).
VLLM_LOAD_S = "vllm_load_s"
VLLM_COMPILE_S = "vllm_compile_s"
VLLM_CAPTURE_S = "vllm_capture_s"
VLLM_INIT_S = "vllm_init_s"


def gpu_fact(index: int, figure: str) -> str:
    """The key of one GPU's figure (one of :data:`GPU_FIGURES`): ``gpu0_sm_clock_mhz``."""
    return f"gpu{index}_{figure}"

# -- the page-cache policy (owner: autotune.machine.StartSafety) ----------------------------------------------
#: The policy the start ran under: keep, drop or warm (``engine.page_cache``, resolved).
PAGE_CACHE = "page_cache"
#: Seconds spent dropping (and, for warm, re-reading the weights into) the page cache before the start.
PAGE_CACHE_S = "page_cache_s"
#: Page cache the start's weight loading added (GiB): a cold start from disk adds the weights, a warm one little
#: (the simulator's unified memory says it; a real engine does not).
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


# -- warm-up and passes (the warm-up rule: autotune.stats.warmup) -----------------------------------------------
#: Warm-up passes the restart ran before its timed passes (every load level's, added up).
WARMUP_PASSES = "warmup_passes"
#: Rounds of the prompt set each timed pass ran, sized to ``workload.pass_seconds`` (the last level's).
PASS_ROUNDS = "pass_rounds"
#: What ended the warm-up (the last level's): ``cap`` (``max_warmup_passes``), ``rule`` (the rule alone),
#: ``prior`` (the rule with the study's noise prior) or ``none`` (no warm-up pass asked for).
WARMUP_RULE = "warmup_rule"

# -- where a restart's time went, in seconds (absent: the engine did not say) ------------------------------------
#: From asking for the process until it ran our code (a fork or a new interpreter, a container's start).
PHASE_LAUNCH_S = "phase_launch_s"
#: Importing the engine (vLLM and torch); about 0 in a process forked from a forkserver that imported them.
PHASE_IMPORT_S = "phase_import_s"
#: vLLM setting the engine up before it loads weights (the log's first line to the load): resolving the
#: configuration (vLLM inspects the model class in a subprocess while its model-info cache is empty: 22-25 s on an
#: H200 study's first start, 0-1 s after), starting the engine-core process (serve mode: 15-40 s every start, a new
#: interpreter importing vLLM), CUDA and distributed init (2-4 s).
PHASE_SETUP_S = "phase_setup_s"
#: Loading the weights.
PHASE_LOAD_S = "phase_load_s"
#: Compiling (torch.compile; a warm cache makes it short).
PHASE_COMPILE_S = "phase_compile_s"
#: Memory profiling after the load, compile not counted: the profile run, the sampler's dummy run and the CUDA-graph
#: memory estimate, until vLLM sizes the KV cache. The V1 model runner JIT-compiles kernels here, between
#: the profile run and the graph-memory estimate (83 s into an empty cache on the H200; the stretch is 1-7 s after).
PHASE_PROFILE_S = "phase_profile_s"
#: Capturing CUDA graphs.
PHASE_CAPTURE_S = "phase_capture_s"
#: vLLM's own warm-up once the KV cache is sized, capture not counted: allocating the KV cache (under a second in
#: every H200 log), FlashInfer autotuning and the compiled sizes' dummy runs before capture, and after it one run of
#: the model and sampler so Triton JIT-compiles their kernels (the V2 model runner: ~100 s into an empty Triton
#: cache on the H200, 0-10 s after).
PHASE_KERNEL_WARMUP_S = "phase_kernel_warmup_s"
#: What is left of engine start-up that no log line accounts for (engine time minus the phases above): before vLLM's
#: first line (the server's own import in serve mode) and after its last (handing the engine back). Older records
#: have no set-up, profiling or kernel warm-up and keep those seconds here.
PHASE_OTHER_STARTUP_S = "phase_other_startup_s"
#: Warm-up passes.
PHASE_WARMUP_S = "phase_warmup_s"
#: Timed passes.
PHASE_TIMED_S = "phase_timed_s"
#: The phases in the order a restart runs them: what the report totals and the budget forecasts from.
PHASES = (PHASE_LAUNCH_S, PHASE_IMPORT_S, PHASE_SETUP_S, PHASE_LOAD_S, PHASE_COMPILE_S, PHASE_PROFILE_S,
          PHASE_CAPTURE_S, PHASE_KERNEL_WARMUP_S, PHASE_OTHER_STARTUP_S, PHASE_WARMUP_S, PHASE_TIMED_S)
#: Start-up phases whose length depends on the configuration's caches (torch.compile's, Triton's, FlashInfer's): a
#: start of a configuration that started before in this cache pays them short, so the budget prices them from cold
#: starts for a cold start and from warm ones otherwise.
CACHE_PHASES = (PHASE_COMPILE_S, PHASE_PROFILE_S, PHASE_CAPTURE_S, PHASE_KERNEL_WARMUP_S)
#: Whether the start found the study's JIT caches empty (vLLM's compile cache, Triton's and FlashInfer's), a bool:
#: the first start into empty caches compiles the kernels every later configuration shares (on the H200, 170-190 s
#: against 38-90 s for a later configuration's cold start), so the budget prices it apart (owner:
#: autotune.engines.vllm; absent: the engine does not say).
CACHES_EMPTY = "caches_empty"
#: The passes: the budget prices them from pass lengths and pass counts, not from the start-ups they followed.
PASS_PHASES = (PHASE_WARMUP_S, PHASE_TIMED_S)
#: The phases' short names, without the ``phase_``/``_s`` wrapping: what :func:`phase_facts` and the cmd protocol take.
PHASE_NAMES = tuple(k.removeprefix("phase_").removesuffix("_s") for k in PHASES)


def phase_facts(**seconds: float | None) -> dict[str, float]:
    """``{phase key: seconds}`` from keyword names without the ``phase_``/``_s`` wrapping (``load=1.2``), each
    clamped at 0 (clocks of two processes may disagree by a little) and unknown ones (``None``) left out."""
    out: dict[str, float] = {}
    for name, value in seconds.items():
        key = f"phase_{name}_s"
        if key not in PHASES:
            raise ValueError(f"unknown phase {name!r}")
        if value is not None:
            out[key] = max(0.0, float(value))
    return out

# -- the output check (autotune.core.outputs) --------------------------------------------------------------------
#: Per restart: the checked prompts' output digests, ``"index:digest ..."`` (see :mod:`autotune.core.outputs`).
OUTPUT_DIGESTS = "output_digests"
#: Per restart, when the check did not run: why (synthetic acceptance, serve mode, an engine without the check).
OUTPUT_CHECK_SKIPPED = "output_check_skipped"
#: Per trial (report, MLflow): the fraction of checked prompts whose outputs agree with the baseline's.
OUTPUT_AGREEMENT = "output_agreement"

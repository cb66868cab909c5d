"""The performance model behind the ``sim`` engine: every constant and every rule, in one place.

The simulator answers two questions about an :class:`~autotune.core.records.EngineConfig`:

1. *What would vLLM actually run?* (:func:`autotune.engines._sim_plan.plan_config`) - the configured CUDA-graph
   mode and capture sizes after
   the engine-version rules that silently change them, the model runner, async scheduling, and whether graph
   capture would run out of memory.
2. *How fast would that decode?* (:func:`autotune.engines._sim_speed.steady_throughput`, the formulas below) -
   output tokens/s in steady state, without noise, coldness or warm-up (:mod:`autotune.engines.sim` adds those).

Decode step time (milliseconds), for ``B`` sequences verifying ``K`` draft tokens (``n = B*(1+K)`` tokens)::

    step = forward(target, n, graph) + cpu + draft
    forward(m, n, graph) = gpu(m, n) + pad + launch(m, graph)
    gpu(m, n)    = weight_scale * (weight_ms + expert_ms * (1 - (1 - expert_touch_p)**n)) + token_scale * token_ms * n
    launch(eager)     = launch_scale * launch_ms
    launch(piecewise) = launch_scale * (launch_ms * attn_launch_frac + piecewise_replay_ms)   # attention is eager
    launch(full)      = launch_scale * full_replay_ms
    cpu   = cpu_scale * (sched_ms * (1 - async_hidden_frac if async else 1) + spec_fixed_ms + spec_per_token_ms*K)
    draft = cpu_scale * lookup(B) + steps * (forward(drafter, B, draft_graph) + cpu_scale * drafter.fixed_ms)
    tokens per step = B * accept_len,   accept_len = 1 + sum_i prod_{j<=i} alpha_j,   alpha_j = a * d**(j-1)

A batch of ``n`` tokens replays the graph of the smallest captured size ``>= n`` (padding costs
``pad_scale * PAD_COST_FRACTION`` of the padded tokens' GPU time); with no captured size ``>= n`` it runs eagerly.
Each pass is ``ceil(num_prompts / B)`` waves of one prefill step plus ``output_len / accept_len`` decode steps.

Hardware profiles (multipliers on the H200-calibrated model costs below, plus noise and start-up):

=================================  ===========  ===========  ==========
constant                           ``h200``     ``gb10``     ``flat``
=================================  ===========  ===========  ==========
weight_scale (weight reads)        1.0          17.0         0.0
token_scale (per-token compute)    1.0          4.0          100.0
launch_scale (kernel launches)     1.0          1.8          0.0
cpu_scale (scheduler, drafting)    1.0          1.4          0.0
pad_scale                          1.0          1.0          0.0
uniform-batch full graphs          yes (FA3)    no           yes
spec+default mode -> NONE before   -            0.27.0       -
capture_limit_tokens               1024         512          1024
noise_sd (restart, lognormal)      0.035        0.06         0.035
shared_noise_share (of variance)   0.3          0.3          0.3
pass_noise_sd                      0.008        0.015        0.008
cold_slowdown                      0.30-0.60    0.30-0.60    0.30-0.60
first_pass_slowdown                0.05-0.45    0.10-0.50    0.05-0.45
init_s / compile warm / cold       18 / 8 / 45  40 / 20 / 110  18 / 8 / 45
capture_s per graph                0.5          1.5          0.5
=================================  ===========  ===========  ==========

Model profiles (H200 milliseconds; ``dense`` is calibrated to the 1.2B dense Llama of
``shared/reference/h200_vllm026_summary.txt`` at 4 sequences on vLLM 0.26.0; ``moe`` is a sparse MoE routing each
token to 8 of 128 experts, loosely anchored to that reference's small MoE and shaped to the GB10 seed note):

=================================  ===========  ===========
constant                           ``dense``    ``moe``
=================================  ===========  ===========
weight_ms                          0.55         0.55
expert_ms / expert_touch_p         0 / 0        0.45 / 0.0625
token_ms (decode, per token)       0.010        0.012
prefill_token_ms                   0.002        0.003
launch_ms (eager step)             5.4          10.0
attn_launch_frac                   0.30         0.20
piecewise / full replay_ms         0.15 / 0.03  0.25 / 0.03
sched_ms / async_hidden_frac       1.5 / 0.30   1.5 / 0.30
spec_fixed_ms / spec_per_token_ms  0.60 / 0.12  0.60 / 0.12
capture_limit_factor               1.0          0.5
startup_scale                      1.0          2.5
=================================  ===========  ===========

Drafters (per model profile; a draft "step" proposes one token for every sequence): ``ngram``/``suffix`` are a
CPU lookup (0.1 ms + 0.05 ms per sequence); ``draft_model`` is a small model run ``K`` times (0.35 ms Python
overhead per step plus its own forward, 1.1 ms of launches when eager); ``eagle``/``eagle3``/``mtp`` are one-layer
heads run ``K`` times; ``medusa`` runs its heads once. Acceptance profiles ``(a, d)`` are in :data:`ACCEPTANCE`
(ngram 0.85/0.80 on repetitive prompts, 0.15/0.50 otherwise; draft_model 0.82/0.96; eagle3 0.80/0.93; mtp 0.88/0.85).

Restart mechanics (used by :mod:`autotune.engines.sim`): padding costs ``PAD_COST_FRACTION`` = 0.25 of the padded
tokens' GPU time; pass ``j`` of a process runs at ``1 - s * WARMUP_DECAY**j`` (``WARMUP_DECAY`` = 0.08, ``s`` drawn
from ``first_pass_slowdown``; speculative configurations also ramp, :mod:`autotune.engines._sim_passes`); warm-up
ends by the runner's rule (:mod:`autotune.engines.vllm._warmup`); start-up time jitters by
``STARTUP_JITTER`` = 5%; reported acceptance by ``ACCEPT_NOISE_SD`` = 1%; a restart's request latencies are the
wave model's (:func:`request_latency_ms`) stretched by the restart's slowness (steady / measured throughput); a draft model adds ``DRAFT_LOAD_S`` = 4 s
of start-up and leaves ``DRAFT_MODEL_CAPTURE_SHARE`` = 0.5 of the capture memory.

Engine-version rules (applied by :func:`~autotune.engines._sim_plan.plan_config`, in this order):

* ``enforce_eager`` -> NONE.
* Speculation with the *default* mode on a profile whose stack disables capture (``gb10`` before 0.27.0) ->
  NONE, silently (the seed note's trap: no log line at default verbosity).
* Speculation on an attention backend without uniform-batch full-graph support (``gb10``): FULL and
  FULL_AND_PIECEWISE -> PIECEWISE, FULL_DECODE_ONLY -> NONE, each with a WARNING note.
* Speculation with full graphs: capture sizes rounded up to multiples of ``1+K``, silently (seen on H200 with
  vLLM 0.26.0: ``[1,2,4,8]`` became ``[4,8]``).
* vLLM >= 0.26.0 uses Model Runner V2 with async scheduling, except ``draft_model`` (before 0.28.0): V1 runner,
  async scheduling off, no full graphs for the drafter (WARNING notes, as vLLM 0.26.0 prints them). Before 0.26.0
  everything runs on V1 without async scheduling. The 0.27.0 and 0.28.0 boundaries are invented for the
  simulation; only the 0.26.0 behaviour was observed.
* Invented, for ``autotune recheck``'s simulation of an upgrade that shifts the landscape: from 0.29.0
  (:data:`SPEC_PIECEWISE_SINCE`), speculation with full graphs runs PIECEWISE, its capture sizes rounded up to
  multiples of 8, silently (the kind of change vLLM PR #54418's per-platform capture caps made between releases).
* From 0.34.0 (:mod:`autotune.engines._sim_v034`, ported from vLLM's code): split capture sizes, no Model Runner V1,
  ``medusa`` rejected, breakable PIECEWISE graphs; the invented 0.29.0 rule above stops there.
* Capture OOM when the largest captured size exceeds ``capture_limit_tokens * capture_limit_factor`` (halved with
  a ``draft_model``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

__all__ = [
    "ACCEPTANCE",
    "DRAFT_LOAD_S",
    "EAGER",
    "FULL",
    "FULL_AND_PIECEWISE",
    "FULL_DECODE_ONLY",
    "FULL_MODES",
    "GRAPH_FULL",
    "GRAPH_PIECEWISE",
    "HARDWARE",
    "LOOKUP_METHODS",
    "MODELS",
    "NGRAM_RANDOM_PROMPTS",
    "NONE",
    "PAD_COST_FRACTION",
    "PIECEWISE",
    "PIECEWISE_MODES",
    "AcceptanceProfile",
    "DrafterCost",
    "ForwardCost",
    "HardwareProfile",
    "ModelProfile",
    "Rejected",
    "drafter_cost",
]

# -- vLLM facts ------------------------------------------------------------------------------------------

NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE = (
    "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
#: Modes that capture full graphs for decode batches.
FULL_MODES = (FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE)
#: Modes that capture piecewise graphs (attention left out of the graph, run eagerly).
PIECEWISE_MODES = (PIECEWISE, FULL_AND_PIECEWISE)
#: vLLM's default ``cudagraph_mode`` (since 0.11).
DEFAULT_MODE = FULL_AND_PIECEWISE
#: vLLM's default ``max_num_seqs`` when the config does not set it.
VLLM_DEFAULT_MAX_NUM_SEQS = 256
#: vLLM caps its default largest capture size here.
DEFAULT_MAX_CAPTURE_SIZE = 512
#: vLLM prints compilation mode 3 (VLLM_COMPILE) for every reference run, NONE included.
COMPILE_MODE = "3"

#: Version from which Model Runner V2 (with async scheduling) is the default, as observed on 0.26.0.
V2_RUNNER_SINCE = (0, 26, 0)
#: Invented: the version from which V2 runs ``draft_model`` with full graphs and async scheduling.
DRAFT_MODEL_ON_V2_SINCE = (0, 28, 0)

#: Invented: the version from which speculation with full graphs silently runs PIECEWISE on sizes rounded to 8s.
SPEC_PIECEWISE_SINCE = (0, 29, 0)

#: Speculative methods the simulator models; others are rejected at start-up like vLLM does.
SPEC_METHODS = ("ngram", "suffix", "draft_model", "eagle", "eagle3", "mtp", "medusa")

#: Graph kinds a forward pass can run under.
EAGER, GRAPH_PIECEWISE, GRAPH_FULL = "eager", "piecewise", "full"

#: Share of the padded tokens' extra GPU time that padding costs (padding is nearly free when memory-bound).
PAD_COST_FRACTION = 0.25
#: Warm-up factor for pass j of a process: 1 - first_pass_slowdown * WARMUP_DECAY**j.
WARMUP_DECAY = 0.08
#: Relative sd of the start-up time.
STARTUP_JITTER = 0.05
#: Relative sd of the reported acceptance length around its expectation.
ACCEPT_NOISE_SD = 0.01
#: Extra start-up seconds to load a draft model.
DRAFT_LOAD_S = 4.0
#: Share of the capture-memory limit left when a draft model is loaded too.
DRAFT_MODEL_CAPTURE_SHARE = 0.5


class Rejected(ValueError):
    """vLLM would refuse this configuration at start-up (the restart fails; the engine stays usable)."""


# -- profiles --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HardwareProfile:
    """A simulated machine: multipliers on the model costs, engine-rule switches, noise and start-up.

    Attributes:
        name: Profile name (``h200``, ``gb10``, ``flat``).
        gpu_name: What :meth:`SimEngine.describe` reports.
        attention_backend: Named in the notes of the backend rule.
        weight_scale: Multiplier on weight-read GPU time (memory bandwidth).
        token_scale: Multiplier on per-token GPU time (compute).
        launch_scale: Multiplier on kernel-launch and graph-replay time (host CPU and driver).
        cpu_scale: Multiplier on scheduler, spec bookkeeping and drafter CPU time.
        pad_scale: Multiplier on padding cost.
        uniform_batch_full_graphs: The attention backend captures full graphs for uniform multi-token batches
            (spec verification); without it, spec downgrades full modes.
        spec_default_capture_off_before: Versions below this disable capture for spec + default mode.
        capture_limit_tokens: Largest capture size that fits in memory (scaled by the model profile).
        noise_sd: Restart-to-restart relative sd (lognormal).
        shared_noise_share: Share of the restart variance shared by all configs at one seed (machine drift).
        pass_noise_sd: Pass-to-pass relative sd inside one process.
        cold_slowdown: Range of the throughput loss of a cold first start.
        first_pass_slowdown: Range of the throughput loss of the first pass in a process.
        init_s: Seconds to start the engine and load a dense model's weights.
        compile_warm_s: Compile seconds with a warm cache.
        compile_cold_s: Compile seconds with a cold cache.
        capture_s: Seconds per captured graph.
        shutdown_s: Seconds to stop the engine.
        unified_memory: The GPU allocates from host memory (a GB10): the engine runs on a simulated host whose
            memory the real guard and settle watch (:mod:`autotune.engines._sim_memory`).
    """

    name: str
    gpu_name: str
    attention_backend: str
    weight_scale: float
    token_scale: float
    launch_scale: float
    cpu_scale: float
    pad_scale: float
    uniform_batch_full_graphs: bool
    spec_default_capture_off_before: tuple[int, ...] | None
    capture_limit_tokens: int
    noise_sd: float
    shared_noise_share: float
    pass_noise_sd: float
    cold_slowdown: tuple[float, float]
    first_pass_slowdown: tuple[float, float]
    init_s: float
    compile_warm_s: float
    compile_cold_s: float
    capture_s: float
    shutdown_s: float
    unified_memory: bool = False


@dataclasses.dataclass(frozen=True)
class ForwardCost:
    """One model's forward pass on the H200 reference, in milliseconds.

    Attributes:
        weight_ms: Reading the always-used weights once per step (attention, dense MLP, router).
        token_ms: Extra GPU time per decode token in the batch.
        expert_ms: Reading *all* expert weights once; a step reads the experts its tokens touch.
        expert_touch_p: Probability that one token touches a given expert (top_k / num_experts).
        launch_ms: Kernel-launch and Python overhead of one eager forward.
        attn_launch_frac: Share of ``launch_ms`` in attention, which piecewise graphs leave eager.
        piecewise_replay_ms: Replaying the piecewise graphs of one forward.
        full_replay_ms: Replaying one full graph.
    """

    weight_ms: float
    token_ms: float
    launch_ms: float
    attn_launch_frac: float
    piecewise_replay_ms: float
    full_replay_ms: float
    expert_ms: float = 0.0
    expert_touch_p: float = 0.0


@dataclasses.dataclass(frozen=True)
class DrafterCost:
    """What proposing draft tokens costs for one speculative method.

    Attributes:
        forward: The drafter's forward pass, ``None`` for CPU-only drafting (ngram).
        fixed_ms: CPU overhead per draft step that graphs do not remove (runner bookkeeping).
        lookup_ms: CPU lookup per target step (ngram matching).
        lookup_per_seq_ms: Extra CPU lookup per sequence.
        steps_per_k: True if the drafter runs once per draft token (sequential), False if once per step.
        loads_model: True if a separate draft model is loaded (start-up time, capture memory).
    """

    forward: ForwardCost | None
    fixed_ms: float = 0.0
    lookup_ms: float = 0.0
    lookup_per_seq_ms: float = 0.0
    steps_per_k: bool = True
    loads_model: bool = False


@dataclasses.dataclass(frozen=True)
class ModelProfile:
    """A simulated target model and its drafters, on the H200 reference.

    Attributes:
        name: Profile name (``dense``, ``moe``).
        target: The target model's forward cost.
        prefill_token_ms: GPU time per prompt token in prefill.
        sched_ms: Scheduler, sampling and output processing per step.
        async_hidden_frac: Share of ``sched_ms`` that async scheduling overlaps with the GPU.
        spec_fixed_ms: Speculative bookkeeping per step (rejection sampling, metadata).
        spec_per_token_ms: Speculative bookkeeping per draft token per step.
        drafters: Cost per speculative method.
        capture_limit_factor: Multiplier on the hardware's capture-memory limit.
        startup_scale: Multiplier on the hardware's init and compile time (bigger models load longer).
    """

    name: str
    target: ForwardCost
    prefill_token_ms: float
    sched_ms: float
    async_hidden_frac: float
    spec_fixed_ms: float
    spec_per_token_ms: float
    drafters: Mapping[str, DrafterCost]
    capture_limit_factor: float
    startup_scale: float


@dataclasses.dataclass(frozen=True)
class AcceptanceProfile:
    """Per-position conditional acceptance ``alpha_j = a * d**(j-1)`` of draft token ``j``."""

    a: float
    d: float

    def cumulative(self, k: int) -> list[float]:
        """Probability that draft tokens 1..j are all accepted, for j = 1..k."""
        out, p = [], 1.0
        for j in range(k):
            p *= self.a * self.d**j
            out.append(p)
        return out


HARDWARE: dict[str, HardwareProfile] = {
    "h200": HardwareProfile(
        name="h200", gpu_name="simulated H200", attention_backend="FLASH_ATTN",
        weight_scale=1.0, token_scale=1.0, launch_scale=1.0, cpu_scale=1.0, pad_scale=1.0,
        uniform_batch_full_graphs=True, spec_default_capture_off_before=None, capture_limit_tokens=1024,
        noise_sd=0.035, shared_noise_share=0.3, pass_noise_sd=0.008,
        cold_slowdown=(0.30, 0.60), first_pass_slowdown=(0.05, 0.45),
        init_s=18.0, compile_warm_s=8.0, compile_cold_s=45.0, capture_s=0.5, shutdown_s=3.0,
    ),
    # GB10: ~17x less memory bandwidth than H200, a modest host CPU (launches ~1.8x dearer), an attention
    # backend without uniform-batch full graphs, and a stack whose spec + default mode disables capture.
    "gb10": HardwareProfile(
        name="gb10", gpu_name="simulated GB10", attention_backend="TRITON_ATTN",
        weight_scale=17.0, token_scale=4.0, launch_scale=1.8, cpu_scale=1.4, pad_scale=1.0,
        uniform_batch_full_graphs=False, spec_default_capture_off_before=(0, 27, 0), capture_limit_tokens=512,
        noise_sd=0.06, shared_noise_share=0.3, pass_noise_sd=0.015,
        cold_slowdown=(0.30, 0.60), first_pass_slowdown=(0.10, 0.50),
        init_s=40.0, compile_warm_s=20.0, compile_cold_s=110.0, capture_s=1.5, shutdown_s=5.0,
        unified_memory=True,
    ),
    # Flat: pure per-token compute, no launch, CPU or padding cost. A step costs the same per token whatever
    # the graph mode, and speculation pays (1+K) tokens of compute for accept_len < 1+K tokens of output,
    # so no configuration beats the baseline: a landscape for measuring false wins.
    "flat": HardwareProfile(
        name="flat", gpu_name="simulated flat GPU", attention_backend="FLASH_ATTN",
        weight_scale=0.0, token_scale=100.0, launch_scale=0.0, cpu_scale=0.0, pad_scale=0.0,
        uniform_batch_full_graphs=True, spec_default_capture_off_before=None, capture_limit_tokens=1024,
        noise_sd=0.035, shared_noise_share=0.3, pass_noise_sd=0.008,
        cold_slowdown=(0.30, 0.60), first_pass_slowdown=(0.05, 0.45),
        init_s=18.0, compile_warm_s=8.0, compile_cold_s=45.0, capture_s=0.5, shutdown_s=3.0,
    ),
}

_NGRAM = DrafterCost(forward=None, lookup_ms=0.10, lookup_per_seq_ms=0.05)


def _drafters(draft_model_weight_ms: float) -> dict[str, DrafterCost]:
    # The draft model's eager launches (1.1 ms) and per-step runner overhead (0.35 ms) are calibrated on the
    # reference: dm3 with piecewise drafter ~2030 tok/s, with an eager drafter (FULL mode) ~1500 tok/s.
    small_model = ForwardCost(weight_ms=draft_model_weight_ms, token_ms=0.002, launch_ms=1.1, attn_launch_frac=0.35,
                              piecewise_replay_ms=0.05, full_replay_ms=0.02)
    head = ForwardCost(weight_ms=0.04, token_ms=0.002, launch_ms=0.35, attn_launch_frac=0.35,
                       piecewise_replay_ms=0.03, full_replay_ms=0.02)
    return {
        "ngram": _NGRAM,
        "suffix": _NGRAM,
        "draft_model": DrafterCost(forward=small_model, fixed_ms=0.35, loads_model=True),
        "eagle": DrafterCost(forward=head, fixed_ms=0.08, loads_model=True),
        "eagle3": DrafterCost(forward=head, fixed_ms=0.08, loads_model=True),
        "mtp": DrafterCost(forward=head, fixed_ms=0.08),
        "medusa": DrafterCost(forward=head, fixed_ms=0.08, steps_per_k=False, loads_model=True),
    }


MODELS: dict[str, ModelProfile] = {
    "dense": ModelProfile(
        name="dense",
        target=ForwardCost(weight_ms=0.55, token_ms=0.010, launch_ms=5.4, attn_launch_frac=0.30,
                           piecewise_replay_ms=0.15, full_replay_ms=0.03),
        prefill_token_ms=0.002, sched_ms=1.5, async_hidden_frac=0.30, spec_fixed_ms=0.60, spec_per_token_ms=0.12,
        drafters=_drafters(draft_model_weight_ms=0.06), capture_limit_factor=1.0, startup_scale=1.0,
    ),
    # A sparse MoE: each token reads the experts it routes to, so verification batches read more weights;
    # many more kernels per layer (router, permute, grouped GEMMs) make eager steps far dearer.
    "moe": ModelProfile(
        name="moe",
        target=ForwardCost(weight_ms=0.55, token_ms=0.012, launch_ms=10.0, attn_launch_frac=0.20,
                           piecewise_replay_ms=0.25, full_replay_ms=0.03, expert_ms=0.45, expert_touch_p=0.0625),
        prefill_token_ms=0.003, sched_ms=1.5, async_hidden_frac=0.30, spec_fixed_ms=0.60, spec_per_token_ms=0.12,
        drafters=_drafters(draft_model_weight_ms=0.10), capture_limit_factor=0.5, startup_scale=2.5,
    ),
}

#: Acceptance per method. ngram only hits on repetitive prompts; draft models degrade slowly with position.
ACCEPTANCE: dict[str, AcceptanceProfile] = {
    "ngram": AcceptanceProfile(a=0.85, d=0.80),
    "suffix": AcceptanceProfile(a=0.85, d=0.80),
    "draft_model": AcceptanceProfile(a=0.82, d=0.96),
    "eagle": AcceptanceProfile(a=0.72, d=0.92),
    "eagle3": AcceptanceProfile(a=0.80, d=0.93),
    "mtp": AcceptanceProfile(a=0.88, d=0.85),
    "medusa": AcceptanceProfile(a=0.65, d=0.85),
}
#: Prompt lookup on non-repetitive prompts rarely finds a match.
NGRAM_RANDOM_PROMPTS = AcceptanceProfile(a=0.15, d=0.50)
LOOKUP_METHODS = ("ngram", "suffix")


def drafter_cost(model: ModelProfile, method: str | None) -> DrafterCost | None:
    """The model profile's drafter for a speculative method (``None`` without speculation)."""
    if method is None:
        return None
    return model.drafters[method]

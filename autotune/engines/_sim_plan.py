"""What vLLM would run for a configuration, in the simulator (:func:`plan_config`): the configured CUDA-graph mode
and capture sizes after the engine-version rules that silently change them, the model runner, async scheduling, and
whether graph capture would run out of memory. The rules are listed in :mod:`autotune.engines._sim_model`'s
docstring, with the costs and profiles they read (that module); how fast the plan decodes is
:mod:`autotune.engines._sim_speed`'s.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any

from autotune.core.records import Detail, EngineConfig, Resolved
from autotune.core.schedule import SCHEDULE_KEY, SCHEDULE_SINCE
from autotune.engines import _sim_v034 as v034
from autotune.engines._sim_model import (
    COMPILE_MODE,
    DEFAULT_MAX_CAPTURE_SIZE,
    DEFAULT_MODE,
    DRAFT_MODEL_CAPTURE_SHARE,
    DRAFT_MODEL_ON_V2_SINCE,
    FULL,
    FULL_AND_PIECEWISE,
    FULL_DECODE_ONLY,
    FULL_MODES,
    NONE,
    PIECEWISE,
    SPEC_METHODS,
    SPEC_PIECEWISE_SINCE,
    V2_RUNNER_SINCE,
    VLLM_DEFAULT_MAX_NUM_SEQS,
    HardwareProfile,
    ModelProfile,
    Rejected,
)

__all__ = ["Plan", "default_capture_sizes", "parse_version", "plan_config", "round_sizes_for_spec"]



@dataclasses.dataclass(frozen=True)
class Plan:
    """What the simulated worker runs for one configuration (the simulator's view of start-up).

    Attributes:
        mode: Resolved cudagraph mode.
        sizes: Resolved capture sizes (sorted; empty for NONE).
        k: Draft tokens per step (0 when speculation is off).
        method: Speculative method, ``None`` when off.
        max_num_seqs: The engine's sequence limit.
        model_runner: ``v1`` or ``v2``.
        async_scheduling: Whether async scheduling overlaps CPU work with the GPU.
        drafter_full_graphs: Whether the drafter may replay full graphs.
        notes: WARNING lines vLLM would print about changes to the plan.
        oom_error: The capture OOM message, ``None`` if capture fits.
    """

    mode: str
    sizes: tuple[int, ...]
    k: int
    method: str | None
    max_num_seqs: int
    model_runner: str
    async_scheduling: bool
    drafter_full_graphs: bool
    notes: tuple[str, ...]
    oom_error: str | None
    max_num_batched_tokens: int | None = None
    #: The K schedule the worker runs (``[start, end, K]`` rows; ``None``: one K, ``k``, at every batch size).
    schedule: tuple[tuple[int, int, int], ...] | None = None
    #: vLLM >= 0.34 (:mod:`._sim_v034`): decode graphs in requests and prefill graphs in tokens (``None`` before).
    decode_requests: tuple[int, ...] | None = None
    prefill_sizes: tuple[int, ...] | None = None
    breakable: bool = False
    #: vLLM >= 0.34: the decode graphs captured, ``(requests, query length)``, within the decode token budget.
    decode_graphs: tuple[tuple[int, int], ...] = ()
    decode_budget: int | None = None

    def resolved(self, hw: HardwareProfile) -> Resolved:
        """The plan as :class:`Resolved` (what a real engine's start-up would report)."""
        details: dict[str, Any] = {
            Detail.MODEL_RUNNER: self.model_runner,
            Detail.ASYNC_SCHEDULING: self.async_scheduling,
            Detail.ATTENTION_BACKEND: hw.attention_backend,
        }
        if self.method is not None:
            details[Detail.SPEC_METHOD] = self.method
            details[Detail.NUM_SPECULATIVE_TOKENS] = self.k
            if self.schedule is not None or self.decode_requests is not None:  # (0.34: says so when off)
                details[Detail.SPEC_SCHEDULE] = None if self.schedule is None else [list(r) for r in self.schedule]
        engine_args: dict[str, Any] = {"max_num_seqs": self.max_num_seqs}
        if self.max_num_batched_tokens is not None:
            engine_args["max_num_batched_tokens"] = self.max_num_batched_tokens
        details[Detail.ENGINE_ARGS] = engine_args
        if self.decode_requests is not None:
            details.update({Detail.DECODE_CAPTURE_REQUESTS: list(self.decode_requests),
                            Detail.PREFILL_CAPTURE_TOKENS: list(self.prefill_sizes or ()),
                            Detail.DECODE_CAPTURE_MAX_TOKENS: self.decode_budget,
                            Detail.BREAKABLE_CUDAGRAPH: self.breakable})
        return Resolved(cudagraph_mode=self.mode, cudagraph_capture_sizes=self.sizes, compile_mode=COMPILE_MODE,
                        details=details, notes=self.notes)


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.26.0"`` -> ``(0, 26, 0)``; local/pre-release suffixes (``0.26.0rc1+cu130``) are ignored.

    Raises:
        ValueError: no leading ``MAJOR.MINOR`` numbers.
    """
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not match:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in match.groups(default="0"))


def default_capture_sizes(max_num_seqs: int, k: int) -> list[int]:
    """vLLM's default capture sizes: 1, 2, 4, then every 8 up to ``2 * max_num_seqs * (1+K)`` (at most 512).

    Matches the reference: 4 sequences give ``[1,2,4,8]``; with K=3, ``[1,2,4,8,16,24,32]`` before rounding.
    """
    largest = min(DEFAULT_MAX_CAPTURE_SIZE, 2 * max_num_seqs * (1 + k))
    sizes = [s for s in (1, 2, 4) if s <= largest]
    return sizes + list(range(8, largest + 1, 8))


def round_sizes_for_spec(sizes: Sequence[int], k: int) -> list[int]:
    """Round each size up to a multiple of ``1+K`` and drop duplicates, as vLLM does without a log line."""
    step = 1 + k
    return sorted({step * math.ceil(s / step) for s in sizes})



def _bare_mode(configured: Any) -> str | None:
    # vLLM accepts "piecewise" and prints "CUDAGraphMode.PIECEWISE"; compare on the bare upper-case name.
    if configured is None:
        return None
    mode = str(configured).rsplit(".", 1)[-1].upper()
    if mode not in (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE):
        raise Rejected(f"unknown cudagraph_mode {configured!r}")
    return mode


def _check_spec(config: EngineConfig) -> tuple[int, str | None]:
    k = config.num_speculative_tokens
    if k <= 0:
        return 0, None
    method = config.spec_method
    if method is None:
        raise Rejected("speculative_config.method is missing")
    if method not in SPEC_METHODS:
        raise Rejected(f"speculative method {method!r} is not supported; choose one of {', '.join(SPEC_METHODS)}")
    if (config.speculative_config or {}).get(SCHEDULE_KEY) is not None and config.k_schedule is None:
        raise Rejected(f"{SCHEDULE_KEY} must be a list of [range_start, range_end, num_speculative_tokens]")
    return k, str(method)


def _rule_spec_default_capture(hw: HardwareProfile, version: tuple[int, ...], configured: str | None,
                               k: int, mode: str) -> str:
    # The seed note's trap: spec on, capture off, nothing printed. Only when the mode was left to the engine.
    cutoff = hw.spec_default_capture_off_before
    if k and configured is None and cutoff is not None and version < cutoff:
        return NONE
    return mode


def _rule_backend_uniform_batch(hw: HardwareProfile, k: int, mode: str) -> tuple[str, list[str]]:
    # Verification batches have 1+K tokens per sequence; a backend that only captures single-token decode
    # cannot give them full graphs, so vLLM downgrades the mode at start-up and says so.
    if not k or hw.uniform_batch_full_graphs or mode not in FULL_MODES:
        return mode, []
    new_mode = NONE if mode == FULL_DECODE_ONLY else PIECEWISE
    note = (f"WARNING [gpu_model_runner.py] CUDAGraphMode.{mode} is not supported with spec-decode for attention "
            f"backend {hw.attention_backend} (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); "
            f"setting cudagraph_mode={new_mode}")
    return new_mode, [note]


def _rule_model_runner(version: tuple[int, ...], method: str | None) -> tuple[str, bool, bool, list[str]]:
    """Model runner, async scheduling, drafter full graphs, and the notes vLLM prints about them."""
    if version < V2_RUNNER_SINCE:
        return "v1", False, method != "draft_model", []
    if method == "draft_model" and version < DRAFT_MODEL_ON_V2_SINCE:
        notes = [
            "WARNING [gpu_model_runner.py] Model Runner V2 does not yet support speculative method 'draft_model'; "
            "falling back to the V1 model runner.",
            "WARNING [scheduler.py] Async scheduling is disabled: not supported with speculative method "
            "'draft_model'.",
        ]
        return "v1", False, False, notes
    return "v2", True, True, []


def _rule_dynamic_k(config: EngineConfig, k: int, mode: str, runner: str,
                    version: tuple[int, ...]) -> tuple[str, list[str]]:
    """What a K schedule, or FlashInfer with speculation, does to the capture mode (invented rules, shaped to the
    field reports: vLLM #49547, #49548, PR #45953; none measured here).

    * A schedule needs vLLM >= 0.26.0 (rejected before).
    * FlashInfer (``engine_args.attention_backend: FLASHINFER``) with speculation: full modes drop to PIECEWISE
      (FULL_DECODE_ONLY to NONE), with a WARNING.
    * A schedule on the V1 model runner (``draft_model`` before 0.28.0): full graphs with dynamic K need Model Runner
      V2, so full modes drop to PIECEWISE (FULL_DECODE_ONLY to NONE), with a WARNING. V2 captures full graphs for
      every K of the schedule.
    """
    if not k:
        return mode, []
    schedule = config.k_schedule
    if schedule is not None and version < SCHEDULE_SINCE:
        raise Rejected("speculative_config.num_speculative_tokens_per_batch_size needs vLLM >= 0.26.0")
    backend = str(config.engine_args.get("attention_backend") or "").upper()
    if mode in FULL_MODES and backend == "FLASHINFER":
        new_mode = NONE if mode == FULL_DECODE_ONLY else PIECEWISE
        return new_mode, [f"WARNING [cuda_graph.py] FlashInfer does not support full CUDA graphs with speculative "
                          f"decoding; setting cudagraph_mode={new_mode}"]
    if mode in FULL_MODES and schedule is not None and runner == "v1":
        new_mode = NONE if mode == FULL_DECODE_ONLY else PIECEWISE
        return new_mode, [f"WARNING [gpu_model_runner.py] full CUDA graphs with dynamic speculative decoding "
                          f"(num_speculative_tokens_per_batch_size) need Model Runner V2; setting "
                          f"cudagraph_mode={new_mode}"]
    return mode, []


def _capture_oom(hw: HardwareProfile, model: ModelProfile, sizes: Sequence[int], method: str | None) -> str | None:
    if not sizes:
        return None
    limit = hw.capture_limit_tokens * model.capture_limit_factor
    if method == "draft_model":  # the draft model's weights, KV cache and graphs share the memory
        limit *= DRAFT_MODEL_CAPTURE_SHARE
    if max(sizes) > limit:
        return f"CUDA out of memory while capturing graphs for sizes up to {max(sizes)}"
    return None


def plan_config(config: EngineConfig, hw: HardwareProfile, model: ModelProfile, version: tuple[int, ...]) -> Plan:
    """Apply vLLM's start-up rules to ``config``: what the worker would actually run.

    Raises:
        Rejected: vLLM would refuse the configuration (unknown speculative method, ...).
    """
    k, method = _check_spec(config)
    max_num_seqs = int(config.engine_args.get("max_num_seqs", VLLM_DEFAULT_MAX_NUM_SEQS))
    configured = _bare_mode(config.cudagraph_mode)
    mode = configured if configured is not None else DEFAULT_MODE
    if config.engine_args.get("enforce_eager"):
        mode = NONE
    mode = _rule_spec_default_capture(hw, version, configured, k, mode)
    mode, notes = _rule_backend_uniform_batch(hw, k, mode)
    runner, async_scheduling, drafter_full, runner_notes = _rule_model_runner(version, method)
    if version >= v034.V034:  # Model Runner V1 is gone: no fallback, whatever the method
        runner, async_scheduling, drafter_full, runner_notes = "v2", True, True, []
    mode, dynamic_notes = _rule_dynamic_k(config, k, mode, runner, version)
    notes += dynamic_notes
    schedule = config.k_schedule if k else None
    sizes: list[int] = []
    split: dict[str, Any] = {}
    if version >= v034.V034:  # decode graphs in requests, prefill graphs in tokens (_sim_v034)
        try:
            capture, schedule_on, v034_notes = v034.plan_v034(config, k, method, mode, max_num_seqs, schedule)
        except v034.Rejected034 as exc:
            raise Rejected(str(exc)) from None
        mode, sizes, schedule, notes = capture.mode, list(capture.sizes), schedule if schedule_on else None, [
            *notes, *capture.notes, *v034_notes]
        split = {"decode_requests": capture.decode, "prefill_sizes": capture.prefill, "decode_graphs": capture.graphs,
                 "breakable": v034.breakable(config, capture.mode), "decode_budget": capture.decode_budget}
    elif v034.split_fields(config):
        raise Rejected(f"compilation_config.{v034.split_fields(config)[0]} is not a field of vLLM "
                       f"{'.'.join(map(str, version))}'s CompilationConfig (it came in 0.34.0)")
    elif mode != NONE:
        sizes = list(config.capture_sizes or default_capture_sizes(max_num_seqs, k))
        if k and mode in FULL_MODES and schedule is None:  # (a schedule captures each K's batches: not rounded)
            sizes = round_sizes_for_spec(sizes, k)
            if version >= SPEC_PIECEWISE_SINCE:
                mode, sizes = PIECEWISE, sorted({8 * math.ceil(s / 8) for s in sizes})
    return Plan(
        mode=mode, sizes=tuple(sorted(sizes)), k=k, method=method, max_num_seqs=max_num_seqs, model_runner=runner,
        async_scheduling=async_scheduling, drafter_full_graphs=drafter_full, notes=tuple(notes + runner_notes),
        oom_error=_capture_oom(hw, model, sizes, method),
        max_num_batched_tokens=(None if config.engine_args.get("max_num_batched_tokens") is None
                                else int(config.engine_args["max_num_batched_tokens"])),
        schedule=None if schedule is None else schedule.entries, **split,
    )

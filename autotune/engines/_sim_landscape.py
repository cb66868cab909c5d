"""Random landscapes for the ``sim`` engine: a family of engines drawn from a seed, for checking that the tuner
is right for landscapes it was not built on.

``profile: random`` with ``landscape_seed: N`` draws one landscape. It deliberately does *not* reuse the
physics of :mod:`autotune.engines._sim_model` (launch overhead, padding, acceptance decay with those constants):
a tuner tuned to that model's ``gb10``/``h200`` profiles should meet shapes it has never seen. What it keeps is
what any engine of this kind has:

* **Effects per mode**, drawn per landscape: eager (NONE) well below the graph modes, the graph modes in a random
  order; a step whose batch (``max_num_seqs * (1+K)`` tokens) exceeds the largest captured size runs eagerly.
* **Capture sizes**: padding to the next captured size costs a random share; each resolved size list has its
  own small effect.
* **Speculation per method**: a random acceptance profile (first-token rate and decay with position) and a
  random drafting cost per token, dearer when the step runs eagerly, so the best K and the best method vary and
  some methods lose to no speculation at all.
* **Interactions**: a random term per (resolved mode, method) pair.
* **Silent changes**, each rule on or off per landscape: speculation with the default mode resolves to NONE;
  full modes downgrade with speculation (FULL/FULL_AND_PIECEWISE to PIECEWISE, FULL_DECODE_ONLY to NONE); capture
  sizes round up to multiples of ``1+K``; draft models run out of memory above a capture size.
* **Noise**: restart sd 2-8%, a shared (machine drift) share, pass noise, and a cold first start that is either
  no slower, a little slower or 30-60% slower.

Truth depends only on the resolved plan, so configurations the engine resolves alike are equally fast, as on a
real engine. All draws come from ``random.Random`` seeded by the landscape seed: the same seed is the same
landscape on every machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Mapping

from autotune.engines import _sim_model as model
from autotune.engines import _sim_plan as sim_plan
from autotune.engines import _sim_speed as speed
from autotune.core.records import EngineConfig, Workload

__all__ = ["Landscape", "draw_landscape"]

_GRAPH_MODES = (model.PIECEWISE, model.FULL, model.FULL_DECODE_ONLY, model.FULL_AND_PIECEWISE)
#: Cold-start kinds and their throughput loss range: none, mild, and as slow as the first H200 starts seen.
_COLD_KINDS = ((0.0, 0.0), (0.03, 0.15), (0.30, 0.60))


@dataclasses.dataclass(frozen=True)
class _Spec:
    """One speculative method on this landscape."""

    accept: float  # probability that draft token 1 is accepted
    decay: float  # conditional acceptance falls by this factor per position
    cost_per_token: float  # drafting + verification cost per draft token, relative to a decode step
    fixed_cost: float  # per-step cost of speculating at all
    eager_factor: float  # drafting cost multiplier when the target step runs eagerly


@dataclasses.dataclass(frozen=True)
class Landscape:
    """One drawn landscape: rules, effects and the machine's noise (a :class:`model.HardwareProfile`)."""

    seed: int
    hardware: model.HardwareProfile
    base_tok_s: float
    mode_effect: Mapping[str, float]
    pad_cost: float
    spec: Mapping[str, _Spec]
    interaction_sd: float
    size_effect_sd: float
    spec_default_to_none: bool
    downgrade_full_with_spec: bool
    round_sizes_with_spec: bool
    draft_model_size_limit: int | None

    # -- what the engine runs ----------------------------------------------------------------------------
    def plan(self, config: EngineConfig) -> sim_plan.Plan:
        """The resolved plan after this landscape's rules (same shape as the physics model's)."""
        k = config.num_speculative_tokens
        method = config.spec_method if k > 0 else None
        if k > 0 and method not in model.SPEC_METHODS:
            raise model.Rejected(f"speculative method {method!r} is not supported")
        max_num_seqs = int(config.engine_args.get("max_num_seqs", model.VLLM_DEFAULT_MAX_NUM_SEQS))
        batched = config.engine_args.get("max_num_batched_tokens")
        configured = None if config.cudagraph_mode is None else str(config.cudagraph_mode).upper()
        mode = configured or model.DEFAULT_MODE
        notes: list[str] = []
        if k and configured is None and self.spec_default_to_none:
            mode = model.NONE  # silently, like the GB10 trap
        if k and self.downgrade_full_with_spec and mode in model.FULL_MODES:
            new = model.NONE if mode == model.FULL_DECODE_ONLY else model.PIECEWISE
            notes.append(f"WARNING cudagraph_mode {mode} is not supported with speculation; using {new}")
            mode = new
        sizes: list[int] = []
        if mode != model.NONE:
            sizes = list(config.capture_sizes or sim_plan.default_capture_sizes(max_num_seqs, k))
            if k and self.round_sizes_with_spec and mode in model.FULL_MODES:
                sizes = sim_plan.round_sizes_for_spec(sizes, k)
        oom = None
        if method == "draft_model" and self.draft_model_size_limit is not None and sizes \
                and max(sizes) > self.draft_model_size_limit:
            oom = f"CUDA out of memory while capturing graphs for sizes up to {max(sizes)}"
        return sim_plan.Plan(mode=mode, sizes=tuple(sorted(sizes)), k=k, method=method, max_num_seqs=max_num_seqs,
                          model_runner="v2", async_scheduling=True, drafter_full_graphs=True, notes=tuple(notes),
                          oom_error=oom, max_num_batched_tokens=None if batched is None else int(batched))

    def throughput(self, plan: sim_plan.Plan, workload: Workload) -> float:
        """True steady-state tok/s of ``plan``: a function of the resolved plan only."""
        b = speed.batch_size(plan, workload)
        n = b * (1 + plan.k)
        covering = [s for s in plan.sizes if s >= n]
        eager = plan.mode == model.NONE or not covering
        log_tps = self.mode_effect[model.NONE if eager else plan.mode]
        if not eager:
            log_tps -= self.pad_cost * (min(covering) / n - 1.0)
            log_tps += self._draw("sizes", plan.mode, plan.sizes, sd=self.size_effect_sd)
        if plan.k and plan.method is not None:
            s = self.spec[plan.method]
            accepted, p = 1.0, 1.0
            for j in range(plan.k):
                p *= s.accept * s.decay ** j
                accepted += p
            cost = s.fixed_cost + s.cost_per_token * plan.k * (s.eager_factor if eager else 1.0)
            log_tps += math.log(accepted) - math.log(1.0 + cost)
            log_tps += self._draw("interaction", "NONE" if eager else plan.mode, plan.method, sd=self.interaction_sd)
        return self.base_tok_s * math.exp(log_tps)

    def _draw(self, *parts: object, sd: float) -> float:
        digest = hashlib.sha256("\x1f".join(map(str, (self.seed, *parts))).encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big")).gauss(0.0, sd)


def draw_landscape(seed: int, shift: float = 0.0) -> Landscape:
    """The landscape of ``seed`` (see the module docstring for what is drawn); ``shift`` > 0 moves it within its
    family (:func:`shifted`)."""
    drawn = _draw(seed)
    return drawn if not shift else shifted(drawn, shift)


def shifted(land: Landscape, shift: float) -> Landscape:
    """``land`` moved by a relative ``shift`` (log-scale sd, e.g. 0.1): every mode effect, the base speed and each
    method's acceptance and drafting cost take an independent draw, the rules stay. A related landscape, as the
    next engine release or a sibling model would be: ``tune --warm-start``'s benchmark starts from one."""
    rng = random.Random(f"autotune-landscape-shift-{land.seed}-{shift}")
    mode_effect = {m: v + rng.gauss(0.0, shift) for m, v in land.mode_effect.items()}
    spec = {m: dataclasses.replace(s, accept=min(0.97, s.accept * math.exp(rng.gauss(0.0, shift))),
                                   cost_per_token=s.cost_per_token * math.exp(rng.gauss(0.0, shift)))
            for m, s in land.spec.items()}
    return dataclasses.replace(land, mode_effect=mode_effect, spec=spec,
                               base_tok_s=land.base_tok_s * math.exp(rng.gauss(0.0, shift)))


def _draw(seed: int) -> Landscape:
    rng = random.Random(f"autotune-landscape-{seed}")
    graph = {m: -rng.uniform(0.0, 0.3) for m in _GRAPH_MODES}
    mode_effect = {model.NONE: -rng.uniform(0.25, 1.4), **graph}
    spec = {}
    for method in model.SPEC_METHODS:
        spec[method] = _Spec(accept=rng.uniform(0.25, 0.92), decay=rng.uniform(0.55, 0.98),
                             cost_per_token=rng.uniform(0.02, 0.40), fixed_cost=rng.uniform(0.0, 0.25),
                             eager_factor=rng.uniform(1.0, 3.0))
    noise_sd = rng.uniform(0.02, 0.08)
    cold = rng.choice(_COLD_KINDS)
    init_s = rng.uniform(10.0, 60.0)
    warm_compile = rng.uniform(3.0, 30.0)
    hardware = dataclasses.replace(
        model.HARDWARE["h200"], name="random", gpu_name=f"simulated random landscape {seed}",
        noise_sd=noise_sd, shared_noise_share=rng.uniform(0.0, 0.5), pass_noise_sd=rng.uniform(0.004, 0.02),
        cold_slowdown=cold, first_pass_slowdown=(0.05, rng.uniform(0.1, 0.5)),
        init_s=init_s, compile_warm_s=warm_compile, compile_cold_s=warm_compile * rng.uniform(1.5, 6.0),
        capture_s=rng.uniform(0.1, 1.5), shutdown_s=rng.uniform(1.0, 6.0),
    )
    return Landscape(
        seed=seed, hardware=hardware, base_tok_s=rng.uniform(200.0, 4000.0), mode_effect=mode_effect,
        pad_cost=rng.uniform(0.0, 0.2), spec=spec, interaction_sd=rng.uniform(0.0, 0.12),
        size_effect_sd=rng.uniform(0.0, 0.03),
        spec_default_to_none=rng.random() < 0.3, downgrade_full_with_spec=rng.random() < 0.4,
        round_sizes_with_spec=rng.random() < 0.5,
        draft_model_size_limit=rng.choice((None, None, 16, 32, 48)),
    )

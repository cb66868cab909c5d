"""Unified memory for the ``sim`` engine: a simulated GB10 host whose one memory pool the engine, the page cache and
the operating system share, read by the *real* guard and settle of :mod:`autotune.machine`.

What it models, per start of the simulated engine (GiB and simulated seconds; every constant is in
:class:`UnifiedMemory` and illustrative, chosen to reproduce the field reports' shapes, not measured on a GB10):

* **The budget.** The engine takes ``gpu_memory_utilization x MemTotal`` (vLLM's budget on an integrated GPU):
  weights, the profile run's activations and the KV cache fill it.
* **Graph memory on top of it.** The KV cache is sized before graph capture and leaves graph memory out (vLLM
  before its estimate, or a wrong estimate: #44740's -35 GiB), so capture adds the graphs' memory on top of the
  budget. Graph memory grows with what is captured: per graph a fixed pool plus a share per captured token
  (``max_num_seqs`` and ``num_speculative_tokens`` set the default sizes; speculation rounds them up), for the
  target and for a drafter that runs a forward. Configurations whose graphs outgrow ``MemTotal x (1 - utilization)``
  less what the OS holds drive MemAvailable under the floor, or to where the host wedges. Which ones do follows
  from the landscape, not from a list.
* **Page cache.** Loading weights that are not in the page cache adds them to Cached, and vLLM's profiler charges a
  share of that growth against the KV budget, so a start that loads from disk gets a smaller KV cache than a warm
  one (NVIDIA/xr-ai #462). Before each start the host applies the page-cache policy the engine resolved, as
  :class:`~autotune.machine.StartSafety` does on a real machine (``engine.page_cache``; the default on unified
  memory is ``warm``): ``warm`` drops the cache and reads the target's weights, so every start finds them cached
  and only a drafter's weights are loaded from disk (the same KV cache at every start of one configuration);
  ``drop`` empties it, so every start loads from disk; ``keep`` leaves it as the last start did: the study's first
  start loads from disk, and between starts a small, seeded share of the cached weights is evicted, so warm starts
  drift a little.
* **Memory comes back late.** After the engine exits (or is killed), what it held stays taken for
  ``release_delay_s`` and then returns at ``release_gib_per_s`` (#56830): the next start's settle waits for it.
* **The wedge.** If MemAvailable falls under ``wedge_gib`` at any moment, the host stops (#46307: SSH gone, a power
  cycle): :class:`HostWedged`, and nothing more runs on this host. The guard's floor (8.5 GiB by default on this
  host) lies above it, so with the guard on the start is killed first and the restart fails with the figures.

The guard samples the host every 0.25 s of simulated time while its memory moves (loading, KV allocation,
capture, exit); over a stretch where nothing moves (compile, the timed passes) one sample stands for the stretch,
which keeps a restart to about a millisecond of real time without changing what the guard can see.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import random
from collections.abc import Sequence
from typing import Any

from autotune.core import facts as fact
from autotune.engines import _sim_model as model
from autotune.engines import _sim_plan as sim_plan
from autotune.engines import _sim_speed as speed
from autotune.engines._errors import EngineError
from autotune.machine import GIB, MachineState, MemInfo, StartSafety

__all__ = ["HostWedged", "MemoryPlan", "SimulatedHost", "StartOutcome", "UnifiedMemory", "memory_plan", "plan_memory",
           "start_phases"]

#: vLLM's default ``gpu_memory_utilization``.
DEFAULT_UTILIZATION = 0.9


class HostWedged(EngineError):
    """The simulated host ran out of memory with no guard to stop the engine: it is gone, the study cannot go on."""


@dataclasses.dataclass(frozen=True)
class UnifiedMemory:
    """Constants of a simulated unified-memory host (GiB, seconds). All illustrative (docs/simulator.md).

    Attributes:
        total_gib: MemTotal (a DGX Spark reports 121.7 GiB).
        os_used_gib: What the OS, a desktop and autotune hold while no engine runs.
        idle_cached_gib: Page cache at the study's start, other than the model's weights.
        wedge_gib: MemAvailable under which the host stops ("a few GiB", vllm #46307).
        weights_gib: The target model's weights, per model profile.
        draft_weights_gib: A separately loaded drafter's weights (a 0.6B draft model, an EAGLE head).
        activation_gib: The profile run's activation peak.
        kv_bytes_per_token: KV cache bytes per token, per model profile.
        graph_pool_gib: Memory per captured graph, whatever its size.
        graph_gib_per_token: Memory per captured token of a graph (the target's activations at that size).
        drafter_graph_share: A drafter's graphs cost this share of the target's.
        cold_cache_charge: Share of the page cache a start adds that vLLM's profiler charges to the KV budget.
        warm_evict: Range of the share of cached weights evicted between two starts (seeded per restart).
        release_delay_s: Seconds an exited engine's memory stays taken.
        release_gib_per_s: Rate at which it then comes back.
        kv_alloc_s: Seconds from the profile run to a fully allocated KV cache.
    """

    total_gib: float = 121.7
    os_used_gib: float = 6.0
    idle_cached_gib: float = 2.0
    wedge_gib: float = 4.0
    weights_gib: tuple[tuple[str, float], ...] = (("dense", 2.4), ("moe", 57.0))
    draft_weights_gib: float = 1.2
    activation_gib: float = 2.0
    kv_bytes_per_token: tuple[tuple[str, int], ...] = (("dense", 32 * 1024), ("moe", 96 * 1024))
    graph_pool_gib: float = 0.12
    graph_gib_per_token: float = 0.03
    drafter_graph_share: float = 0.25
    cold_cache_charge: float = 0.3
    warm_evict: tuple[float, float] = (0.0, 0.08)
    release_delay_s: float = 3.0
    release_gib_per_s: float = 4.0
    kv_alloc_s: float = 2.0

    def weights(self, model_profile: str) -> float:
        return dict(self.weights_gib).get(model_profile, max(w for _, w in self.weights_gib))

    def kv_bytes(self, model_profile: str) -> int:
        return dict(self.kv_bytes_per_token).get(model_profile, max(b for _, b in self.kv_bytes_per_token))


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """What one configuration asks of the host (GiB): fixed by its resolved plan, the same at every start.

    Attributes:
        budget: ``gpu_memory_utilization x MemTotal``.
        weights: Target and drafter weights.
        graphs: Graph memory captured on top of the budget.
    """

    budget: float
    weights: float
    graphs: float


def memory_plan(spec: UnifiedMemory, *, utilization: float, model_profile: str, sizes: Sequence[int],
                graphs_per_size: int, drafter_graphs: int, loads_drafter: bool) -> MemoryPlan:
    """The memory a configuration needs: the budget, its weights, and its graphs (pool + per captured token)."""
    per_graph = [spec.graph_pool_gib + spec.graph_gib_per_token * s for s in sizes]
    graphs = sum(per_graph) * (graphs_per_size + spec.drafter_graph_share * drafter_graphs)
    weights = spec.weights(model_profile) + (spec.draft_weights_gib if loads_drafter else 0.0)
    return MemoryPlan(budget=utilization * spec.total_gib, weights=weights, graphs=graphs)


class _Timeline:
    """An engine's memory use over time: piecewise linear between breakpoints ``(t, GiB)``; flat after the last."""

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        self.times = [t for t, _ in points]
        self.values = [v for _, v in points]

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t)
        if i == 0:
            return 0.0
        if i == len(self.times):
            return self.values[-1]
        t0, t1, v0, v1 = self.times[i - 1], self.times[i], self.values[i - 1], self.values[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1

    def breaks(self, a: float, b: float) -> list[float]:
        return self.times[bisect.bisect_right(self.times, a):bisect.bisect_left(self.times, b)]

    def moving(self, t: float) -> bool:
        """Whether memory changes just after ``t``."""
        i = bisect.bisect_right(self.times, t)
        return 0 < i < len(self.times) and self.values[i] != self.values[i - 1]

    def next_break(self, t: float) -> float | None:
        i = bisect.bisect_right(self.times, t)
        return self.times[i] if i < len(self.times) else None


@dataclasses.dataclass
class _Release:
    """Memory an exited engine still holds: ``gib`` from ``since`` on, coming back after a delay."""

    gib: float
    since: float


@dataclasses.dataclass(frozen=True)
class StartOutcome:
    """How one simulated start went on the host.

    Attributes:
        trip_reason: The guard's one-line reason when it killed the engine, else ``None``.
        killed_after_s: Seconds into the start at which it was killed.
        kv_gib, kv_tokens: The KV cache the engine sized (a killed start's too, if it got that far).
        cache_added_gib: Page cache the start's weight loading added.
        facts: The restart's memory facts (:meth:`autotune.machine.StartSafety.restart_facts`, plus KV).
    """

    trip_reason: str | None
    killed_after_s: float | None
    kv_gib: float
    kv_tokens: int
    cache_added_gib: float
    facts: dict[str, Any]


class SimulatedHost:
    """A unified-memory host on a simulated clock: :meth:`meminfo` is the reader the real guard and settle sample,
    :meth:`sleep` advances the clock. Every advance checks whether MemAvailable fell under the wedge level.

    Args:
        spec: The host's constants.
        floor_gib: ``engine.memory_floor_gib`` (``None``: the default floor; ``0``: no floor, the guard only records).
        model_profile: Which weights and KV size per token.
        page_cache: The resolved page-cache policy the host applies to its own page cache before each start
            (``keep``, ``drop`` or ``warm``).
    """

    def __init__(self, spec: UnifiedMemory, floor_gib: float | None, model_profile: str,
                 page_cache: str = "keep") -> None:
        self.spec = spec
        self.model_profile = model_profile
        self.page_cache = page_cache
        self.now = 0.0
        self.weights_cached = 0.0  # the study begins with the model's weights not in the page cache
        self.other_cached = spec.idle_cached_gib  # page cache that is not the model's weights
        self.engine: _Timeline | None = None
        self.engine_started = 0.0
        self.releases: list[_Release] = []
        self.wedged: str | None = None
        self._wedge_context = ""
        # The real machinery, fed by this host: the level the study began with is measured now.
        self.safety = StartSafety(floor_gib, reader=self.meminfo, gpu_reader=None, kernel_log=None,
                                  clock=self.clock, sleep=self.sleep, machine_state=MachineState,
                                  check_host=True, unified=True,
                                  # The simulated host applies the policy to its own page cache (apply_page_cache);
                                  # here it would drop the real machine's cache (as root) at every simulated restart.
                                  page_cache="keep")

    # -- what the machinery reads ------------------------------------------------------------------------
    def clock(self) -> float:
        return self.now

    def held_gib(self, t: float) -> float:
        """Memory the engines hold at ``t``: the running one's, and what exited ones have not given back yet."""
        out = self.engine.at(t - self.engine_started) if self.engine is not None else 0.0
        for r in self.releases:
            back = max(0.0, t - r.since - self.spec.release_delay_s) * self.spec.release_gib_per_s
            out += max(0.0, r.gib - back)
        return out

    def available_gib(self, t: float | None = None) -> float:
        return self.spec.total_gib - self.spec.os_used_gib - self.held_gib(self.now if t is None else t)

    def meminfo(self) -> MemInfo:
        if self.wedged is not None:
            raise HostWedged(self.wedged)
        cached = self.other_cached + self.weights_cached
        return MemInfo(total=int(self.spec.total_gib * GIB), available=int(self.available_gib() * GIB),
                       cached=int(cached * GIB))

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass; the host wedges if MemAvailable goes under the wedge level."""
        end = self.now + max(0.0, seconds)
        # Memory use is linear between the engine's breakpoints and released memory only comes back, so the
        # lowest MemAvailable over the wait is at its end or at a breakpoint inside it (the start was checked
        # by the wait before).
        times = [end]
        if self.engine is not None:
            times += [self.engine_started + t for t in self.engine.breaks(self.now - self.engine_started,
                                                                          end - self.engine_started)]
        lowest_t = min(times, key=self.available_gib) if len(times) > 1 else end
        if self.available_gib(lowest_t) < self.spec.wedge_gib:
            self.now = lowest_t
            # With a floor set, the guard was on: the fall outran its samples (a fall of tens of GiB a second, as
            # GB10 users report), which "no memory guard" would misstate.
            guard = (f"faster than the memory guard's samples could catch it (floor {self.safety.floor / GIB:.1f} GiB)"
                     if self.safety.floor > 0 else "with no memory guard to stop it (no floor set)")
            self.wedged = (f"sim engine: host wedged: MemAvailable fell to {self.available_gib(lowest_t):.1f} GiB "
                           f"(the host stops under {self.spec.wedge_gib:g} GiB) {lowest_t - self.engine_started:.1f} s "
                           f"into the start of {self._wedge_context} {guard}; the simulated host is gone and "
                           "nothing more can run: a real GB10 would need a power cycle (keep engine.memory_floor_gib above "
                           f"{self.spec.wedge_gib:g} or unset)")
            raise HostWedged(self.wedged)
        self.now = end
        if self.releases:  # releases that are complete no longer matter
            self.releases = [r for r in self.releases
                             if r.gib > (self.now - r.since - self.spec.release_delay_s) * self.spec.release_gib_per_s]

    def lowest_available(self, need: MemoryPlan) -> float:
        """Ground truth for tests and benchmarks: the lowest MemAvailable (GiB) a start of ``need`` reaches once
        memory has settled, under the host's page-cache policy (``keep``: with every weight cached, no eviction, the
        lowest of its warm starts). Under the guard's floor, the configuration cannot run safely on this host."""
        spec = self.spec
        cached = {"drop": 0.0, "warm": spec.weights(self.model_profile)}.get(self.page_cache, need.weights)
        added = max(0.0, need.weights - cached)
        kv = max(0.0, need.budget - need.weights - spec.activation_gib - spec.cold_cache_charge * added)
        return spec.total_gib - spec.os_used_gib - (need.weights + spec.activation_gib + kv + need.graphs)

    # -- one start ---------------------------------------------------------------------------------------
    def apply_page_cache(self) -> None:
        """The page-cache policy before a start, on the simulated cache (what :func:`autotune.machine.apply_page_cache`
        does to a real one): ``drop`` empties it, ``warm`` empties it and reads the target's weight files (not a
        drafter's: ``warm`` reads ``engine_args.model``), ``keep`` leaves it."""
        if self.page_cache in ("drop", "warm"):
            self.other_cached = 0.0
            self.weights_cached = self.spec.weights(self.model_profile) if self.page_cache == "warm" else 0.0

    def run_start(self, need: MemoryPlan, *, load_s: float, compile_s: float, capture_s: float, measure_s: float,
                  rng: random.Random, label: str) -> StartOutcome:
        """Settle, then one start inside the real guard: loading, compile, KV allocation, capture, measurement.

        Raises:
            HostWedged: MemAvailable fell under the wedge level (the floor is off, or under the wedge level).
            autotune.machine.MemoryNotSettled: memory did not come back before the timeout.
        """
        if self.wedged is not None:
            raise HostWedged(self.wedged)
        self._wedge_context = label
        spec = self.spec
        self.apply_page_cache()
        self.safety.settle()
        # Page cache: what loading adds, and the share of it vLLM's profiler charges against the KV budget.
        added = max(0.0, need.weights - self.weights_cached)
        kv = need.budget - need.weights - spec.activation_gib - spec.cold_cache_charge * added
        kv = max(0.0, kv)
        allocated = need.weights + spec.activation_gib + kv
        t_loaded = load_s
        t_profiled = t_loaded + compile_s
        t_allocated = t_profiled + spec.kv_alloc_s
        t_captured = t_allocated + max(capture_s, 0.25)
        t_exit = t_captured + measure_s
        self.engine = _Timeline([(0.0, 0.0), (t_loaded, need.weights), (t_profiled, need.weights),
                                 (t_allocated, allocated), (t_captured, allocated + need.graphs),
                                 (t_exit, allocated + need.graphs)])
        self.engine_started = self.now
        guard = self.safety.guard()
        killed_at: float | None = None
        guard.attach(lambda: None)  # the kill happens below, at the simulated moment of the trip
        elapsed = 0.0  # counted here, not as now - started: a difference of floats can stall just short of the end
        try:
            while True:
                if guard.sample() is not None:
                    killed_at = elapsed
                    break
                if elapsed >= t_exit - 1e-9:
                    break
                step = guard.interval_s
                if not self.engine.moving(elapsed):
                    nxt = self.engine.next_break(elapsed)
                    step = max(step, (t_exit if nxt is None else nxt) - elapsed)
                step = min(step, t_exit - elapsed)
                self.sleep(step)
                elapsed += step
        finally:
            self._exit()
        summary = guard.stop()
        self.weights_cached = min(need.weights, self.weights_cached + added) * (1.0 - rng.uniform(*spec.warm_evict))
        kv_tokens = int(kv * GIB / spec.kv_bytes(self.model_profile))
        facts = dict(self.safety.restart_facts())
        facts.update({fact.PAGE_CACHE: self.page_cache, fact.KV_GIB: round(kv, 3), fact.KV_TOKENS: kv_tokens,
                      fact.PAGE_CACHE_ADDED_GIB: round(added, 3)})
        return StartOutcome(trip_reason=None if summary.trip is None else summary.trip.reason(),
                            killed_after_s=killed_at, kv_gib=kv, kv_tokens=kv_tokens, cache_added_gib=added,
                            facts=facts)

    def _exit(self) -> None:
        """The engine stops (or is killed) now: what it holds comes back with the lag."""
        if self.engine is None:
            return
        held = self.engine.at(self.now - self.engine_started)
        self.engine = None
        if held > 0:
            self.releases.append(_Release(held, self.now))


def restart_rng(*parts: Any) -> random.Random:
    """A generator seeded from ``parts`` (stable across processes), apart from the engine's own draws so that a
    run with unified memory measures the same throughputs as one without."""
    digest = hashlib.sha256("\x1f".join(map(str, ("memory", *parts))).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def plan_memory(spec: UnifiedMemory, plan: sim_plan.Plan, profile: model.ModelProfile,
                utilization: float) -> MemoryPlan:
    """:func:`memory_plan` for a simulated engine's resolved plan."""
    per_size, drafter_graphs, loads = speed.graph_counts(plan, profile)
    return memory_plan(spec, utilization=utilization, model_profile=profile.name, sizes=plan.sizes,
                       graphs_per_size=per_size, drafter_graphs=drafter_graphs, loads_drafter=loads)


def start_phases(startup_s: float, plan: sim_plan.Plan, hw: model.HardwareProfile, profile: model.ModelProfile,
                 cold: bool) -> tuple[float, float, float]:
    """The start-up's seconds split into loading, compile (with the profile run) and capture, in proportion to
    the model's own pieces (:func:`autotune.engines._sim_speed.startup_phases`)."""
    pieces = speed.startup_phases(plan, hw, profile, cold)
    load, compile_s, capture = pieces["load"], pieces["compile"], pieces["capture"]
    whole = load + compile_s + capture or 1.0
    return startup_s * load / whole, startup_s * compile_s / whole, startup_s * capture / whole


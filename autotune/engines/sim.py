"""``sim``: a seeded, deterministic simulated vLLM that never touches a GPU (and never sleeps unless asked to).

The performance model and its constants live in :mod:`autotune.engines._sim_model`; this module turns a true
steady-state throughput into what a real restart reports: restart-to-restart noise (partly shared by every
configuration at one seed, like machine drift), slow cold first starts decided by a compile-cache marker in
``cache_dir``, a slow first pass in every process, pass-to-pass noise, start-up and wall time in pretend seconds.
With ``time_scale`` > 0 a restart also takes ``wall_s * time_scale`` real seconds, so several worker processes
overlap as real engines would (the multi-worker tests kill them mid-restart; ``docs/scaling.md``).

:meth:`SimEngine.true_throughput` exposes the noiseless truth for tests and benchmarks only: nothing autotune shows
about real hardware may come from it. See ``docs/simulator.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.engines import _sim_landscape as landscapes
from autotune.engines import _sim_memory as memory
from autotune.engines import _sim_model as model
from autotune.engines import _sim_plan as sim_plan
from autotune.engines import _sim_speed as speed
from autotune.engines._sim_passes import simulate_passes
from autotune.engines._sim_schedule import at_level
from autotune.engines.drift import PRESETS as DRIFT_PRESETS
from autotune.engines.drift import DriftNoise, PassChain
from autotune.core import facts as F
from autotune.core.confine import open_confined
from autotune.core.failure import FailureKind
from autotune.engines._base import EngineBackend, EngineError
from autotune.engines._options import OptionValue, SimOptions
from autotune.engines._sim_memory import HostWedged
# The vLLM runner's latency summary (stdlib only), so simulated and real restarts report the same figures.
from autotune.engines.vllm._dataset import latency_summary, request_timing
from autotune.engines.vllm.vocabulary import Vocabulary, recorded
from autotune.machine import GIB, MemoryNotSettled, plan_page_cache
from autotune.core.records import (GOODPUT_METRICS, EngineConfig, EngineFacts, LevelResult, Resolved, RestartResult,
                              RestartStatus, Workload, combine_latency)

__all__ = ["HostWedged", "SimEngine"]

#: The profile that draws its landscape from ``landscape_seed`` instead of using the physics model's constants.
RANDOM_PROFILE = SimOptions.RANDOM
#: Directory under ``cache_dir`` that holds one marker file per compiled configuration.
COMPILE_CACHE_DIR = "sim-compile-cache"


def _rng(*parts: Any) -> random.Random:
    """A generator seeded from ``parts`` (stable across processes, unlike ``hash()``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class SimEngine(EngineBackend):
    """A simulated vLLM: seeded, deterministic, thousands of restarts per second.

    Args:
        cache_dir: Where compile-cache markers go; the first start of a configuration without a marker is cold.
            ``None`` keeps the markers in memory for the engine's lifetime.
        profile: Hardware profile: ``h200``, ``gb10``, ``flat`` (no configuration beats the baseline), or
            ``random``: a landscape drawn from ``landscape_seed`` (:mod:`autotune.engines._sim_landscape`).
        model_profile: ``dense`` (small dense model) or ``moe`` (sparse mixture of experts).
        engine_version: The simulated vLLM version; the start-up rules are keyed on it.
        noise: Restart-to-restart relative sd (default: the hardware profile's).
        time_scale: Real seconds slept per simulated second of each restart's wall time (default 0: none).
        landscape_seed: With ``profile: random``, which landscape of the family (an integer; default 0).
        drift: ``off`` (default: restarts independent) or a drifting machine's preset (``h100``,
            :mod:`autotune.engines.drift`): the level moves in the simulator's own clock, the sum of its restarts'
            wall seconds, so restarts close in time correlate; the preset's noise replaces the profile's.
        drift_seed: With ``drift``: which path the machine's level takes (an integer; default 0).

    Raises:
        EngineError: an unknown option or value, naming ``engine.<key>`` and the valid choices.
    """

    name = "sim"
    #: The options model (:mod:`autotune.engines._options`); an engine's ``settings``.
    Settings = SimOptions

    def __init__(self, cache_dir: str | None = None, **options: OptionValue) -> None:
        super().__init__(cache_dir, **options)
        self.settings: SimOptions = SimOptions.parse(options)
        opts = self.settings
        self.landscape: landscapes.Landscape | None = None
        if opts.profile == RANDOM_PROFILE:
            self.landscape = landscapes.draw_landscape(opts.landscape_seed, opts.landscape_shift)
            self.hardware = self.landscape.hardware
        else:
            self.hardware = model.HARDWARE[opts.profile]
        self.model = model.MODELS[opts.model_profile]
        self.engine_version = opts.engine_version
        self.version = sim_plan.parse_version(opts.engine_version)
        self.noise_sd = self.hardware.noise_sd if opts.noise is None else opts.noise
        #: The drifting machine (None: off) and the simulated wall clock its level moves in (seconds).
        self.drift: DriftNoise | None = None
        self.clock_s = 0.0
        if opts.drift != "off":
            params = DRIFT_PRESETS[opts.drift]
            if opts.noise is not None:  # an explicit noise sets the per-restart part on top of the machine's level
                params = dataclasses.replace(params, restart_sd=opts.noise)
            self.drift = DriftNoise(params, [opts.drift_seed, _rng("drift", opts.drift).getrandbits(32)])
        self.time_scale = opts.time_scale
        #: The simulated unified-memory host, read by the real memory guard and settle (None: not unified).
        self.host = _host(opts, self.hardware, self.model.name)
        #: How a restart's scaled wall time passes; the scaling benchmark swaps in a simulated clock.
        self.sleep: Callable[[float], None] = time.sleep
        self._compiled: set[str] = set()
        self._plans: dict[str, sim_plan.Plan] = {}
        self._steady: dict[tuple[str, Workload], float] = {}
        self._latency_base: dict[tuple[int, Workload], tuple[dict[str, float], list[dict[str, Any]], float]] = {}

    # -- public helpers for tests and benchmarks -------------------------------------------------------------
    def resolve(self, config: EngineConfig) -> Resolved:
        """What the simulated engine would run for ``config`` (after the engine-version rules).

        Raises:
            autotune.engines._sim_model.Rejected: vLLM would refuse the configuration.
        """
        return self._plan(config).resolved(self.hardware)

    def true_throughput(self, config: EngineConfig, workload: Workload) -> float | None:
        """The configuration's true mean steady-state tok/s: no noise, no cold start, no warm-up.

        For tests and benchmarks only; nothing shown to users about real hardware comes from it.
        Returns ``None`` when the configuration cannot run (capture OOM, or vLLM would reject it).
        """
        plan = self._runnable_plan(config)
        if plan is None:
            return None
        return workload.combine([self._steady_tok_s(plan, config, workload.at(c)) for c in workload.levels])

    def true_value(self, config: EngineConfig, workload: Workload) -> float | None:
        """The configuration's true value under the workload's objective and load levels (tok/s or goodput).

        For tests and benchmarks only; ``None`` when the configuration cannot run.
        """
        if workload.objective != "goodput":
            return self.true_throughput(config, workload)
        plan = self._runnable_plan(config)
        if plan is None:
            return None
        values = []
        for c in workload.levels:
            at = workload.at(c)
            steady = self._steady_tok_s(plan, config, at)
            values.append(self._latency(plan, config, at, [steady], steady).get("goodput", 0.0))
        return workload.combine(values)

    def true_lowest_available_gib(self, config: EngineConfig) -> float | None:
        """With unified memory: the lowest MemAvailable (GiB) a settled start of ``config`` drives the simulated
        host to (below the guard's floor it cannot run safely; :meth:`memory_floor_gib`). For tests and benchmarks
        only; ``None`` without a simulated host or when the configuration cannot run."""
        plan = self._runnable_plan(config)
        if self.host is None or plan is None:
            return None
        utilization = float(config.engine_args.get("gpu_memory_utilization", memory.DEFAULT_UTILIZATION))
        return self.host.lowest_available(memory.plan_memory(self.host.spec, plan, self.model, utilization))

    def memory_floor_gib(self) -> float | None:
        """The guard's floor on the simulated host (GiB; ``None`` without one)."""
        return None if self.host is None else self.host.safety.floor / GIB

    def _runnable_plan(self, config: EngineConfig) -> sim_plan.Plan | None:
        """The configuration's plan, or ``None`` when it cannot run (vLLM rejects it, or capture runs out of memory)."""
        try:
            plan = self._plan(config)
        except model.Rejected:
            return None
        return None if plan.oom_error else plan

    def true_latency(self, config: EngineConfig, workload: Workload) -> dict[str, float] | None:
        """The configuration's noiseless latency figures (``tpot_p99_ms``...): what a warm restart running at its
        steady throughput reports. For tests and benchmarks only; ``None`` when the configuration cannot run."""
        plan = self._runnable_plan(config)
        if plan is None:
            return None
        levels = []
        for c in workload.levels:
            at = workload.at(c)
            steady = self._steady_tok_s(plan, config, at)
            levels.append(self._latency(plan, config, at, [steady], steady))
        return levels[0] if len(levels) == 1 else combine_latency(levels, workload)

    # -- EngineBackend -------------------------------------------------------------------------------------
    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        """One simulated restart: start-up, warm-up until settled, ``workload.timed_passes`` timed passes."""
        result = self._restart(config, workload, restart=restart, seed=seed)
        self.clock_s += result.wall_s or 0.0  # the drifting machine's clock: restarts run back to back
        if self.time_scale and result.wall_s:
            self.sleep(result.wall_s * self.time_scale)
        return result

    def _restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        try:
            plan = self._plan(config)
        except model.Rejected as exc:
            return RestartResult.failure(RestartStatus.FAILED, f"sim engine: vLLM rejected the config: {exc}",
                                         restart=restart, seed=seed, wall_s=self.hardware.init_s, log_tail=str(exc))
        # Every draw comes from these two generators in a fixed order, so equal inputs give equal results.
        rng = _rng("restart", config.key(), restart, seed, self.hardware.name, self.model.name, self.engine_version)
        machine = _rng("machine", seed, self.hardware.name, self.model.name, self.engine_version)
        cold = self._start_is_cold(config)
        jitter = _jitter(rng)
        startup = {k: v * jitter for k, v in speed.startup_phases(plan, self.hardware, self.model, cold).items()}
        drifting = self._drifting(rng, sum(startup.values()))
        if drifting is not None:  # a slow machine starts slowly too (issue 41: init is CPU work)
            startup = {k: v * drifting[1] for k, v in startup.items()}
        startup_s = sum(startup.values())
        resolved = plan.resolved(self.hardware)
        if plan.oom_error:
            # Capture happens at the end of start-up: the process dies before it is ready.
            return RestartResult.failure(
                RestartStatus.FAILED, plan.oom_error, restart=restart, seed=seed, resolved=resolved, cold=cold,
                wall_s=startup_s, log_tail="\n".join((*plan.notes, f"torch.OutOfMemoryError: {plan.oom_error}")),
            )
        factor = self._restart_factor(rng, machine) if drifting is None else drifting[0]
        cold_factor = 1.0 - rng.uniform(*self.hardware.cold_slowdown)
        if cold:
            factor *= cold_factor
        # One process measures every load level in turn: the restart's noise and coldness are shared by them.
        warmup: list[float] = []
        timed: list[float] = []
        warmup_s: list[float] = []
        timed_s: list[float] = []
        levels = []
        for concurrency in workload.levels:
            at = workload.at(concurrency) if len(workload.levels) > 1 else workload
            steady = self._steady_tok_s(plan, config, at)
            passes = simulate_passes(steady * factor, rng, at, self.hardware, config.num_speculative_tokens > 0,
                                     self.warmup_noise.prior(), None if drifting is None else drifting[2])
            warmup += passes.warmup
            timed += passes.timed
            warmup_s += passes.warmup_s
            timed_s += passes.timed_s
            levels.append(LevelResult(concurrency, tuple(passes.timed), self._latency(plan, config, at, passes.timed,
                                                                                     steady)))
        wall_s = startup_s + self.hardware.shutdown_s + sum(warmup_s) + sum(timed_s)
        # The simulator models start-up as load, compile and capture; it has no launch or import of its own.
        facts: dict[str, F.FactValue] = {**F.phase_facts(**startup, warmup=sum(warmup_s), timed=sum(timed_s)),
                 F.WARMUP_PASSES: len(warmup), F.PASS_ROUNDS: passes.rounds, F.WARMUP_RULE: passes.stop}
        accept = self._accept_len(config, workload, rng)
        if self.host is not None:
            started = self._start_on_host(config, plan, cold, startup_s, wall_s - startup_s - self.hardware.shutdown_s,
                                          restart, seed)
            if started.trip_reason is not None:
                return RestartResult.failure(
                    RestartStatus.FAILED, started.trip_reason, failure_kind=FailureKind.GUARD, restart=restart,
                    seed=seed, resolved=resolved,
                    cold=cold, wall_s=(started.killed_after_s or 0.0) + self.hardware.shutdown_s,
                    log_tail=started.trip_reason, facts=started.facts)
            facts = {**facts, **started.facts}
        return RestartResult(
            status=RestartStatus.OK, restart=restart, seed=seed, passes_tok_s=tuple(timed), warmup_tok_s=tuple(warmup),
            passes_s=tuple(timed_s), facts=facts,
            startup_s=startup_s, wall_s=wall_s, resolved=resolved, accept_len=accept, cold=cold,
            latency=levels[0].latency if len(levels) == 1 else {}, levels=tuple(levels) if len(levels) > 1 else (),
        )

    def _start_on_host(self, config: EngineConfig, plan: sim_plan.Plan, cold: bool, startup_s: float, measure_s: float,
                       restart: int, seed: int) -> memory.StartOutcome:
        """The start on the simulated unified-memory host: settle, then loading, KV and capture inside the real
        memory guard (raises :class:`HostWedged` when nothing stopped the engine in time)."""
        assert self.host is not None
        utilization = float(config.engine_args.get("gpu_memory_utilization", memory.DEFAULT_UTILIZATION))
        need = memory.plan_memory(self.host.spec, plan, self.model, utilization)
        load_s, compile_s, capture_s = memory.start_phases(startup_s, plan, self.hardware, self.model, cold)
        try:
            return self.host.run_start(need, load_s=load_s, compile_s=compile_s, capture_s=capture_s,
                                       measure_s=measure_s, rng=memory.restart_rng(config.key(), restart, seed),
                                       label=config.label())
        except MemoryNotSettled as exc:
            raise EngineError(f"sim engine: {exc}") from None

    def describe(self) -> EngineFacts:
        """Engine facts for tracking; ``simulated`` marks every number as coming from the model."""
        return EngineFacts(name=self.name, version=self.engine_version, gpu=self.hardware.gpu_name, simulated=True,
                           extra={"profile": self.hardware.name, "model_profile": self.model.name,
                                  **({} if self.landscape is None else {"landscape_seed": self.landscape.seed}),
                                  **({"landscape_shift": self.settings.landscape_shift}
                                     if self.settings.landscape_shift else {}),
                                  **({"drift": self.settings.drift} if self.drift is not None else {})})

    def vocabulary(self) -> Vocabulary:
        """The recorded vocabulary of the simulated vLLM version (no vLLM to ask)."""
        return recorded(self.engine_version)

    # -- internals -----------------------------------------------------------------------------------------
    def _plan(self, config: EngineConfig) -> sim_plan.Plan:
        key = config.key()
        plan = self._plans.get(key)
        if plan is None:
            if self.landscape is not None:
                plan = self.landscape.plan(config)
            else:
                plan = sim_plan.plan_config(config, self.hardware, self.model, self.version)
            self._plans[key] = plan
        return plan

    def _steady_tok_s(self, plan: sim_plan.Plan, config: EngineConfig, workload: Workload) -> float:
        key = (config.key(), workload)
        value = self._steady.get(key)
        if value is None:
            if self.landscape is not None:
                value = self.landscape.throughput(plan, workload)
            else:
                value = speed.steady_throughput(*at_level(plan, config, workload), workload, self.hardware,
                                                self.model)
            self._steady[key] = value
        return value

    def _compile_key(self, config: EngineConfig) -> str:
        # A real compile cache is keyed on the config, the model and the engine build.
        body = f"{config.key()}|{self.hardware.name}|{self.model.name}|{self.engine_version}"
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def _start_is_cold(self, config: EngineConfig) -> bool:
        """True for the first start of a configuration; marks it compiled, as a real compile cache would."""
        key = self._compile_key(config)
        if self.cache_dir is None:
            cold = key not in self._compiled
            self._compiled.add(key)
            return cold
        marker = Path(self.cache_dir) / COMPILE_CACHE_DIR / key
        if marker.exists():
            return False
        # A cache that cannot be written leaves this start cold, and the next one too (as a real engine's would).
        with contextlib.suppress(OSError):
            open_confined(self.cache_dir, os.path.abspath(marker), "a").close()  # its existence is the cache
        return True

    def _drifting(self, rng: random.Random, startup_s: float) -> tuple[float, float, Any] | None:
        """On a drifting machine: the restart's throughput factor (the level when its passes start, plus its own
        part; mean 1 over the machine's path), its start-up factor, and the pass noise of its process."""
        if self.drift is None:
            return None
        p = self.drift.params

        def gauss() -> float:  # the restart's own generator, in its fixed order
            return rng.gauss(0.0, 1.0)

        slowness = self.drift.level(self.clock_s + startup_s) + p.restart_sd * gauss()
        init = self.drift.init_factor(slowness, gauss)
        chain = PassChain(p, gauss)

        def pass_noise(seconds: float) -> float:
            return chain.next(seconds) - p.pass_sd_at(seconds) ** 2 / 2.0

        return math.exp(slowness - (p.level_sd ** 2 + p.restart_sd ** 2) / 2.0), init, pass_noise

    def _restart_factor(self, rng: random.Random, machine: random.Random) -> float:
        """Lognormal restart noise with mean 1: a machine-drift part shared at one seed plus a per-config part."""
        sd = self.noise_sd
        shared = machine.gauss(0.0, sd * math.sqrt(self.hardware.shared_noise_share))
        own = rng.gauss(0.0, sd * math.sqrt(1.0 - self.hardware.shared_noise_share))
        return math.exp(shared + own - sd * sd / 2.0)

    def _latency(self, plan: sim_plan.Plan, config: EngineConfig, workload: Workload, timed: list[float],
                 steady: float) -> dict[str, float]:
        """Request latencies of the timed passes: the wave model's, stretched by how slowly the passes ran.

        The percentiles come from the waves (who queues behind whom); every request of a restart is slowed alike,
        so a restart's figures are the configuration's noiseless ones times its slowness (steady / measured tok/s).
        Computed once per configuration: the simulator must stay fast.
        """
        key = (id(plan), workload)  # plans are cached per configuration for the engine's lifetime
        cached = self._latency_base.get(key)
        if cached is None:
            raw = speed.request_latency_ms(*at_level(plan, config, workload), workload, self.hardware, self.model)
            timings = [request_timing(t / 1000.0, e / 1000.0, workload.output_len, [i / 1000.0])
                       for t, e, i in zip(raw["ttft"], raw["e2el"], raw["itl"])]
            figures = {k: v for k, v in latency_summary(timings, 1.0, {}).items() if k.endswith("_ms")}
            # A random landscape keeps the wave model's shape but its own speed: stretch the waves to match.
            scale = 1.0
            if self.landscape is not None:
                scale = speed.steady_throughput(plan, config, workload, self.hardware, self.model) / steady
            cached = self._latency_base[key] = (figures, timings, scale)
        figures, timings, scale = cached
        tokens = workload.num_prompts * workload.output_len
        pass_s = sum(tokens / x for x in timed) / len(timed)
        slow = scale * steady * pass_s / tokens
        out = {k: v * slow for k, v in figures.items()}
        out["requests"] = float(len(timings) * len(timed))
        out["request_throughput"] = len(timings) / pass_s
        if workload.slo:
            limits: dict[str, float] = {}
            for slo_key, ms in workload.slo:
                metric = slo_key.split("_p", 1)[0]
                if metric in GOODPUT_METRICS:
                    limits[metric] = min(limits.get(metric, math.inf), ms / 1000.0)
            good = sum(1 for t in timings if all(t[m] is None or t[m] * slow <= lim for m, lim in limits.items()))
            out["goodput"] = good / pass_s
        return out

    def _accept_len(self, config: EngineConfig, workload: Workload, rng: random.Random) -> float | None:
        k = config.num_speculative_tokens
        if k <= 0:
            return None
        measured = speed.accept_len(config, workload) * math.exp(rng.gauss(0.0, model.ACCEPT_NOISE_SD))
        return min(measured, 1.0 + k)


def _host(opts: SimOptions, hardware: model.HardwareProfile, model_profile: str) -> memory.SimulatedHost | None:
    # Resolved as a real engine resolves it on unified memory (warm by default); the simulated host may drop its
    # own simulated cache, so the default never falls back to keep for want of root.
    policy = plan_page_cache(opts.page_cache, unified=True, root=True).policy
    # Opt-in (search_spaces/gb10.yaml turns it on): a space written for the throughput landscape alone, and the
    # benchmark's landscapes, keep measuring throughput without a host that can refuse their configurations. It
    # turns on the profile's unified memory: a profile with memory of its own (h200) has none to model.
    if not (opts.unified_memory and hardware.unified_memory):
        return None
    try:
        return memory.SimulatedHost(memory.UnifiedMemory(), opts.memory_floor_gib, model_profile, page_cache=policy)
    except ValueError as exc:  # a floor the simulated host cannot meet (issue 32)
        raise EngineError(f"sim engine: {exc}") from None


def _jitter(rng: random.Random) -> float:
    return math.exp(rng.gauss(0.0, model.STARTUP_JITTER))

"""The machine's checkup before a long study: its facts read once (:class:`HostFacts`), and the rules that judge
them against what the study's engine will ask of it (:class:`EngineDemand`), one :class:`Finding` a check.

``autotune doctor`` prints these lines (and adds its own about the engine's interpreter); the rules are pure, so
they can be checked against any machine's facts, a GB10's included, on a machine without a GPU.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import platform
from pathlib import Path

import psutil

from autotune.machine._gpu import GpuState, driver_version, gpu_states, is_unified_memory
from autotune.machine._meminfo import MachineFileError, MemInfo, gib, read_meminfo
from autotune.machine._pagecache import PageCachePlan, plan_page_cache
from autotune.machine._safety import engine_floor
from autotune.machine._state import cpu_clocks

__all__ = ["CPU_SLOW_FRACTION", "PAGE_CACHE_WARN_FRACTION", "EngineDemand", "Finding", "HostFacts",
           "machine_findings", "read_host_facts"]

#: Above this share of MemTotal the page cache is worth a warning on unified memory: vLLM counts it against the
#: KV budget there, so a cold start gets a smaller cache than a warm one (NVIDIA/xr-ai #462). Empirical.
PAGE_CACHE_WARN_FRACTION = 0.10
#: A CPU under the performance governor whose clock is below this share of its maximum is in a slow state.
CPU_SLOW_FRACTION = 0.70


@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the checkup: ``level`` is ok, note, warn or FIX."""

    level: str
    topic: str
    text: str

    def __str__(self) -> str:
        return f"{self.level:<4}  {self.topic:<12} {self.text}"


@dataclasses.dataclass(frozen=True)
class HostFacts:
    """What the machine says about itself. ``None``: not reported."""

    #: ``None``: the file could not be believed (:attr:`memory_error` says why).
    memory: MemInfo | None
    machine: str
    root: bool
    governors: tuple[str, ...] = ()
    cpu_mhz: float | None = None
    cpu_max_mhz: float | None = None
    gpus: tuple[GpuState, ...] | None = None
    driver: str | None = None
    memory_error: str | None = None

    def unified(self) -> bool:
        """Whether the GPU allocates from host memory (``is_unified_memory`` on these facts)."""
        total = self.memory.total if self.memory is not None else 0
        return is_unified_memory(list(self.gpus) if self.gpus else None, total, self.machine)


@dataclasses.dataclass(frozen=True)
class EngineDemand:
    """What the study's engine will ask of the machine, from its validated options and the space."""

    #: A real engine starts under the memory guard (the simulator does not, so its floor is not a problem).
    guarded: bool
    #: The engine option ``memory_floor_gib`` (``None``: the default floor).
    memory_floor_gib: float | None = None
    #: The engine option ``page_cache`` as given (``None``: the default for this machine).
    page_cache: str | None = None
    #: The model's weights on disk, where the space names a local model.
    weights_bytes: int | None = None
    #: vLLM's ``gpu_memory_utilization`` as the space gives it (checked only when it is a number).
    gpu_memory_utilization: object = None


def read_host_facts() -> HostFacts:
    """Read this machine: memory (a file that cannot be believed is an error kept for its FIX line, issue 44), CPU
    governors and clocks, GPUs, the driver."""
    freqs = _cpu_freqs()
    states = gpu_states()
    try:
        memory, memory_error = read_meminfo(), None
    except MachineFileError as exc:  # a FIX line naming the file, not a traceback (issue 44)
        memory, memory_error = None, str(exc)
    return HostFacts(
        memory=memory, memory_error=memory_error, machine=platform.machine(), root=os.geteuid() == 0,
        governors=_governors(), cpu_mhz=freqs[0], cpu_max_mhz=freqs[1],
        gpus=None if states is None else tuple(states), driver=driver_version())


def _governors() -> tuple[str, ...]:
    found = set()
    for path in glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"):
        try:
            found.add(Path(path).read_text().strip())
        except OSError:
            continue
    return tuple(sorted(found))


def _cpu_freqs() -> tuple[float | None, float | None]:
    """Mean current clock over cores and the highest maximum, MHz (``cpu_clocks``: a damaged ``/proc/cpuinfo`` is a
    clock not reported)."""
    clocks = cpu_clocks(psutil.cpu_freq)
    current = [c for c, _ in clocks if c is not None]
    maxima = [m for _, m in clocks if m is not None]
    return (sum(current) / len(current) if current else None), (max(maxima) if maxima else None)


# -- rules -----------------------------------------------------------------------------------------------


def machine_findings(host: HostFacts, demand: EngineDemand) -> list[Finding]:
    """The machine's lines for ``host`` under ``demand``, in the order printed: memory, page cache, CPU, GPU, root
    (without the host's memory figures: that FIX first, then CPU and GPU)."""
    mem = host.memory
    if mem is None:
        # Without the host's memory figures neither the guard nor the settle can work: the one thing to fix first.
        first = [Finding("FIX", "memory", host.memory_error or "/proc/meminfo could not be read")]
        return first + _cpu(host) + _gpu(host, False)
    unified = host.unified()
    out: list[Finding] = []
    out += _memory(host, demand, unified)
    out += _page_cache(host, demand, unified)
    out += _cpu(host)
    out += _gpu(host, unified)
    out += _root(host, demand)
    return out


def _memory(host: HostFacts, demand: EngineDemand, unified: bool) -> list[Finding]:
    mem = host.memory
    assert mem is not None  # machine_findings() reads no rule of memory without it
    floor = engine_floor(demand.memory_floor_gib, mem.total)
    have = f"MemAvailable {gib(mem.available)} of {gib(mem.total)}; the guard's floor is {gib(floor)}"
    weights = demand.weights_bytes
    out = []
    if demand.guarded and mem.available <= floor:
        out.append(Finding("FIX", "memory", f"{have}: every engine start would be killed at once; free memory "
                                            "(see the largest processes with `ps aux --sort=-rss | head`)"))
    elif weights is not None and unified and mem.available < floor + weights:
        out.append(Finding("FIX", "memory", f"{have}; the weights ({gib(weights)}) share that memory "
                                            "and would push it under the floor: free memory or choose a smaller "
                                            "model"))
    elif weights is not None:
        out.append(Finding("ok", "memory", f"{have}; the weights take {gib(weights)}"))
    else:
        out.append(Finding("ok", "memory", f"{have} (the space names no local model to size)"))
    util = demand.gpu_memory_utilization
    if unified and isinstance(util, (int, float)) and not isinstance(util, bool):
        # vLLM refuses to start when free memory is below total x gpu_memory_utilization, even with
        # kv_cache_memory_bytes; on an integrated GPU "free" is MemAvailable (vllm #35356).
        need = util * mem.total
        if mem.available < need:
            fits = max(0.0, mem.available / mem.total - 0.02)
            out.append(Finding("FIX", "admission", f"gpu_memory_utilization {util:g} needs {gib(need)} free at "
                                                   f"start but MemAvailable is {gib(mem.available)}: vLLM will "
                                                   f"refuse to start; set it to {fits:.2f} or less, or free memory"))
        else:
            out.append(Finding("ok", "admission", f"gpu_memory_utilization {util:g} needs {gib(need)} free; "
                                                  f"{gib(mem.available)} is"))
    return out


def _page_cache_plan(host: HostFacts, demand: EngineDemand, unified: bool) -> PageCachePlan:
    """The policy a real engine would apply here (the value was validated with the engine's options)."""
    return plan_page_cache(demand.page_cache, unified=unified, root=host.root)


def _page_cache(host: HostFacts, demand: EngineDemand, unified: bool) -> list[Finding]:
    mem = host.memory
    assert mem is not None  # machine_findings() reads no rule of memory without it
    text = f"Cached {gib(mem.cached)} ({mem.cached / mem.total:.0%} of MemTotal)"
    plan = _page_cache_plan(host, demand, unified)
    if demand.guarded:
        text += f"; engine.page_cache is {plan.policy}"
    if unified and mem.cached > PAGE_CACHE_WARN_FRACTION * mem.total and plan.policy == "keep":
        return [Finding("warn", "page cache", f"{text}: on unified memory vLLM counts it against the KV budget, so "
                                              "cold and warm starts get different KV caches; run as root for "
                                              "page_cache: warm, or `sync; echo 3 | sudo tee "
                                              "/proc/sys/vm/drop_caches` before the study")]
    return [Finding("ok", "page cache", text)]


def _cpu(host: HostFacts) -> list[Finding]:
    gov = ", ".join(host.governors) or "not reported"
    if host.cpu_mhz is None:
        return [Finding("note", "cpu", f"governor {gov}; clock not reported")]
    clock = f"{host.cpu_mhz:.0f} MHz" + (f" of {host.cpu_max_mhz:.0f} MHz max" if host.cpu_max_mhz else "")
    if host.governors and host.governors != ("performance",):
        return [Finding("warn", "cpu", f"governor {gov}, clock {clock}: restarts may run at different clocks; "
                                       "set the performance governor (`sudo cpupower frequency-set -g performance`)")]
    if host.cpu_max_mhz and host.cpu_mhz < CPU_SLOW_FRACTION * host.cpu_max_mhz:
        return [Finding("warn", "cpu", f"governor {gov} but clock {clock}: a slow state (GB10 CPUs have stuck near "
                                       "1.5 GHz); check with sysbench, reboot if it stays")]
    return [Finding("ok", "cpu", f"governor {gov}, clock {clock}")]


def _gpu(host: HostFacts, unified: bool) -> list[Finding]:
    out = [Finding("note" if host.driver is None else "ok", "driver", host.driver or "not reported (no NVIDIA "
                                                                                    "driver or NVML)")]
    if not host.gpus:
        out.append(Finding("note", "gpu", "none reported by NVML"))
    for g in host.gpus or ():
        clock = "SM clock not reported" if g.sm_clock_mhz is None else (
            f"SM {g.sm_clock_mhz} MHz" + (f" of {g.max_sm_clock_mhz} max" if g.max_sm_clock_mhz else ""))
        extra = "".join([f", {g.temperature_c} C" if g.temperature_c is not None else "",
                         f", {g.power_w:.0f} W" if g.power_w is not None else ""])
        if g.throttle:
            out.append(Finding("warn", f"gpu {g.index}", f"{g.name}: {clock}{extra}; throttled: "
                                                         f"{', '.join(g.throttle)} (check cooling and power, or "
                                                         "lock clocks with nvidia-smi -lgc)"))
        else:
            out.append(Finding("ok", f"gpu {g.index}", f"{g.name}: {clock}{extra}; not throttled"))
    if not host.gpus:
        # No GPU is no claim about one (issue 44: "the GPU has its own memory" on a machine without any).
        out.append(Finding("note", "unified", "not applicable: no GPU reported, so nothing shares host memory with "
                                              "one"))
    else:
        out.append(Finding("ok", "unified", "yes: the GPU allocates from host memory (the guard and settle matter "
                                            "most here)" if unified else "no: the GPU has its own memory"))
    return out


def _root(host: HostFacts, demand: EngineDemand) -> list[Finding]:
    plan = _page_cache_plan(host, demand, host.unified())
    if host.root:
        return [Finding("ok", "root", "yes: page_cache drop and warm can write /proc/sys/vm/drop_caches")]
    refusal = plan.refusal()
    if refusal is not None:
        return [Finding("FIX", "root", f"no, and {refusal}")]
    note = plan.note()
    return [Finding("note", "root", f"no: {note}" if note else "no: page_cache drop and warm would be refused "
                                                              "(keep needs no root)")]

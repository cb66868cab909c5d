"""The machine's state at each restart: CPU and GPU clocks, power, temperature, throttling.

A GB10 has halved throughput with no message: CPUs stuck near 1.5 GHz, GPU decode steps alternating between two
speeds. A restart measured in such a state is not comparable with the others, so each restart records its state
and :func:`departures` marks the ones that depart from the study's median.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psutil

from autotune.core import facts
from autotune.core.facts import FactValue
from autotune.machine._gpu import GpuState, gpu_states

__all__ = ["CPU_CLOCK_FRACTION", "MachineState", "cpu_clocks", "departure", "departures", "read_machine_state"]

#: A restart whose mean CPU clock is under this fraction of the study's median is marked. The reported slow
#: state (1.5 GHz on a 3.9 GHz-class Grace core) is well under it; ordinary frequency scaling is not. Empirical.
CPU_CLOCK_FRACTION = 0.70


@dataclasses.dataclass(frozen=True)
class MachineState:
    """CPU clocks over cores (``scaling_cur_freq``, MHz) and each GPU's :class:`GpuState`; ``None``: not reported."""

    cpu_mhz_mean: float | None = None
    cpu_mhz_min: float | None = None
    gpus: tuple[GpuState, ...] = ()

    @property
    def throttle(self) -> tuple[str, ...]:
        """Every GPU's active throttle reasons, ``gpu<i>:<reason>``."""
        return tuple(f"gpu{g.index}:{r}" for g in self.gpus for r in g.throttle)

    def to_facts(self) -> dict[str, FactValue]:
        """The state as flat restart facts (:mod:`autotune.core.facts`): what a restart's record keeps."""
        out: dict[str, FactValue] = {}
        if self.cpu_mhz_mean is not None:
            out[facts.CPU_MHZ_MEAN] = self.cpu_mhz_mean
        if self.cpu_mhz_min is not None:
            out[facts.CPU_MHZ_MIN] = self.cpu_mhz_min
        for g in self.gpus:
            for figure in facts.GPU_FIGURES:
                if getattr(g, figure) is not None:
                    out[facts.gpu_fact(g.index, figure)] = getattr(g, figure)
        if self.throttle:
            out[facts.GPU_THROTTLE] = ",".join(self.throttle)
        return out

    @classmethod
    def from_facts(cls, restart_facts: Mapping[str, FactValue]) -> MachineState:
        """The part of the state :func:`departure` judges (mean CPU clock, throttle reasons), read back from a
        restart's stored facts; a restart that recorded none gives an empty state, which departs from nothing."""
        mean = restart_facts.get(facts.CPU_MHZ_MEAN)
        throttled: dict[int, list[str]] = {}
        for item in str(restart_facts.get(facts.GPU_THROTTLE) or "").split(","):
            gpu, _, reason = item.strip().partition(":")
            if gpu.startswith("gpu") and gpu[3:].isdigit() and reason:
                throttled.setdefault(int(gpu[3:]), []).append(reason)
        return cls(cpu_mhz_mean=float(mean) if isinstance(mean, int | float) and not isinstance(mean, bool) else None,
                   gpus=tuple(GpuState(index=i, throttle=tuple(r)) for i, r in sorted(throttled.items())))


#: What a CPU core's clock can truthfully be, MHz: a reading outside is a damaged file, and reads as unknown (as
#: NVML's out-of-range figures do, ``machine._gpu``). Wide on purpose: no real core is rejected.
_CPU_MHZ = (1.0, 20_000.0)


def _mhz(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if _CPU_MHZ[0] <= value <= _CPU_MHZ[1] else None  # NaN compares false: unknown too


def cpu_clocks(cpu_freq: Callable[..., Any] = psutil.cpu_freq) -> list[tuple[float | None, float | None]]:
    """Each core's ``(current, max)`` clock in MHz, ``None`` where not reported or not possible; empty when the
    machine reports none. The one reader of CPU clocks (the study's machine state and ``doctor``).

    psutil reads ``scaling_cur_freq``, or, where the kernel has no cpufreq, the ``cpu MHz`` lines of
    ``/proc/cpuinfo`` with ``float()``: a garbled line there raises ``ValueError`` (issue 44: ``doctor`` and every
    restart's machine state were tracebacks), and a container's or a VM's file may hold anything. A machine file
    that cannot be read is a clock that is not reported, never a failed study.
    """
    try:
        freqs = list(cpu_freq(percpu=True) or [])[:4096]
    except Exception:  # noqa: BLE001 - psutil's parse of a damaged machine file: ValueError, IndexError, ...
        return []
    return [(_mhz(getattr(f, "current", None)), _mhz(getattr(f, "max", None))) for f in freqs]


def read_machine_state(cpu_freq: Callable[..., Any] = psutil.cpu_freq,
                       gpus: Callable[[], list[GpuState] | None] = gpu_states) -> MachineState:
    """The state now: :func:`cpu_clocks` (``scaling_cur_freq`` on Linux) and NVML."""
    freqs = [current for current, _ in cpu_clocks(cpu_freq) if current is not None]
    return MachineState(
        cpu_mhz_mean=statistics.fmean(freqs) if freqs else None,
        cpu_mhz_min=min(freqs) if freqs else None,
        gpus=tuple(gpus() or ()),
    )


def departure(state: MachineState, median_cpu_mhz: float | None) -> str | None:
    """Why ``state`` departs from the study's (``median_cpu_mhz``: the median of its restarts' mean clocks), or
    ``None``: a mean CPU clock under :data:`CPU_CLOCK_FRACTION` of the median, or any GPU throttle reason."""
    reasons = []
    if median_cpu_mhz and state.cpu_mhz_mean is not None and state.cpu_mhz_mean < CPU_CLOCK_FRACTION * median_cpu_mhz:
        reasons.append(f"CPU clock {state.cpu_mhz_mean:.0f} MHz is under {CPU_CLOCK_FRACTION:.0%} of the study's "
                       f"median {median_cpu_mhz:.0f} MHz")
    if state.throttle:
        reasons.append(f"GPU throttled ({', '.join(state.throttle)})")
    return "; ".join(reasons) or None


def departures(states: Sequence[MachineState]) -> list[str | None]:
    """For each restart's state, why it departs from the median of all of them (``None``: it does not)."""
    clocks = [s.cpu_mhz_mean for s in states if s.cpu_mhz_mean is not None]
    median = statistics.median(clocks) if clocks else None
    return [departure(s, median) for s in states]

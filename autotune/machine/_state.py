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

__all__ = ["CPU_CLOCK_FRACTION", "MachineState", "departure", "departures", "read_machine_state"]

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

    def to_dict(self) -> dict[str, Any]:
        return {"cpu_mhz_mean": self.cpu_mhz_mean, "cpu_mhz_min": self.cpu_mhz_min,
                "gpus": [dataclasses.asdict(g) | {"throttle": list(g.throttle)} for g in self.gpus]}


def read_machine_state(cpu_freq: Callable[..., Any] = psutil.cpu_freq,
                       gpus: Callable[[], list[GpuState] | None] = gpu_states) -> MachineState:
    """The state now: ``psutil.cpu_freq(percpu=True)`` (``scaling_cur_freq`` on Linux) and NVML."""
    try:
        freqs = [f.current for f in (cpu_freq(percpu=True) or []) if f.current]
    except (OSError, NotImplementedError, AttributeError):
        freqs = []
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

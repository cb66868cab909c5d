"""GPU facts through NVML (nvidia-ml-py), where there is a driver: "not reported" everywhere else.

Every call here is optional: no NVML library, no GPU, or a field the device does not support (a GB10 reports no
dedicated framebuffer) gives ``None`` for that fact, never an error. Results are read fresh each call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["GpuState", "driver_version", "gpu_free_bytes", "gpu_states", "is_unified_memory", "nvml", "visible"]

_lock = threading.Lock()
_nvml_ok: bool | None = None

#: NVML clock-event (throttle) reasons by bit; ``GpuIdle`` is left out: an idle GPU between restarts is not slow.
_REASONS = {
    0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock",
}


@contextlib.contextmanager
def nvml() -> Iterator[Any]:
    """The ``pynvml`` module, initialised once; ``None`` where NVML cannot be used (no library, no driver)."""
    global _nvml_ok
    try:
        import pynvml
    except ImportError:
        yield None
        return
    with _lock:
        if _nvml_ok is None:
            try:
                pynvml.nvmlInit()
                _nvml_ok = True
            except Exception:  # noqa: BLE001 - NVMLError, or a library that fails to load (OSError): no NVML
                _nvml_ok = False
    yield pynvml if _nvml_ok else None


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and friends: the fact is not reported
        return None


@dataclasses.dataclass(frozen=True)
class GpuState:
    """One GPU's state now; ``None`` fields are not reported by the device.

    Attributes:
        index: NVML device index.
        name: Device name.
        sm_clock_mhz: Current SM clock.
        max_sm_clock_mhz: Maximum SM clock.
        power_w: Power draw.
        temperature_c: GPU temperature.
        throttle: Active clock-event reasons (idle excluded); empty when none.
        memory_total: Dedicated memory in bytes (``None`` on a GB10, which has none of its own).
        memory_free: Free dedicated memory in bytes.
        addressing_mode: ``ats``, ``hmm`` or ``none`` where the driver reports it (ATS: the GPU shares the CPU's
            page tables, as on Grace).
        uuid: The device's UUID (``GPU-...``).
    """

    index: int
    name: str | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    power_w: float | None = None
    temperature_c: int | None = None
    throttle: tuple[str, ...] = ()
    memory_total: int | None = None
    memory_free: int | None = None
    addressing_mode: str | None = None
    uuid: str | None = None


def throttle_names(mask: int | None) -> tuple[str, ...]:
    """Names of the set bits of an NVML clock-event mask, idle left out."""
    if not mask:
        return ()
    return tuple(name for bit, name in _REASONS.items() if mask & bit)


def gpu_states() -> list[GpuState] | None:
    """Every GPU's :class:`GpuState`; ``None`` where NVML cannot be used."""
    with nvml() as nv:
        if nv is None:
            return None
        # A count NVML cannot truthfully report (negative, 2**32-1) reads as none, never as a loop that long.
        count = _within(_try(nv.nvmlDeviceGetCount), *_DEVICES) or 0
        out = []
        for i in range(count):
            h = _try(nv.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                continue
            name = _try(nv.nvmlDeviceGetName, h)
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            power = _try(nv.nvmlDeviceGetPowerUsage, h)
            reasons = _try(getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                           or nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
            mode = _try(getattr(nv, "nvmlDeviceGetAddressingMode", None) or (lambda _h: None), h)
            modes = {getattr(nv, "NVML_DEVICE_ADDRESSING_MODE_ATS", 2): "ats",
                     getattr(nv, "NVML_DEVICE_ADDRESSING_MODE_HMM", 1): "hmm",
                     getattr(nv, "NVML_DEVICE_ADDRESSING_MODE_NONE", 0): "none"}
            total = _within(getattr(mem, "total", None), *_MEMORY_BYTES)
            free = _within(getattr(mem, "free", None), *_MEMORY_BYTES)
            if total is None or free is None or free > total:
                # Free memory is only believed beside a total it fits in: the settle waits on it, and a figure that
                # cannot be true would hold every start back (too little) or wave one onto a full GPU (too much).
                # Unknown is the safe reading: the settle then goes by host memory, as on a GB10.
                free = None
            power_mw = _within(power, *_POWER_MW)
            out.append(GpuState(
                index=i,
                name=_text(name),
                sm_clock_mhz=_within(_try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM), *_CLOCK_MHZ),
                max_sm_clock_mhz=_within(_try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM), *_CLOCK_MHZ),
                power_w=None if power_mw is None else power_mw / 1000.0,
                temperature_c=_within(_try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU), *_TEMP_C),
                throttle=throttle_names(_within(reasons, 0, 2 ** 64 - 1)),
                memory_total=total,
                memory_free=free,
                addressing_mode=None if mode is None else modes.get(mode, str(mode)),
                uuid=_text(_try(nv.nvmlDeviceGetUUID, h)),
            ))
        return out


#: What NVML can truthfully report, as (lowest, highest): a reading outside is a driver or binding fault. Wide on
#: purpose: the check rejects the impossible (a negative clock, 2**64-1 bytes), never an unusual but real device.
_MEMORY_BYTES = (0, 64 * 1024 ** 4)  # 64 TiB: above any GPU's memory, a GB10's shared pool included
_CLOCK_MHZ = (0, 10_000)
_POWER_MW = (0, 10_000_000)  # 10 kW
_TEMP_C = (-50, 200)
_DEVICES = (0, 1024)
#: A device name or UUID longer than this is not one (NVML's own buffers are 96 and 80 bytes).
_MAX_TEXT = 256


def _within(value: Any, low: int, high: int) -> int | None:
    """``value`` as a whole number when it lies in ``[low, high]``, else ``None``: an NVML reading that cannot be
    true is not reported (facts and reports say unknown), never believed; a boolean or a fraction is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return int(value)


def _text(value: Any) -> str | None:
    """A name or UUID from NVML: text, bounded; bytes that are not UTF-8 do not fail the reading (issue 44)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return value[:_MAX_TEXT] if isinstance(value, str) else None


def visible(states: list[GpuState], spec: str | None) -> list[GpuState]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` (``spec``) lets this process's engines use: by NVML index or UUID (prefix);
    all of them when it is unset or names something else (a MIG instance), none when it is empty."""
    if spec is None:
        return states
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        return []
    chosen = []
    for item in items:
        match = [s for s in states if (item.isdigit() and s.index == int(item))
                 or (s.uuid is not None and item.startswith("GPU-") and s.uuid.startswith(item))]
        if not match:
            return states  # a form this does not read: watch every GPU rather than none
        chosen += [s for s in match if s not in chosen]
    return chosen


def gpu_free_bytes() -> tuple[int, ...] | None:
    """Free dedicated memory of each GPU this process may use (``CUDA_VISIBLE_DEVICES``: other workers' GPUs are
    theirs to fill); ``None`` where NVML does not report it for each of them (no GPU, or a GB10)."""
    states = gpu_states()
    if states:
        states = visible(states, os.environ.get("CUDA_VISIBLE_DEVICES"))
    free = [s.memory_free for s in states or () if s.memory_free is not None]
    if not states or len(free) < len(states):
        return None
    return tuple(int(f) for f in free)


def driver_version() -> str | None:
    """The NVIDIA driver version, ``None`` where NVML cannot be used."""
    with nvml() as nv:
        if nv is None:
            return None
        return _text(_try(nv.nvmlSystemGetDriverVersion))


def is_unified_memory(states: list[GpuState] | None, host_total: int, machine: str | None = None) -> bool:
    """Whether the GPU allocates from host memory (GB10, Grace Hopper/Blackwell), by this rule:

    * the driver reports ATS addressing (the GPU walks the CPU's page tables), or
    * the GPU reports no dedicated memory of its own (a GB10's NVML has no framebuffer), or
    * its memory total is within 10% of host memory (the driver reports the shared pool), or
    * the CPU is aarch64 and there is an NVIDIA GPU (every such machine shipped so far shares memory).

    No GPU: ``False``.
    """
    if not states:
        return False
    arch = (machine or platform.machine()).lower()
    for s in states:
        if s.addressing_mode == "ats" or s.memory_total is None:
            return True
        if host_total and abs(s.memory_total - host_total) <= 0.10 * host_total:
            return True
    return arch in ("aarch64", "arm64")

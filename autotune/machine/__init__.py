"""The machine under the engine: host memory, GPU and CPU facts, and the guards that keep a long study safe.

Below the engines in the layering (core -> config -> machine -> engines): real engines start each restart inside a
:class:`MemoryGuard` after the page-cache policy (:func:`plan_page_cache`) and :func:`settle`, and ``autotune
doctor`` prints the checkup's findings on the same facts before a long study (:func:`read_host_facts`,
:func:`machine_findings`: the machine's rules, pure, checked on any machine's facts).
"""

from __future__ import annotations

from autotune.machine._checkup import EngineDemand, Finding, HostFacts, machine_findings, read_host_facts
from autotune.machine._gpu import GpuState, driver_version, gpu_free_bytes, gpu_states, is_unified_memory
from autotune.machine._guard import (
    GUARD_PREFIX,
    SAMPLE_INTERVAL_S,
    GuardSummary,
    GuardTrip,
    KernelLog,
    MemoryGuard,
    default_floor,
    is_driver_oom,
)
from autotune.machine._meminfo import GIB, MachineFileError, MemInfo, MeminfoReader, gib, read_meminfo
from autotune.machine._pagecache import (
    PAGE_CACHE_POLICIES,
    PageCacheFailed,
    PageCachePlan,
    hub_cache_dir,
    parse_page_cache,
    plan_page_cache,
    weight_files,
    weights_bytes,
)
from autotune.machine._safety import MAX_WAIT_S, StartSafety, engine_floor, wait_seconds
from autotune.machine._settle import (
    MemoryLevel,
    MemoryNotSettled,
    SettleResult,
    measure_level,
    settle,
    top_rss,
)
from autotune.machine._state import MachineState, cpu_clocks, departure, departures, read_machine_state

__all__ = [
    "GIB",
    "GUARD_PREFIX",
    "SAMPLE_INTERVAL_S",
    "EngineDemand",
    "Finding",
    "GpuState",
    "GuardSummary",
    "GuardTrip",
    "HostFacts",
    "KernelLog",
    "MachineFileError",
    "MachineState",
    "MemInfo",
    "MeminfoReader",
    "MemoryGuard",
    "MemoryLevel",
    "MemoryNotSettled",
    "PAGE_CACHE_POLICIES",
    "PageCacheFailed",
    "PageCachePlan",
    "SettleResult",
    "StartSafety",
    "cpu_clocks",
    "default_floor",
    "departure",
    "departures",
    "driver_version",
    "MAX_WAIT_S",
    "engine_floor",
    "wait_seconds",
    "gib",
    "gpu_free_bytes",
    "gpu_states",
    "hub_cache_dir",
    "is_driver_oom",
    "is_unified_memory",
    "machine_findings",
    "measure_level",
    "parse_page_cache",
    "plan_page_cache",
    "read_host_facts",
    "read_machine_state",
    "read_meminfo",
    "settle",
    "top_rss",
    "weight_files",
    "weights_bytes",
]

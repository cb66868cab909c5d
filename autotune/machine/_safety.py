"""What a real engine does around each start: apply the page-cache policy, settle, then start inside a memory guard.

One :class:`StartSafety` per engine object: it measures the level the study began with and resolves the page-cache
policy when the engine is made, and gives each restart the policy, a settle and a fresh
:class:`~autotune.machine.MemoryGuard`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.core import facts
from autotune.machine._gpu import gpu_free_bytes, gpu_states, is_unified_memory
from autotune.machine._guard import SAMPLE_INTERVAL_S, KernelLog, MemoryGuard, default_floor
from autotune.machine._meminfo import GIB, MeminfoReader, MemInfo
from autotune.machine._pagecache import DROP_CACHES_PATH, apply_page_cache, plan_page_cache, weight_files
from autotune.machine._settle import SETTLE_INTERVAL_S, SETTLE_TIMEOUT_S, MemoryLevel, SettleResult, settle
from autotune.machine._state import MachineState, read_machine_state

__all__ = ["MAX_WAIT_S", "SMALL_HOST_FLOOR_FRACTION", "StartSafety", "engine_floor", "wait_seconds"]

#: The longest any engine wait (a settle, a start-up, a measurement, a kill's grace) may be set to: a day. A sanity
#: bound, not a tuning choice (a GB10 start takes minutes; NVIDIA's guide waits 900 s for /health): a larger number
#: (``1e300``) is a typo or a unit error, and ``inf`` or NaN would make the wait endless (issue 32).
MAX_WAIT_S = 86_400.0


def wait_seconds(value: Any, field: str) -> float:
    """``value`` as the seconds of a wait, the same rule in every engine: a finite number over 0, at most
    :data:`MAX_WAIT_S`.

    Raises:
        ValueError: one line naming ``engine.<field>``, what it must be, and the value given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_WAIT_S:
        raise ValueError(f"engine.{field} must be a number of seconds over 0 and at most {MAX_WAIT_S:g} (a day), "
                         f"got {value!r}")
    return float(value)

#: On a small host the default floor (8 GiB) would leave nothing to run in: there it is at most this fraction of
#: MemTotal (4 GiB of a 16 GiB laptop). A Spark's default (8.5 GiB of 121.7) is far under it.
SMALL_HOST_FLOOR_FRACTION = 0.25
#: Set in each of several local workers (``autotune tune --gpus``; autotune.cli.gpu_workers.WORKER_ENV): they share
#: the host's memory, so one worker's settle cannot wait for host memory another worker's engine legitimately holds.
LOCAL_WORKER_ENV = "AUTOTUNE_WORKER_INDEX"


def engine_floor(floor_gib: float | None, total: int) -> int:
    """The floor in bytes for the engine option ``memory_floor_gib`` (``None``: the default; ``0``: no floor)."""
    if floor_gib is None:
        return min(default_floor(total), int(SMALL_HOST_FLOOR_FRACTION * total))
    return int(floor_gib * GIB)


class StartSafety:
    """Settle and guard for one engine's restarts.

    Args:
        floor_gib: ``engine.memory_floor_gib``: ``None`` for the default, ``0`` to turn the floor off (the guard
            still records the lowest MemAvailable and Cached, and still watches the kernel log).
        settle_timeout_s: ``engine.settle_timeout_s``.
        leftovers: Returns the engine processes of earlier restarts still alive (``pid (name)`` each).
        check_host: Whether settling waits for host memory (default: on a unified-memory machine, unless this is
            one of several local workers).
        unified: Whether the GPU allocates from host memory (default: :func:`is_unified_memory` on this machine).
        page_cache: ``engine.page_cache`` (keep, drop or warm; ``None``: warm on unified memory, keep elsewhere),
            resolved here once (:func:`~autotune.machine.plan_page_cache`) into :attr:`page_cache`.
        euid: Returns the effective user id (drop and warm need root); ``None``: :func:`os.geteuid`.
        drop_caches_path: The file drop and warm write ``3`` to (tests point it elsewhere).
        reader, gpu_reader, kernel_log, clock, sleep, interval_s, settle_interval_s: injectable for tests;
            ``kernel_log`` is a factory called per restart (``None``: no kernel log).
    """

    def __init__(self, floor_gib: float | None = None, settle_timeout_s: float = SETTLE_TIMEOUT_S, *,
                 leftovers: Callable[[], list[str]] = list, reader: Callable[[], MemInfo] | None = None,
                 gpu_reader: Callable[[], tuple[int, ...] | None] | None = gpu_free_bytes,
                 kernel_log: Callable[[], Any] | None = KernelLog, interval_s: float = SAMPLE_INTERVAL_S,
                 settle_interval_s: float = SETTLE_INTERVAL_S, clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], Any] | None = None,
                 machine_state: Callable[[], MachineState] = read_machine_state,
                 check_host: bool | None = None, unified: bool | None = None, page_cache: str | None = None,
                 euid: Callable[[], int] | None = None, drop_caches_path: str = DROP_CACHES_PATH) -> None:
        self.reader = reader or MeminfoReader()
        self.gpu_reader = gpu_reader
        info = self.reader()
        self.total = info.total
        self.floor = engine_floor(floor_gib, info.total)
        if self.floor >= info.total:
            # No start could ever begin: each would wait out the settle for memory no machine of this size has.
            raise ValueError(f"engine.memory_floor_gib {floor_gib:g} GiB is at or above this machine's MemTotal "
                             f"{info.total / GIB:.1f} GiB, so no engine could ever start; set it under MemTotal, or "
                             "leave it out for the default (max(8 GiB, 7% of MemTotal))")
        self.settle_timeout_s = wait_seconds(settle_timeout_s, "settle_timeout_s")
        self.baseline = MemoryLevel(info.available, gpu_reader() if gpu_reader is not None else None)
        if unified is None and (check_host is None or page_cache is None):
            unified = is_unified_memory(gpu_states(), info.total)
        if check_host is None:
            # Host memory is the engine's memory only where the GPU allocates from it (a GB10): on a machine with
            # its own GPU memory, other programs moving MemAvailable say nothing about the last engine's memory,
            # and waiting on them would stall a study on any busy host. Several local workers fill the host in
            # turn, so they leave it out too.
            check_host = bool(unified) and LOCAL_WORKER_ENV not in os.environ
        self.check_host = check_host
        self.leftovers = leftovers
        self.kernel_log = kernel_log
        self.interval_s = interval_s
        self.settle_interval_s = settle_interval_s
        self._clock = clock
        self._sleep = sleep
        #: The last settle and guard, for the restart's record.
        self.last_settle: SettleResult | None = None
        self.last_guard: MemoryGuard | None = None
        self.last_state: MachineState | None = None
        self.machine_state = machine_state
        #: The page-cache policy every start applies; a preflight reads its refusal and note.
        self.page_cache = plan_page_cache(page_cache, unified=bool(unified),
                                          root=(euid or os.geteuid)() == 0)
        self.drop_caches_path = drop_caches_path
        #: Seconds the last start spent dropping or warming the page cache (``None``: keep).
        self.last_page_cache_s: float | None = None

    def settle(self, model: Any = None, hub_cache: Path | None = None) -> SettleResult:
        """Apply the page-cache policy, then wait for memory to come back to the study's level.

        Args:
            model: ``engine_args.model``, whose weight files ``warm`` reads (a local directory or a hub id).
            hub_cache: The Hugging Face hub cache the engine uses, when it is not this process's.

        Raises:
            MemoryNotSettled: memory did not come back, or (:class:`~autotune.machine.PageCacheFailed`) the policy
                could not be applied.
        """
        # Before the settle: dropping the cache and reading the weights move MemAvailable and Cached, and the
        # settle then waits until they are steady again.
        self.last_page_cache_s = None
        if self.page_cache.policy != "keep":
            files = weight_files(model, hub_cache) if self.page_cache.policy == "warm" else []
            self.last_page_cache_s = apply_page_cache(self.page_cache.policy, files, drop_path=self.drop_caches_path)
        extra: dict[str, Any] = {}
        if self._clock is not None:
            extra["clock"] = self._clock
        if self._sleep is not None:
            extra["sleep"] = self._sleep
        self.last_settle = settle(self.baseline, reader=self.reader, gpu_reader=self.gpu_reader,
                                  leftovers=self.leftovers, timeout_s=self.settle_timeout_s,
                                  interval_s=self.settle_interval_s, check_host=self.check_host, floor=self.floor,
                                  **extra)
        return self.last_settle

    def guard(self) -> MemoryGuard:
        """A fresh guard for one restart (not started: use it as a context manager around the start); the machine's
        state (clocks, throttling) is read now, for the restart's record."""
        self.last_state = self.machine_state()
        extra: dict[str, Any] = {}
        if self._clock is not None:
            extra["clock"] = self._clock
        self.last_guard = MemoryGuard(self.floor, reader=self.reader, interval_s=self.interval_s,
                                      kernel_log=self.kernel_log() if self.kernel_log is not None else None, **extra)
        return self.last_guard

    def restart_facts(self) -> dict[str, Any]:
        """The last restart's memory and machine facts, flat, for its record (MLflow, ``report --json``): the
        page-cache policy and the seconds it took, the settle wait, the guard's floor, lowest MemAvailable and Cached (GiB), its trip, and the machine state."""
        out: dict[str, Any] = {facts.PAGE_CACHE: self.page_cache.policy}
        if self.last_page_cache_s is not None:
            out[facts.PAGE_CACHE_S] = round(self.last_page_cache_s, 3)
        if self.last_settle is not None:
            out[facts.SETTLE_WAIT_S] = round(self.last_settle.waited_s, 3)
            out[facts.SETTLE_WAITED] = self.last_settle.waited
        if self.last_guard is not None:
            seen = self.last_guard.summary()
            out[facts.MEMORY_FLOOR_GIB] = round(seen.floor / GIB, 3)
            out[facts.MEMORY_SAMPLES] = seen.samples
            out[facts.MEMORY_GUARD_CPU_S] = round(seen.cpu_s, 6)
            if seen.lowest_available is not None:
                # Rounded down, never to nearest: a trip's lowest is under its floor, and the record must not show it
                # at or over the floor (a lowest 0.1 MiB under a 5.1236 GiB floor would round to 5.124).
                out[facts.MEM_AVAILABLE_MIN_GIB] = math.floor(seen.lowest_available / GIB * 1000) / 1000
            if seen.cached is not None:
                out[facts.CACHED_GIB] = round(seen.cached / GIB, 3)
            if seen.trip is not None:
                out[facts.MEMORY_GUARD] = seen.trip.cause
        if self.last_state is not None:
            out.update(self.last_state.to_facts())
        return out

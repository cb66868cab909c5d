"""Settle before each start: wait until the memory an earlier engine held is back, and nothing of it remains.

Memory an exited engine held returns with a lag on unified-memory machines; a start during the lag fails, or
vLLM asserts because free memory *rose* while it profiled (#56830). Before each start the engine waits until:

* host MemAvailable is within a tolerance of the level measured when the study began, and within
  :data:`STABLE_BYTES` of the previous sample (two samples in a row agree: not still rising);
* the same for every GPU's free memory, where NVML reports it (not on a GB10, whose pool is host memory);
* no engine process from an earlier restart is alive.

Where neither host memory nor a GPU's is watched (a machine with no GPU and no unified memory: the cmd engine
on a CPU box, CI), the floor and the leftovers are checked on one sample, with no wait.

If that does not happen within the timeout, :class:`MemoryNotSettled` says in one line what holds the memory
(the largest processes by RSS), so the user can free it and run the same command again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import psutil

from autotune.machine._meminfo import GIB, MeminfoReader, MemInfo, gib

__all__ = [
    "SETTLE_INTERVAL_S",
    "SETTLE_TIMEOUT_S",
    "STABLE_BYTES",
    "MemoryLevel",
    "MemoryNotSettled",
    "SettleResult",
    "measure_level",
    "settle",
    "tolerance_bytes",
    "top_rss",
]

#: Seconds between samples while waiting.
SETTLE_INTERVAL_S = 0.5
#: How long to wait before giving up. A GB10 has been seen to need minutes after an engine with ~100 GiB exits
#: (a relaunch at once got no GPU, the same launch minutes later worked); empirical.
SETTLE_TIMEOUT_S = 300.0
#: Two samples within this of each other count as stable. Empirical: an idle host moves MemAvailable by tens of
#: MiB a second; an engine releasing memory moves it by GiBs.
STABLE_BYTES = GIB // 2


def tolerance_bytes(baseline: int) -> int:
    """How far under the study's starting level memory may stay: max(2 GiB, 5% of it). Empirical: other users
    and the page cache move MemAvailable by a GiB or two on a shared host; a leaked engine holds far more."""
    return max(2 * GIB, int(0.05 * baseline))


@dataclasses.dataclass(frozen=True)
class MemoryLevel:
    """Free memory at one moment (bytes): host MemAvailable, and each GPU's free memory where NVML reports it."""

    host_available: int
    gpu_free: tuple[int, ...] | None = None


def measure_level(reader: Callable[[], MemInfo] | None = None,
                  gpu_reader: Callable[[], tuple[int, ...] | None] | None = None) -> MemoryLevel:
    """The level now (the study's reference is measured once, when it begins)."""
    info = (reader or MeminfoReader())()
    return MemoryLevel(info.available, gpu_reader() if gpu_reader is not None else None)


@dataclasses.dataclass(frozen=True)
class SettleResult:
    """How the wait went: seconds waited, samples taken, the level it ended on."""

    waited_s: float
    samples: int
    level: MemoryLevel

    @property
    def waited(self) -> bool:
        """Whether the start had to wait (more than the two samples that show stability)."""
        return self.samples > 2


class MemoryNotSettled(Exception):
    """Memory did not come back before the timeout; the message is one line naming what holds it."""


def top_rss(n: int = 3) -> list[str]:
    """The ``n`` largest processes by resident memory, as ``pid name 12.3 GiB``."""
    rows = []
    for proc in psutil.process_iter(["pid", "name", "memory_info"]):
        mem = proc.info.get("memory_info")
        if mem is not None:
            rows.append((mem.rss, proc.info["pid"], proc.info.get("name") or "?"))
    rows.sort(reverse=True)
    return [f"{pid} {name} {gib(rss)}" for rss, pid, name in rows[:n]]


def settle(baseline: MemoryLevel, *, reader: Callable[[], MemInfo] | None = None,
           gpu_reader: Callable[[], tuple[int, ...] | None] | None = None,
           leftovers: Callable[[], list[str]] = list, timeout_s: float = SETTLE_TIMEOUT_S,
           interval_s: float = SETTLE_INTERVAL_S, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], Any] = time.sleep, holders: Callable[[], list[str]] = top_rss,
           check_host: bool = True, floor: int = 0) -> SettleResult:
    """Wait until memory is back at ``baseline`` (within :func:`tolerance_bytes`), stable over two samples, and
    ``leftovers()`` is empty. ``check_host=False`` leaves host memory out (several workers share the host and
    fill it in turn; their GPUs and leftovers are still their own), all but ``floor``: no start begins while host
    MemAvailable is under the memory guard's floor, on any machine (the guard would kill it at once, and a
    configuration would be charged with a floor hit that some other program caused).

    Raises:
        MemoryNotSettled: not within ``timeout_s``; one line with the figures and what holds the memory.
    """
    read = reader or MeminfoReader()
    start = clock()
    previous: MemoryLevel | None = None
    samples = 0
    while True:
        level = measure_level(read, gpu_reader)
        samples += 1
        left = leftovers()
        short = _short_of(baseline, level, check_host, floor)
        # Stability is asked of the memory being watched: where neither host memory (left out off unified memory)
        # nor any GPU's free memory is, one sample decides, and a second would only wait (half a second a start).
        watched = check_host or baseline.gpu_free is not None
        stable = not watched or (previous is not None and _stable(previous, level, check_host))
        if not left and short is None and stable:
            return SettleResult(waited_s=clock() - start, samples=samples, level=level)
        if clock() - start >= timeout_s:
            problems = []
            if short is not None:
                problems.append(short)
            elif not stable:
                problems.append(f"memory still moving (MemAvailable {gib(level.host_available)})")
            if left:
                problems.append(f"engine processes from an earlier restart still run: {', '.join(left)}")
            raise MemoryNotSettled(
                f"memory did not settle within {timeout_s:g} s before the next engine start: {'; '.join(problems)}; "
                f"largest processes: {', '.join(holders()) or 'none readable'}; free it, then run the same command "
                "again (the study resumes)")
        previous = level
        sleep(interval_s)


def _short_of(baseline: MemoryLevel, level: MemoryLevel, check_host: bool = True, floor: int = 0) -> str | None:
    if floor > 0 and level.host_available <= floor:
        return f"MemAvailable {gib(level.host_available)} is under the memory guard's floor {gib(floor)}"
    tol = tolerance_bytes(baseline.host_available)
    if check_host and level.host_available < baseline.host_available - tol:
        return (f"MemAvailable {gib(level.host_available)} is {gib(baseline.host_available - level.host_available)} "
                f"under the {gib(baseline.host_available)} measured when the study began (tolerance {gib(tol)})")
    if baseline.gpu_free is not None and level.gpu_free is not None:
        for i, (was, now) in enumerate(zip(baseline.gpu_free, level.gpu_free)):
            tol = tolerance_bytes(was)
            if now < was - tol:
                return (f"GPU {i} free memory {gib(now)} is {gib(was - now)} under the {gib(was)} measured when the "
                        f"study began (tolerance {gib(tol)})")
    return None


def _stable(a: MemoryLevel, b: MemoryLevel, check_host: bool = True) -> bool:
    if check_host and abs(a.host_available - b.host_available) > STABLE_BYTES:
        return False
    if a.gpu_free is not None and b.gpu_free is not None:
        return all(abs(x - y) <= STABLE_BYTES for x, y in zip(a.gpu_free, b.gpu_free))
    return True

"""Host memory as the kernel reports it: ``/proc/meminfo``, read from a path that tests can point elsewhere.

``psutil.virtual_memory()`` reads the same file, but the guard must be fed a *replay* (a fake file rewritten
while it runs) in tests, so the reader takes a path and parses the three fields it needs itself.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

__all__ = ["GIB", "MEMINFO_PATH", "MemInfo", "MeminfoReader", "gib", "read_meminfo"]

GIB = 1024 ** 3
MEMINFO_PATH = "/proc/meminfo"


def gib(n_bytes: float | None) -> str:
    """``12.3 GiB`` (``?`` when unknown): the one way figures are written in messages."""
    return "?" if n_bytes is None else f"{n_bytes / GIB:.1f} GiB"


@dataclasses.dataclass(frozen=True)
class MemInfo:
    """One sample of host memory, in bytes.

    Attributes:
        total: MemTotal.
        available: MemAvailable: what can be allocated without swapping (on a GB10 also what the GPU can get).
        cached: Cached: the page cache, which vLLM's start-up profiling on unified memory counts as used.
    """

    total: int
    available: int
    cached: int


def read_meminfo(path: str | Path = MEMINFO_PATH) -> MemInfo:
    """Parse ``path`` (``/proc/meminfo`` format: ``Name:   1234 kB``).

    Raises:
        OSError: the file cannot be read.
        ValueError: MemTotal or MemAvailable is missing (a kernel older than 3.14, or not a meminfo file).
    """
    fields: dict[str, int] = {}
    for line in Path(path).read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        fields[name.strip()] = value * 1024 if len(parts) > 1 and parts[1].lower() == "kb" else value
    missing = [k for k in ("MemTotal", "MemAvailable") if k not in fields]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} line (not a Linux meminfo file, or a kernel before 3.14)")
    return MemInfo(total=fields["MemTotal"], available=fields["MemAvailable"], cached=fields.get("Cached", 0))


class MeminfoReader:
    """A callable that reads one :class:`MemInfo` from ``path`` (default ``/proc/meminfo``)."""

    def __init__(self, path: str | Path = MEMINFO_PATH) -> None:
        self.path = Path(path)

    def __call__(self) -> MemInfo:
        return read_meminfo(self.path)

    def __repr__(self) -> str:
        return f"MeminfoReader({str(self.path)!r})"

"""Host memory as the kernel reports it: ``/proc/meminfo``, read from a path that tests can point elsewhere.

``psutil.virtual_memory()`` reads the same file, but the guard must be fed a *replay* (a fake file rewritten
while it runs) in tests, so the reader takes a path and parses the three fields it needs itself.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from autotune.core.inputs import read_input

__all__ = ["GIB", "MEMINFO_PATH", "MachineFileError", "MemInfo", "MeminfoReader", "gib", "read_meminfo"]

GIB = 1024 ** 3
MEMINFO_PATH = "/proc/meminfo"


def gib(n_bytes: float | None) -> str:
    """``12.3 GiB`` (``?`` when unknown): the one way figures are written in messages."""
    return "?" if n_bytes is None else f"{n_bytes / GIB:.1f} GiB"


#: The most of the file that is read: a real meminfo is under 2 KB; a bound keeps a wrong path (or a file that
#: never ends) from being read whole.
_MAX_FILE_BYTES = 1024 * 1024


class MachineFileError(ValueError):
    """A file of the machine's (``/proc/meminfo``) that autotune cannot believe: one line naming the file, the line
    and the fix. Not the user's input: commands report it with exit status 1 (issue 44)."""


#: What to do about a meminfo file autotune cannot read.
_FIX = ("fix: run autotune on a Linux host of kernel 3.14 or later, or in a container that shows the host's "
        "/proc/meminfo (the memory guard and the settle read it)")

#: The fields autotune reads, each ``<whole number> kB`` in every kernel's meminfo.
_FIELDS = ("MemTotal", "MemAvailable", "Cached")
#: More memory than any one host has had (64 PiB): a larger figure is a damaged reading, not a machine.
_MAX_BYTES = 64 * 1024 ** 5


@dataclasses.dataclass(frozen=True)
class MemInfo:
    """One sample of host memory, in bytes (a reading of the file is checked by :func:`read_meminfo`; the
    simulator builds its own, which may model memory past the total).

    Attributes:
        total: MemTotal.
        available: MemAvailable: what can be allocated without swapping (on a GB10 also what the GPU can get).
        cached: Cached: the page cache, which vLLM's start-up profiling on unified memory counts as used.
    """

    total: int
    available: int
    cached: int


def _impossible(total: int, available: int, cached: int) -> str | None:
    """Why these figures cannot be one host's memory (``None``: they can)."""
    for name, value in (("MemTotal", total), ("MemAvailable", available), ("Cached", cached)):
        if value > _MAX_BYTES:
            return f"{name} {gib(value)} is more than any host has"
    if total == 0:
        return "MemTotal is 0"
    if available > total:
        return f"MemAvailable {gib(available)} exceeds MemTotal {gib(total)}"
    return None


def read_meminfo(path: str | Path = MEMINFO_PATH) -> MemInfo:
    """Parse ``path`` (``/proc/meminfo`` format: ``Name:   1234 kB``).

    The fields autotune uses must read ``<whole number> kB``: a line of them that does not (``abc kB``, ``-5 kB``,
    ``nan kB``, a figure without its unit) is an error naming the line, never skipped or taken in another unit, so a
    damaged file is never believed. Other lines are not read.

    Raises:
        MachineFileError: one line: the file cannot be read, a field is missing (a kernel older than 3.14, or not a
            meminfo file) or malformed, or the figures cannot be true together.
    """
    try:
        text = read_input(path, _MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise MachineFileError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc}); {_FIX}") from None
    fields: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        name, _, rest = line.partition(":")
        name = name.strip()
        if name not in _FIELDS:
            continue
        parts = rest.split()
        if len(parts) != 2 or parts[1] != "kB" or not parts[0].isdigit():
            raise MachineFileError(f"{path}: line {number} {line.strip()[:80]!r} is not '{name}: <whole number> "
                                   f"kB' (a damaged or foreign meminfo file); {_FIX}")
        fields[name] = int(parts[0]) * 1024
    missing = [k for k in _FIELDS[:2] if k not in fields]
    if missing:
        raise MachineFileError(f"{path}: no {', '.join(missing)} line (not a Linux meminfo file, or a kernel before "
                               f"3.14); {_FIX}")
    info = MemInfo(total=fields["MemTotal"], available=fields["MemAvailable"], cached=fields.get("Cached", 0))
    problem = _impossible(info.total, info.available, info.cached)
    if problem is not None:
        raise MachineFileError(f"{path}: {problem} (a damaged or foreign meminfo file); {_FIX}")
    return info


class MeminfoReader:
    """A callable that reads one :class:`MemInfo` from ``path`` (default ``/proc/meminfo``)."""

    def __init__(self, path: str | Path = MEMINFO_PATH) -> None:
        self.path = Path(path)

    def __call__(self) -> MemInfo:
        return read_meminfo(self.path)

    def __repr__(self) -> str:
        return f"MeminfoReader({str(self.path)!r})"

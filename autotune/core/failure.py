"""Why a restart failed, as a kind: :class:`FailureKind`, read by :func:`kind_of`.

A failed restart carries its kind (:attr:`~autotune.core.records.RestartResult.failure_kind`), set by the engine
that knew it (the memory guard's kill, a restart lost with the forkserver host); callers ask :func:`kind_of`, never
the error text. Restarts stored by older autotune have only the error line: for them the kind is read from the
prefix their reason starts with (:data:`GUARD_PREFIX`, :data:`LOST_PREFIX`), inside :func:`kind_of` alone. The
reasons keep their prefixes (a person reads them, and an older autotune reading a newer study still counts them).
"""

from __future__ import annotations

import enum
from typing import Protocol

__all__ = ["GUARD_PREFIX", "LOST_PREFIX", "FailureKind", "kind_of"]

#: Every memory-guard failure reason starts with this (``machine/_guard.py`` writes it).
GUARD_PREFIX = "memory guard:"
#: A restart lost with the forkserver host that forked it (``engines/vllm/_forkserver.py`` writes it).
LOST_PREFIX = "restart lost:"


class FailureKind(str, enum.Enum):
    """What made a restart fail. A ``str`` enum: its value is what the store keeps."""

    #: The memory guard killed the engine (host memory fell below the floor): the machine's doing, at first.
    GUARD = "guard"
    #: Lost with the forkserver host that forked it (the OOM killer took the host): the machine's doing.
    LOST = "lost"
    #: No result within the engine's deadline.
    TIMEOUT = "timeout"
    #: Anything else: the engine said it failed, or said something impossible (the configuration's doing).
    ENGINE = "engine"

    @property
    def transient(self) -> bool:
        """Whether a failure of this kind says nothing yet about the configuration (:mod:`autotune.core.transient`)."""
        return self in (FailureKind.GUARD, FailureKind.LOST)


class _Restart(Protocol):
    """What :func:`kind_of` reads of a :class:`~autotune.core.records.RestartResult` (which imports this module, so
    it is named by its shape here, not imported)."""

    @property
    def ok(self) -> bool: ...
    @property
    def status(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def failure_kind(self) -> FailureKind | None: ...


def kind_of(result: _Restart) -> FailureKind | None:
    """The kind of ``result``'s failure; ``None`` for a restart that did not fail.

    The one reader of a failure's kind: the kind the engine set, else (a restart stored before restarts carried
    one) the prefix of its error line, else its status.
    """
    if result.ok:
        return None
    if result.failure_kind is not None:
        return result.failure_kind
    error = result.error or ""
    if error.startswith(GUARD_PREFIX):
        return FailureKind.GUARD
    if error.startswith(LOST_PREFIX):
        return FailureKind.LOST
    if result.status == "timeout":
        return FailureKind.TIMEOUT
    return FailureKind.ENGINE

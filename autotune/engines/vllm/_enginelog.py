"""One restart's vLLM log, read once and parsed once: :class:`EngineLog`.

After a restart the engine asks its log many things: what the start-up changed (:class:`._logparse.LogFindings`:
the resolved configuration's notes), the memory and capacity it reported (:class:`._kvfacts.KvFacts`: the restart's
facts and its phases), which compile caches it filled, and why it failed. The file is read here once and each
parse made once; every reader takes the same :class:`EngineLog`.
"""

from __future__ import annotations

import dataclasses
import os

from autotune.engines.vllm._kvfacts import KvFacts, parse_kv_facts
from autotune.engines.vllm._logparse import LogFindings, parse_startup_log

__all__ = ["EngineLog"]


@dataclasses.dataclass(frozen=True)
class EngineLog:
    """A restart's log and what it says, parsed once.

    Attributes:
        text: The whole log (stdout and stderr together); empty when there is none.
        findings: The start-up lines that changed the plan.
        kv: The memory and capacity facts vLLM printed at start-up.
    """

    text: str
    findings: LogFindings
    kv: KvFacts

    @classmethod
    def of(cls, text: str) -> EngineLog:
        """The log ``text`` parsed."""
        return cls(text, parse_startup_log(text), parse_kv_facts(text))

    @classmethod
    def read(cls, path: str | os.PathLike[str] | None) -> EngineLog:
        """The log file at ``path`` read and parsed; a missing or unreadable one is an empty log."""
        if not path:
            return cls.of("")
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return cls.of(fh.read())
        except OSError:
            return cls.of("")

"""The engines' two errors, apart from the base class: the options' models raise them, and the base class names the
options' model, so neither module may import the other for them."""

from __future__ import annotations

__all__ = ["EngineError", "EngineOptionError"]


class EngineError(Exception):
    """The engine cannot be used at all (not installed, bad settings): a one-line message naming the fix.

    A single restart that fails is *not* an EngineError: it is a :class:`RestartResult` with a failed status.
    """


class EngineOptionError(EngineError):
    """An engine option the user gave (the space's ``engine.<name>`` section, ``--engine-opt``, a study's stored
    options) that the engine refuses: bad input, which the commands report with exit status 2 (issue 44)."""

"""Exit statuses of the ``autotune`` command."""

from __future__ import annotations

import enum

__all__ = ["ExitStatus"]


class ExitStatus(enum.IntEnum):
    """Process exit codes; scripts can rely on them."""

    SUCCESS = 0
    #: The engine or a dependency failed in a way no restart could absorb.
    ERROR = 1
    #: Bad input: a bad search space, an unknown study, a bad flag. The message names the field and the fix.
    BAD_INPUT = 2
    #: ``audit --strict`` found a configuration the engine changed silently; ``recheck``: the engine now resolves the
    #: stored winner (or baseline) to another configuration ("engine changed the configuration").
    CHANGED = 3
    #: Nothing to act on yet, e.g. ``export`` or ``recheck`` of a study whose verification has not finished.
    NO_RESULT = 4
    #: ``recheck``: a change the data support: the winner's speedup over the baseline fell by more than the margin
    #: ("changed: now slower"), or the winner or the baseline fails today ("changed: fails now").
    NO_LONGER_FASTER = 5
    #: ``recheck``: as 5, and today the winner is slower than the baseline ("changed: now slower than the baseline";
    #: two engines compared: slower on the new engine).
    NOW_SLOWER = 6
    #: ``recheck``: a change the data support: the speedup rose by more than the margin ("changed: now faster").
    NOW_FASTER = 7
    #: SIGHUP (the terminal or ssh session closed), handled exactly like Ctrl-C: saved, resumable. 128 + 1, the
    #: status a shell gives a process its hangup ended.
    HANGUP = 129
    #: Ctrl-C (SIGINT); the study is saved and the same command resumes.
    INTERRUPTED = 130
    #: SIGTERM (``docker stop``, systemd, Slurm), handled exactly like Ctrl-C: saved, resumable.
    TERMINATED = 143

    @classmethod
    def for_signal(cls, signum: int | None) -> ExitStatus:
        """The status for an interruption by ``signum`` (SIGINT when unknown)."""
        return {1: cls.HANGUP, 15: cls.TERMINATED}.get(signum or 2, cls.INTERRUPTED)

"""Termination signals taken like Ctrl-C, and never lost (moved here from :mod:`autotune.engines.process`, which
re-exports the public names; issue 32 left that module room for the one scanner of tagged processes).

:func:`interrupt_on_sigterm` makes SIGTERM (``docker stop``, systemd, Slurm) and SIGHUP (a closed terminal or ssh
session) behave like Ctrl-C, so every ``except KeyboardInterrupt`` cleanup path runs for them too; a signal that
lands while the main thread holds a storage connection waits for it (:func:`hold_interruptions`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["TERMINATING_SIGNALS", "SignalInterrupt", "hold_interruptions", "interrupt_on_sigterm",
           "release_interruptions"]

#: Signals that end autotune the way Ctrl-C does (engines stopped, the trial queued again, runs closed, resumable):
#: SIGTERM (``docker stop``, systemd, Slurm) and SIGHUP (the terminal or ssh session closed).
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: How soon a signal whose interruption was swallowed (see :func:`interrupt_on_sigterm`) is delivered again.
_REDELIVER_S = 0.05
#: The longest a termination signal waits for the main thread to give a storage connection back. SQLite's busy
#: timeout is 30 s (store._storage.SQLITE_BUSY_TIMEOUT_S), so a transaction waiting on a lock ends well within it.
_HOLD_MAX_S = 60.0


class SignalInterrupt(KeyboardInterrupt):
    """A termination signal delivered as an interruption, so it takes Ctrl-C's cleanup paths.

    Attributes:
        signum: The signal number.
        signal_name: ``SIGTERM``, ``SIGHUP``.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.signal_name = signal.Signals(signum).name


class _Delivery:
    """One block's termination signal: whether an interruption is still owed for it.

    The handler raises :class:`SignalInterrupt` wherever the main thread happens to be. When that is a
    ``__del__`` or a garbage-collection callback (an SQLite connection's finalizer, MLflow's), Python prints
    "Exception ignored in ..." and carries on: the signal would be lost and the run would end with status 0. So
    the interruption is *owed* from the moment the signal arrives until it has been raised somewhere that does
    not swallow it. ``sys.unraisablehook`` tells which raises were swallowed: the signal is then sent again a
    moment later, when the finalizer has returned, and if the block ends first it raises on the way out.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.owed = False
        self.active = True
        self.lock = threading.Lock()

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum, self.owed = signum, True
        if self.owed and signum == self.signum and _deferral.holding():
            # Inside a storage transaction: raising here would leave it half done, its lock held (SQLite: the
            # cleanup's own writes then fail "database is locked"). Delivered when the connection goes back.
            _deferral.owe(self)
            return
        # Only the first signal interrupts: later ones arrive while the interruption is being cleaned up (engines
        # stopped, trials marked, runs closed) and must not cut that short.
        if self.owed and signum == self.signum:
            self.owed = False
            raise SignalInterrupt(signum)

    def redeliver_soon(self) -> None:
        """Send the owed signal again a moment from now, from a timer thread (the main thread runs the handler
        at its next bytecode, wherever that is: never from inside the code that found the signal owed)."""
        timer = threading.Timer(_REDELIVER_S, self._redeliver)
        timer.daemon = True
        timer.start()

    def swallowed(self, exc: BaseException) -> bool:
        """Called for an unraisable exception: whether it was this block's interruption (now owed again)."""
        if not isinstance(exc, SignalInterrupt) or exc.signum != self.signum:
            return False
        self.owed = True
        self.redeliver_soon()
        return True

    def _redeliver(self) -> None:
        with self.lock:
            if self.active and self.owed and self.signum is not None:
                os.kill(os.getpid(), self.signum)

    def close(self) -> int | None:
        """End the block: the signal still owed (it was swallowed and not raised since), if any."""
        with self.lock:
            self.active = False
            return self.signum if self.owed else None


class _Deferral:
    """Stretches of the main thread a termination signal must not cut: while it holds a storage connection.

    The storage layer calls :func:`hold_interruptions` and :func:`release_interruptions` as the main thread takes
    and gives back a database connection (SQLAlchemy's pool ``checkout``/``checkin``); other threads' connections
    (the heartbeat's) do not count, since only the main thread is interrupted.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.since = 0.0
        self.pending: _Delivery | None = None

    def holding(self) -> bool:
        # Bounded: a connection the pool never reported back must not make autotune deaf to SIGTERM.
        return self.depth > 0 and time.monotonic() - self.since < _HOLD_MAX_S

    def owe(self, delivery: _Delivery) -> None:
        self.pending = delivery
        # Delivered at the checkin; and once more after the bound, in case no checkin ever comes.
        timer = threading.Timer(_HOLD_MAX_S + _REDELIVER_S, delivery._redeliver)
        timer.daemon = True
        timer.start()

    def enter(self) -> None:
        if threading.current_thread() is threading.main_thread():
            if self.depth == 0:
                self.since = time.monotonic()
            self.depth += 1

    def leave(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self.depth == 0:
            return
        self.depth -= 1
        if self.depth == 0 and self.pending is not None:
            delivery, self.pending = self.pending, None
            delivery.redeliver_soon()


_deferral = _Deferral()


def hold_interruptions() -> None:
    """The main thread took a storage connection: a termination signal waits until it is given back."""
    _deferral.enter()


def release_interruptions() -> None:
    """The main thread gave a storage connection back: a signal that waited is delivered a moment later."""
    _deferral.leave()


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`SignalInterrupt` (a ``KeyboardInterrupt``) in the main
    thread, and the interruption is never lost (see :class:`_Delivery`): if it was swallowed inside a finalizer,
    it is raised again shortly, or at the latest when the block ends.

    Only the first signal raises. Outside the main thread this is a no-op.
    """
    delivery = _Delivery()
    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in TERMINATING_SIGNALS:
            previous[sig] = signal.signal(sig, delivery.handler)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    previous_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not delivery.swallowed(unraisable.exc_value):
            previous_hook(unraisable)

    sys.unraisablehook = hook
    owed = None
    try:
        yield
        owed = delivery.close()
    finally:
        delivery.close()
        sys.unraisablehook = previous_hook
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if owed is not None:
        raise SignalInterrupt(owed)

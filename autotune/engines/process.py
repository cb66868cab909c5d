"""One engine process and everything it starts: a new session, a deadline, a group kill with grace, a reap.

Every process autotune starts for an engine (a ``cmd`` wrapper, a vLLM runner, the MLflow UI server) goes
through :class:`EngineProcess`:

* it runs in a fresh session, so it is its own process group: the terminal's Ctrl-C reaches only autotune,
  and ``killpg`` stops the engine with everything it spawned (compile workers, tokenizer pools, an engine core);
* stopping is SIGTERM to the group, up to ``grace_s`` for it to exit, then SIGKILL, then waiting until no live
  member is left (zombies of reparented grandchildren hold nothing);
* a process that leaves the group (a daemon that double-forks and calls ``setsid``) is still found: every
  process started for an engine carries a tag in its environment, which its descendants inherit, and anything
  tagged that outlives the stop is killed and reported. On Linux autotune also becomes a child subreaper
  (``prctl(PR_SET_CHILD_SUBREAPER)``), so such orphans are re-parented to it rather than to init and their exit
  status is reaped here instead of lingering.

:func:`interrupt_on_sigterm` makes SIGTERM (``docker stop``, systemd, Slurm) and SIGHUP (a closed terminal or ssh
session) behave like Ctrl-C, so every ``except KeyboardInterrupt`` cleanup path runs for them too.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

import psutil

__all__ = [
    "TAG_ENV",
    "EngineProcess",
    "SignalInterrupt",
    "Survivor",
    "TERMINATING_SIGNALS",
    "enable_subreaper",
    "group_alive",
    "interrupt_on_sigterm",
    "kill_group",
    "orphaned_engine_processes",
    "process_name",
    "stop_live",
    "stop_orphans",
    "tagged_processes",
    "wait_gone",
]

#: Environment variable every engine process (and so every descendant) carries: ``<autotune pid>-<uuid>``.
TAG_ENV = "AUTOTUNE_PROCESS_TAG"
#: ``PR_SET_CHILD_SUBREAPER`` from ``<linux/prctl.h>``.
_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.05
#: How long SIGKILLed processes get to disappear (the kernel tears them down asynchronously).
_KILL_WAIT_S = 5.0

_log = logging.getLogger(__name__)
_subreaper: bool | None = None


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
    previous: dict[int, Any] = {}
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


def enable_subreaper() -> bool:
    """Make this process a child subreaper (Linux): orphaned descendants are re-parented to it. Once per process.

    Returns:
        Whether it is one (``False`` off Linux or if the kernel refused).
    """
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except (OSError, AttributeError):
                _subreaper = False
    return _subreaper


@dataclasses.dataclass(frozen=True)
class Survivor:
    """A process started for an engine that escaped its process group; it was killed."""

    pid: int
    name: str

    def __str__(self) -> str:
        return f"{self.pid} ({self.name})"


# -- finding processes (psutil) --------------------------------------------------------------------------
# psutil reads the process table (``/proc`` on Linux); a process can vanish between two reads, and another user's
# environment cannot be read, so every lookup treats both as "not one of ours".

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied)  # ZombieProcess is a NoSuchProcess
_DEAD_STATES = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def process_name(pid: int) -> str | None:
    """The short name of ``pid`` (``comm`` on Linux), ``None`` when it is gone."""
    try:
        return psutil.Process(pid).name()
    except _GONE:
        return None


def _live(pid: int) -> bool:
    """Whether ``pid`` is running (a zombie is not: it holds nothing but its exit status)."""
    try:
        return psutil.Process(pid).status() not in _DEAD_STATES
    except _GONE:
        return False


def _tags() -> Iterator[tuple[psutil.Process, str]]:
    """Every live process we may read that carries :data:`TAG_ENV`, with its tag (a zombie shows no environment)."""
    for proc in psutil.process_iter():
        try:
            tag = proc.environ().get(TAG_ENV)
        except (psutil.Error, OSError):
            continue  # gone, a zombie, or not ours to read
        if tag is not None:
            yield proc, tag


def tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries ``TAG_ENV=tag``: an engine's descendants (a zombie's environment
    is gone, so zombies are not found here)."""
    return [proc.pid for proc, found in _tags() if found == tag]


def _started(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), ``None`` when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except _GONE:
        return None


def orphaned_engine_processes() -> list[int]:
    """Live engine processes whose autotune is gone: what a ``kill -9``'d autotune left running.

    Every engine process carries :data:`TAG_ENV`, which starts with the pid of the autotune that started it.
    When that pid is gone, or now belongs to a process that started after the engine did (a reused pid), no
    autotune will ever stop the engine.
    """
    me = os.getpid()
    found = []
    for proc, tag in _tags():
        pid = proc.pid
        if not _live(pid):
            continue
        try:
            owner = int(tag.split("-", 1)[0])
        except ValueError:
            continue
        if owner == me or owner == pid:
            continue
        owner_start, start = _started(owner), _started(pid)
        if _live(owner) and owner_start is not None and start is not None and owner_start <= start:
            continue  # its autotune still runs and will stop it
        found.append(pid)
    return found


def stop_orphans() -> list[Survivor]:
    """Kill the engine processes a killed autotune left running (SIGKILL cannot be handled: the next one cleans up).

    Returns them (also logged as a warning).
    """
    killed = []
    for pid in orphaned_engine_processes():
        name = process_name(pid)
        if name is None:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(Survivor(pid, name))
    wait_gone([s.pid for s in killed])
    if killed:
        _log.warning("autotune: stopped %d engine process(es) left running by an autotune that was killed: %s",
                     len(killed), ", ".join(map(str, killed)))
    return killed


def wait_gone(pids: Sequence[int]) -> None:
    """Wait up to :data:`_KILL_WAIT_S` until the SIGKILLed ``pids`` are no longer running."""
    deadline = time.monotonic() + _KILL_WAIT_S
    for pid in pids:
        while time.monotonic() < deadline and _live(pid):
            time.sleep(_POLL_S)


def _group_has_live_member(pgid: int) -> bool:
    """Whether any non-zombie process is in ``pgid`` (zombies of reparented grandchildren hold no resources)."""
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() not in _DEAD_STATES:
                return True
        except (psutil.Error, OSError):
            continue  # gone meanwhile
    return False


def _session(pid: int) -> int | None:
    """The session id of ``pid`` (psutil does not report it), ``None`` when it is gone."""
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already, or only zombies left
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a live (non-zombie) member."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _group_has_live_member(pgid)


def kill_group(pgid: int, grace_s: float = 5.0) -> None:
    """Stop a whole process group: SIGTERM, wait up to ``grace_s``, then SIGKILL and wait until it is gone.

    Callers reap their direct child first (a zombie still counts as a group member for ``killpg``).
    """
    if not group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(_POLL_S)
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + _KILL_WAIT_S
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(_POLL_S)


def _reap_orphans(pids: set[int], sessions: set[int]) -> None:
    """Collect zombie children of ours that were an engine's descendants (re-parented to us, the subreaper).

    A zombie no longer shows its environment, so it is recognised by its pid or its session (an engine's own
    session, or one a tagged descendant made with setsid). Children we started ourselves are reaped by their
    ``Popen`` and never match.
    """
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE or not (child.pid in pids or os.getsid(child.pid) in sessions):
                continue
        except (psutil.Error, OSError):
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(child.pid, os.WNOHANG)


# -- the process -----------------------------------------------------------------------------------------

#: Engine processes started and not stopped yet (see :func:`stop_live`).
_LIVE: set[EngineProcess] = set()


#: The signals that interrupt autotune; held while an engine starts (see :func:`_signals_held`).
_HELD_SIGNALS = (signal.SIGINT, *TERMINATING_SIGNALS)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP wait; the first one that arrived is delivered again when it ends.

    An engine's start cannot be made safe against an interruption that lands inside it: ``Popen`` learns the
    child's pid only when the fork returns, and a handler that raises right there (where Python runs it) leaves a
    running engine that no object holds and no cleanup can find until the next autotune sweeps for orphans. So
    the interruption waits until the engine is registered in :data:`_LIVE`, and then takes its usual path. (Masking
    the signals in the kernel instead would be inherited by the engine, which could then not be stopped
    gracefully.) Python runs signal handlers in the main thread only; elsewhere the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread() or any(
            signal.getsignal(sig) is None for sig in _HELD_SIGNALS):  # a handler installed from C: not ours to swap
        yield
        return
    pending: list[int] = []
    previous: dict[int, Any] = {}
    try:
        for sig in _HELD_SIGNALS:
            previous[sig] = signal.signal(sig, lambda signum, frame: pending.append(signum))
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])  # to the handler it was meant for: Ctrl-C's, SIGTERM's, or the default


def stop_live() -> None:
    """Stop every engine process still running: what an interruption between its start and its ``with`` left."""
    for proc in list(_LIVE):
        proc.stop()


class EngineProcess:
    """One process started for an engine, in its own session, stopped with everything it started.

    Use it as a context manager: leaving the block by any route (a result, an error, Ctrl-C, SIGTERM) stops
    the process group and every escaped descendant.

    Args:
        argv: The command.
        stdin, stdout, stderr: As for :class:`subprocess.Popen` (files, not pipes, for long-running engines).
        env: The environment (``None``: ours); the tag is added.
        cwd: Working directory.

    Raises:
        OSError: the command cannot be started.
    """

    def __init__(self, argv: Sequence[str], *, stdin: IO[Any] | int | None = None,
                 stdout: IO[Any] | int | None = None, stderr: IO[Any] | int | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        enable_subreaper()
        self.tag = f"{os.getpid()}-{uuid.uuid4().hex}"
        full_env = dict(os.environ if env is None else env)
        full_env[TAG_ENV] = self.tag
        self.argv = list(argv)
        self.survivors: list[Survivor] = []
        self._stopped = False
        # Ctrl-C or SIGTERM landing while the child starts would raise before anything holds it, and the engine
        # would run on unstopped: the interruption waits until it is registered, and stop_live() (which the study
        # and the command call on every interruption) stops what is registered here.
        with _signals_held():
            self.popen: subprocess.Popen[Any] = subprocess.Popen(
                self.argv, stdin=stdin, stdout=stdout, stderr=stderr, env=full_env, cwd=cwd, start_new_session=True)
            self.pid = self.popen.pid
            _LIVE.add(self)

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the session leader; raises :class:`subprocess.TimeoutExpired` like ``Popen.wait``."""
        return self.popen.wait(timeout=timeout)

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the whole group (no effect once it is gone)."""
        _signal_group(self.pid, signal.Signals(sig))

    def stop(self, grace_s: float = 5.0) -> list[Survivor]:
        """Stop the leader and its group (SIGTERM, ``grace_s``, SIGKILL), reap it, then kill escaped descendants.

        Safe to call twice. Returns the descendants that had left the group (also logged as a warning).
        """
        if self._stopped:
            return self.survivors
        # Who the engine's descendants are, while they still show their environment: their exits are ours to
        # collect once they are re-parented here.
        seen = {pid: sid for pid in tagged_processes(self.tag) if (sid := _session(pid)) is not None}
        if self.popen.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.popen.wait()
        # The leader is reaped; whatever is left of its group (an engine core that ignored SIGTERM) goes now.
        kill_group(self.pid, grace_s=grace_s)
        self.survivors = self._kill_escaped(seen)
        _reap_orphans(set(seen), {self.pid, *seen.values()})
        self._stopped = True
        _LIVE.discard(self)
        return self.survivors

    def _kill_escaped(self, seen: dict[int, int]) -> list[Survivor]:
        """Kill tagged processes that outlived the group (they left it with setsid); adds them to ``seen``."""
        escaped: list[Survivor] = []
        for pid in tagged_processes(self.tag):
            name, sid = process_name(pid), _session(pid)
            if pid == self.pid or name is None or sid is None or not _live(pid):
                continue
            escaped.append(Survivor(pid, name))
            seen[pid] = sid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        wait_gone([s.pid for s in escaped])
        if escaped:
            _log.warning("autotune: killed %d process(es) that had left the engine's process group: %s (command: "
                         "%s)", len(escaped), ", ".join(map(str, escaped)), " ".join(self.argv)[:200])
        return escaped

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
  status is reaped here instead of lingering;
* a container it starts (``docker run``, ``podman run``) gets a name of its own and is killed by it when the process
  is stopped: the container is the daemon's child, in neither the group nor the tag (:mod:`._containers`).

This module is the one scanner of tagged processes (issue 32): the memory guard and the settle of ``machine/`` do
not scan for them, the engines hand them :func:`kill_started_since` (or :meth:`EngineProcess.kill_now`) and
:func:`engine_leftovers` (``machine/`` sits below ``engines/`` and may not import it).

:func:`interrupt_on_sigterm` (:mod:`._signals`) makes SIGTERM (``docker stop``, systemd, Slurm) and SIGHUP (a closed
terminal or ssh session) behave like Ctrl-C, so every ``except KeyboardInterrupt`` cleanup path runs for them too.
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
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import IO, Any

import psutil

from autotune.engines._containers import Container, kill_container, named_run, stop_orphan_containers
from autotune.engines._logs import RedactedLog, scrub_log
from autotune.engines._tag import current_scope, new_tag, scope_of, set_scope, tag_scope
from autotune.engines._signals import (TERMINATING_SIGNALS, SignalInterrupt, hold_interruptions, interrupt_on_sigterm,
                                       release_interruptions)

__all__ = [
    "TAG_ENV",
    "Adopted",
    "EngineProcess",
    "RedactedLog",
    "SignalInterrupt",
    "Survivor",
    "TERMINATING_SIGNALS",
    "enable_subreaper",
    "engine_leftovers",
    "group_alive",
    "hold_interruptions",
    "interrupt_on_sigterm",
    "kill_group",
    "kill_started_since",
    "new_tag",
    "orphaned_engine_processes",
    "own_tagged",
    "process_name",
    "release_interruptions",
    "run_bounded",
    "scope_of",
    "scrub_log",
    "set_scope",
    "stop_live",
    "stop_orphans",
    "tagged_processes",
    "wait_gone",
]

#: Environment variable every engine process (and so every descendant) carries: ``<autotune pid>-<scope>-<uuid>``
#: (:func:`new_tag`).
TAG_ENV = "AUTOTUNE_PROCESS_TAG"
#: ``PR_SET_CHILD_SUBREAPER`` from ``<linux/prctl.h>``.
_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.05
#: How long SIGKILLed processes get to disappear (the kernel tears them down asynchronously).
_KILL_WAIT_S = 5.0

_log = logging.getLogger(__name__)
_subreaper: bool | None = None


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


def _own_prefix() -> str:
    return f"{os.getpid()}-"


def own_tagged(owner_prefix: str | None = None) -> set[int]:
    """Live processes tagged by this autotune (their tag starts with ``owner_prefix``, by default this process's
    ``<pid>-``), never this process itself: what a restart's start is told apart from."""
    prefix = _own_prefix() if owner_prefix is None else owner_prefix
    me = os.getpid()
    return {proc.pid for proc, tag in _tags() if proc.pid != me and tag.startswith(prefix)}


def kill_started_since(before: Collection[int], owner_prefix: str | None = None) -> list[int]:
    """SIGKILL, at once, what this autotune started since ``before`` (:func:`own_tagged` taken before a start): the
    process group of every such tagged process (never our own group), and the container of every live
    :class:`EngineProcess` started since (:meth:`EngineProcess.kill_now`). The memory guard's kill for an engine
    started inside a launcher, where no handle to it is at hand when the guard trips (``before`` holds a
    forkserver host that lives on). Returns the pids killed."""
    my_group = os.getpgrp()
    killed = []
    for pid in sorted(own_tagged(owner_prefix) - set(before)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != my_group:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    for proc in list(_LIVE):
        if proc.pid not in before and proc.container is not None:
            proc.kill_now()
    return killed


def engine_leftovers(owner_prefix: str | None = None, exclude_sessions: Collection[int] | None = None) -> list[str]:
    """Live processes this autotune tagged (``owner_prefix``, by default ours) outside ``exclude_sessions`` (by
    default the sessions of the live :class:`EngineProcess`es: a forkserver host meant to live on between restarts),
    as ``pid (name)``: what the settle before a start waits to see gone."""
    prefix = _own_prefix() if owner_prefix is None else owner_prefix
    sessions = {p.pid for p in list(_LIVE)} if exclude_sessions is None else set(exclude_sessions)
    found = []
    for proc, tag in _tags():
        if not tag.startswith(prefix) or _session(proc.pid) in sessions or not _live(proc.pid):
            continue
        found.append(f"{proc.pid} ({process_name(proc.pid) or '?'})")
    return found


def _started(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), ``None`` when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except _GONE:
        return None


def _orphans() -> list[tuple[int, str | None]]:
    """Live engine processes whose autotune is gone, each with the scope it was started for (one scan)."""
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
        found.append((pid, tag_scope(tag)))
    return found


def orphaned_engine_processes(scope: str | None = None) -> list[int]:
    """Live engine processes whose autotune is gone: what a ``kill -9``'d autotune left running.

    Every engine process carries :data:`TAG_ENV`, which starts with the pid of the autotune that started it.
    When that pid is gone, or now belongs to a process that started after the engine did (a reused pid), no
    autotune will ever stop the engine. ``scope``: only those started for that workdir (:func:`scope_of`).
    """
    return [pid for pid, started_for in _orphans() if scope is None or started_for == scope]


def stop_orphans() -> list[Survivor]:
    """Kill the engine processes, and the containers, a killed autotune left running for this workdir (SIGKILL
    cannot be handled: the next one cleans up).

    Only engines started for the same workdir (:func:`set_scope`) are killed: an orphan of a study in another
    workdir is another run's (another test's, another user session's), which this one did not start and cannot
    tell from one that is meant to be there. Those are reported, with their pids, since they may hold the GPU.

    Returns the processes killed (also logged as a warning; the containers are logged).
    """
    scope = current_scope()
    orphans = _orphans()
    killed = []
    for pid in (pid for pid, started_for in orphans if started_for == scope):
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
    elsewhere = [Survivor(pid, process_name(pid) or "?") for pid, started_for in orphans if started_for != scope]
    if elsewhere:
        _log.warning("autotune: %d engine process(es) left running by a killed autotune of another workdir, left "
                     "alone (they may hold the GPU; stop them with kill, or run autotune with their --workdir): %s",
                     len(elsewhere), ", ".join(map(str, elsewhere)))
    # A container is the daemon's child, with neither our tag nor our pid: its runtime lists it by our label.
    stop_orphan_containers(scope)
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


class Adopted:
    """What a restart left behind that neither its group nor its tag finds: a descendant that called ``setsid`` and
    cleared its environment (``setsid env -i sleep 619``, issue 44). Autotune is a child subreaper, so such a process
    is re-parented to autotune once its own parent is gone: it is a child of ours that we did not start.

    Taken when a process starts (:meth:`__init__`: our children then, and the time), and used when it is stopped
    (:meth:`kill`): a child of ours that is new since then, in a session other than ours (everything this process
    starts itself is either in our session, a plain ``Popen``, or a live :class:`EngineProcess`, which is excluded),
    is one the restart left. Only our own children are ever looked at, so nothing another program started (the shell,
    ``make``, a test runner's workers) is touched.
    """

    def __init__(self) -> None:
        self.since = _since_boot()
        self.before = _child_pids()

    def kill(self, exclude: Collection[int] = ()) -> list[Survivor]:
        """SIGKILL those children (and, as their own children are re-parented here in turn, theirs), reap them.
        Returns them."""
        if not enable_subreaper():
            return []  # off Linux: no child of another's becomes ours, and nothing here can be told apart
        own_session = _session(os.getpid())
        killed: list[Survivor] = []
        for _ in range(_ADOPTION_ROUNDS):  # a daemon's own children come to us only once it is gone
            found = []
            live = {p.pid for p in list(_LIVE)} | set(exclude)
            for child in _children():
                pid = child.pid
                if pid in self.before or pid in live:
                    continue
                try:
                    status, created = child.status(), child.create_time() - psutil.boot_time()
                except psutil.Error:
                    continue
                sid = _session(pid)
                if sid is None or sid == own_session or created < self.since - _CLOCK_SLACK_S:
                    continue
                if status in _DEAD_STATES:
                    continue  # holds nothing; its exit is left to whoever waits for it (a Popen of ours may)
                found.append(Survivor(pid, process_name(pid) or "?"))
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if not found:
                break
            wait_gone([s.pid for s in found])
            for survivor in found:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(survivor.pid, 0 if not _live(survivor.pid) else os.WNOHANG)
            killed += found
        return killed


#: Rounds of :meth:`Adopted.kill`: a chain of daemons comes to us one generation a round.
_ADOPTION_ROUNDS = 16
#: A process's start is counted in clock ticks since boot (USER_HZ, 10 ms): a child started just after
#: :class:`Adopted` may read up to a tick earlier.
_CLOCK_SLACK_S = 0.05


def _since_boot() -> float:
    """Now, in the time base of a process's start: seconds since boot.

    psutil gives a start as the boot's wall-clock time plus the ticks since boot, and the kernel states the boot's
    time in whole seconds (``btime``), so against ``time.time()`` a start just made can read up to a second early
    (0.73 s on a Firecracker VM here, where the adopted-daemon tests then found no daemon to kill). Both sides in
    seconds since boot compare exactly, to a tick.
    """
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


def _children() -> list[psutil.Process]:
    try:
        return psutil.Process().children()
    except psutil.Error:
        return []


def _child_pids() -> set[int]:
    return {child.pid for child in _children()}


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
    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in _HELD_SIGNALS:
            previous[sig] = signal.signal(sig, lambda signum, frame: pending.append(signum))
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])  # to the handler it was meant for: Ctrl-C's, SIGTERM's, or the default


def run_bounded(argv: Sequence[str], timeout_s: float, *, env: Mapping[str, str] | None = None,
                grace_s: float = 5.0) -> tuple[int | None, str, str]:
    """Run a short command (a check, not an engine) as an :class:`EngineProcess`: stdin closed, its output kept
    through temporary files (a descendant holding a pipe cannot block us), and stopped with everything it started,
    its container included, by ``timeout_s`` at the latest.

    Returns:
        ``(exit status, or None when it timed out; stdout; stderr)``.

    Raises:
        OSError: the command cannot be started.
    """
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        with EngineProcess(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env) as proc:
            try:
                code: int | None = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                code = None
            proc.stop(grace_s=grace_s)
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(errors="replace"), err.read().decode(errors="replace")


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
        self.adopted = Adopted()  # before the start: what is ours already is never taken for what it leaves
        self.tag = new_tag()
        full_env = dict(os.environ if env is None else env)
        full_env[TAG_ENV] = self.tag
        # A container runtime's client gets a container name of its own, so the container dies with it (_containers).
        self.container: Container | None
        self.argv, self.container = named_run(argv, self.tag)
        self.survivors: list[Survivor] = []
        self._stopped = False
        self._container_killed = False
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

    def kill_now(self) -> None:
        """SIGKILL the group and its container at once, with no grace (a memory-guard trip); :meth:`stop` still
        follows. Safe to call again: the container is killed until the runtime says it did (a client killed as it
        starts may leave the container to be created a moment later)."""
        self.signal_group(signal.SIGKILL)
        if self.container is not None and not self._container_killed:
            self._container_killed = kill_container(self.container, wait=False)

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
        if self.container is not None:
            # The container is the daemon's child, not in the group: the runtime kills it, and we wait (bounded).
            kill_container(self.container)
        self.survivors = self._kill_escaped(seen)
        _reap_orphans(set(seen), {self.pid, *seen.values()})
        # Those that left the session and cleared the tag too: re-parented to us, found as our children.
        adopted = self.adopted.kill(exclude={self.pid})
        if adopted:
            _log.warning("autotune: killed %d process(es) that had left the engine's session and environment: %s "
                         "(command: %s)", len(adopted), ", ".join(map(str, adopted)), " ".join(self.argv)[:200])
        self.survivors = [*self.survivors, *adopted]
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

"""A container started for an engine dies with it (issue 32, principle 5).

``docker run`` (and ``podman run``) is only a client: the container is the daemon's child, outside the client's
process group and without autotune's environment tag, so stopping the client - a group kill after ``kill_grace_s``,
or at once on a memory-guard trip - left the engine running with its memory after autotune had moved on or exited.
So :class:`~autotune.engines.process.EngineProcess` gives every container it starts a name of its own
(``--name=autotune-<tag>``: the process's tag, unique per start; a name the launcher sets itself is kept) and a label
naming the autotune that started it and the workdir it started it for (``autotune_owner=<pid>:<start time>:<scope>``),
and, when it stops the engine, also asks the runtime to kill that container and waits, bounded, until it has
stopped.

A ``kill -9``'d autotune cannot stop anything: the next study's start lists the labelled containers of each runtime
on ``PATH`` and kills those of its own workdir whose autotune is gone (:func:`stop_orphan_containers`), as it does
for orphaned engine processes.

Recognised: a command whose program is ``docker`` or ``podman`` (by its base name) running ``run`` or
``container run``, also behind the wrappers a launcher commonly puts first (``sudo``, ``env``, ``nice``,
``taskset``, ``numactl``, ...: :data:`WRAPPERS`). The runtime is then asked to kill through the same wrappers
(``sudo -n docker kill NAME``: ``-n`` because no one is there to type a password). A container started by a
script of the user's is not recognised: only its processes are stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence

import psutil

from autotune.engines._tag import tag_scope

__all__ = ["CONTAINER_RUNTIMES", "KILL_TIMEOUT_S", "NAME_PREFIX", "OWNER_LABEL", "WRAPPERS", "Container",
           "kill_container", "named_run", "orphan_containers", "owner_label", "stop_orphan_containers"]

_log = logging.getLogger(__name__)

#: Runtimes whose ``run`` starts a container the daemon owns.
CONTAINER_RUNTIMES = ("docker", "podman")
#: The longest ``RUNTIME kill`` and ``RUNTIME wait`` together may take: a daemon that does not answer in this time
#: is not waited on further (the next start's settle then finds memory not back and names the largest processes).
KILL_TIMEOUT_S = 30.0
#: What every container autotune names starts with.
NAME_PREFIX = "autotune-"
#: The label every container autotune starts carries: ``<pid>:<start time>`` of the autotune that started it (the
#: start time tells a reused pid apart). No dot in the key: podman's ``ps --format`` reads it as ``.Labels.KEY``.
OWNER_LABEL = "autotune_owner"
#: Programs that run the rest of their command line (``sudo docker run ...``): the runtime is looked for behind them.
WRAPPERS = ("sudo", "doas", "env", "nice", "ionice", "taskset", "numactl", "chrt", "stdbuf", "nohup", "timeout",
            "setpriv", "runuser")
#: The longest listing of a runtime's containers may take (a daemon that does not answer is skipped).
LIST_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class Container:
    """A container started by an engine process: how to call its runtime (the command's own program, behind the
    same wrappers, e.g. ``("sudo", "-n", "docker")``) and its name."""

    runtime: tuple[str, ...]
    name: str


def _runtime_index(argv: Sequence[str]) -> int | None:
    """Where the container runtime's program is in ``argv``: first, or behind a chain of :data:`WRAPPERS` (their
    options and values in between are skipped); None when the command runs no runtime."""
    if not argv:
        return None
    if os.path.basename(argv[0]) in CONTAINER_RUNTIMES:
        return 0
    if os.path.basename(argv[0]) not in WRAPPERS:
        return None
    return next((i for i, word in enumerate(argv[1:], 1) if os.path.basename(word) in CONTAINER_RUNTIMES), None)


def _run_index(argv: Sequence[str]) -> tuple[int, int] | None:
    """Where the runtime and its ``run`` are in the command (``docker run``, ``sudo podman container run``)."""
    at = _runtime_index(argv)
    if at is None:
        return None
    if len(argv) > at + 1 and argv[at + 1] == "run":
        return at, at + 1
    if len(argv) > at + 2 and argv[at + 1] == "container" and argv[at + 2] == "run":
        return at, at + 2
    return None


def _runtime_call(argv: Sequence[str], at: int) -> tuple[str, ...]:
    """The command prefix that calls the runtime as ``argv`` does: its wrappers, ``sudo``/``doas`` made
    non-interactive (a password prompt would hang the kill until its timeout)."""
    prefix = list(argv[: at + 1])
    if os.path.basename(prefix[0]) in ("sudo", "doas") and "-n" not in prefix[1:at]:
        prefix.insert(1, "-n")
    return tuple(prefix)


def owner_label(pid: int | None = None, scope: str | None = None) -> str:
    """``<pid>:<start time>[:<scope>]`` of this process (or ``pid``): the value of :data:`OWNER_LABEL`; ``scope``:
    the workdir the engine was started for (``engines.process.scope_of``), so only an autotune of the same workdir
    stops it once its owner is gone."""
    pid = os.getpid() if pid is None else pid
    label = f"{pid}:{psutil.Process(pid).create_time():.2f}"
    return f"{label}:{scope}" if scope else label


def _given_name(argv: Sequence[str]) -> str | None:
    for flag, value in zip(argv, [*argv[1:], None]):
        if flag == "--name" and value:
            return value
        if flag.startswith("--name="):
            return flag.split("=", 1)[1]
    return None


def named_run(argv: Sequence[str], tag: str) -> tuple[list[str], Container | None]:
    """``argv`` with ``--name=autotune-<tag>`` after ``run`` when it runs a container (a name it sets itself is kept),
    and the container it will start; ``argv`` unchanged and ``None`` for any other command."""
    found = _run_index(argv)
    if found is None:
        return list(argv), None
    runtime_at, at = found
    runtime = _runtime_call(argv, runtime_at)
    label = [f"--label={OWNER_LABEL}={owner_label(scope=tag_scope(tag))}"]
    given = _given_name(argv[at + 1:])
    if given is not None:
        return [*argv[: at + 1], *label, *argv[at + 1:]], Container(runtime, given)
    name = f"{NAME_PREFIX}{tag}"
    return [*argv[: at + 1], f"--name={name}", *label, *argv[at + 1:]], Container(runtime, name)


def kill_container(container: Container, timeout_s: float = KILL_TIMEOUT_S, wait: bool = True) -> bool:
    """SIGKILL ``container`` through its runtime (``RUNTIME kill NAME``), then with ``wait`` wait until it has stopped
    (``RUNTIME wait NAME``), both within ``timeout_s``. A container that is gone already is no error.

    Returns:
        Whether the runtime killed it (``False``: no such container, or the runtime failed or did not answer).
    """
    deadline = time.monotonic() + timeout_s
    killed = _runtime(container, "kill", timeout_s)
    if killed and wait:
        _runtime(container, "wait", max(0.1, deadline - time.monotonic()))
    return killed


def _runtime(container: Container, verb: str, timeout_s: float) -> bool:
    try:
        done = subprocess.run([*container.runtime, verb, container.name], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _owner_gone(label: str, alive: Callable[[int, float], bool]) -> tuple[bool, str | None]:
    """Whether the autotune an owner label names is gone (a label that does not parse is not ours to judge), and the
    workdir's scope the label carries (``None``: a label from before scopes)."""
    parts = label.strip().split(":")
    if len(parts) not in (2, 3):
        return False, None
    try:
        pid, started = int(parts[0]), float(parts[1])
    except ValueError:
        return False, None
    return not alive(pid, started), (parts[2] if len(parts) == 3 else None)


def _same_process_alive(pid: int, started: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def _orphans(runtimes: Sequence[str], alive: Callable[[int, float], bool]) -> list[tuple[Container, str | None]]:
    """Running containers labelled by an autotune that is gone, each with the workdir's scope its label carries: one
    listing per runtime on ``PATH``."""
    found = []
    for runtime in runtimes:
        if shutil.which(runtime) is None:
            continue
        # docker reads one label as {{.Label "k"}}; podman before 4.9 only as {{.Labels.k}}.
        field = f"{{{{.Labels.{OWNER_LABEL}}}}}" if os.path.basename(runtime) == "podman" else \
            f'{{{{.Label "{OWNER_LABEL}"}}}}'
        try:
            done = subprocess.run([runtime, "ps", "--filter", f"label={OWNER_LABEL}", "--format",
                                   f"{{{{.Names}}}}\t{field}"], stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=LIST_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode != 0:
            continue
        for line in done.stdout.splitlines():
            name, _, label = line.partition("\t")
            gone, scope = _owner_gone(label, alive)
            if name and gone:
                found.append((Container((runtime,), name.strip()), scope))
    return found


def orphan_containers(runtimes: Sequence[str] = CONTAINER_RUNTIMES,
                      alive: Callable[[int, float], bool] = _same_process_alive,
                      scope: str | None = None) -> list[Container]:
    """Running containers labelled by an autotune that is gone (what a ``kill -9``'d study left), per runtime on
    ``PATH``; ``scope``: only those started for that workdir. A runtime whose daemon does not answer in
    :data:`LIST_TIMEOUT_S`, or refuses us (a root daemon a ``sudo`` launcher reaches), lists nothing: a container
    only ``sudo`` can see is not found here."""
    return [c for c, started_for in _orphans(runtimes, alive) if scope is None or started_for == scope]


def stop_orphan_containers(scope: str | None = None) -> list[Container]:
    """Kill the containers a killed autotune left running (logged as a warning); returns them. ``scope``: only
    those started for that workdir; another workdir's are reported and left running (not this run's to stop)."""
    orphans = _orphans(CONTAINER_RUNTIMES, _same_process_alive)
    killed = [c for c, started_for in orphans if (scope is None or started_for == scope) and kill_container(c)]
    if killed:
        _log.warning("autotune: stopped %d container(s) left running by an autotune that was killed: %s",
                     len(killed), ", ".join(c.name for c in killed))
    elsewhere = [c for c, started_for in orphans if scope is not None and started_for != scope]
    if elsewhere:
        _log.warning("autotune: %d container(s) left running by a killed autotune of another workdir, left alone "
                     "(stop them with docker kill, or run autotune with their --workdir): %s",
                     len(elsewhere), ", ".join(c.name for c in elsewhere))
    return killed

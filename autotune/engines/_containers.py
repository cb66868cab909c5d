"""A container started for an engine dies with it (issue 32, principle 5).

``docker run`` (and ``podman run``) is only a client: the container is the daemon's child, outside the client's
process group and without autotune's environment tag, so stopping the client - a group kill after ``kill_grace_s``,
or at once on a memory-guard trip - left the engine running with its memory after autotune had moved on or exited.
So :class:`~autotune.engines.process.EngineProcess` gives every container it starts a name of its own
(``--name=autotune-<tag>``: the process's tag, unique per start; a name the launcher sets itself is kept) and, when
it stops the engine, also asks the runtime to kill that container and waits, bounded, until it has stopped.

Recognised: a command whose program is ``docker`` or ``podman`` (by its base name) running ``run`` or
``container run``. Another wrapper around them (``sudo docker run``, a shell script) is not recognised: its
container is not named, and only its processes are stopped.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Sequence

__all__ = ["CONTAINER_RUNTIMES", "KILL_TIMEOUT_S", "NAME_PREFIX", "Container", "kill_container", "named_run"]

#: Runtimes whose ``run`` starts a container the daemon owns.
CONTAINER_RUNTIMES = ("docker", "podman")
#: The longest ``RUNTIME kill`` and ``RUNTIME wait`` together may take: a daemon that does not answer in this time
#: is not waited on further (the next start's settle then finds memory not back and names the largest processes).
KILL_TIMEOUT_S = 30.0
#: What every container autotune names starts with.
NAME_PREFIX = "autotune-"


@dataclasses.dataclass(frozen=True)
class Container:
    """A container started by an engine process: the runtime's program (as the command gave it) and its name."""

    runtime: str
    name: str


def _run_index(argv: Sequence[str]) -> int | None:
    """Where ``run`` is in a container runtime's command (``docker run``, ``podman container run``), else None."""
    if not argv or os.path.basename(argv[0]) not in CONTAINER_RUNTIMES:
        return None
    if len(argv) > 1 and argv[1] == "run":
        return 1
    if len(argv) > 2 and argv[1] == "container" and argv[2] == "run":
        return 2
    return None


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
    at = _run_index(argv)
    if at is None:
        return list(argv), None
    given = _given_name(argv[at + 1:])
    if given is not None:
        return list(argv), Container(argv[0], given)
    name = f"{NAME_PREFIX}{tag}"
    return [*argv[: at + 1], f"--name={name}", *argv[at + 1:]], Container(argv[0], name)


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
        done = subprocess.run([container.runtime, verb, container.name], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0

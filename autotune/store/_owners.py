"""Who runs a trial or holds a claim (:func:`owner_id`), and whether that process is gone (:func:`pid_dead`)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def machine_token() -> str:
    """This machine (and PID namespace): two processes with the same token can see each other's PIDs."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pidns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""  # not Linux: never judge a peer by its PID
    return f"{socket.gethostname()}/{boot}/{pidns}"


def owner_id(worker: int | None = None, gpus: str | None = None, cache_dir: str | None = None) -> dict[str, Any]:
    """Who runs a trial or holds a claim: for people reading the record, for same-machine liveness, and for
    which compile cache its engine starts warm (a configuration's first start in a cache is cold)."""
    machine = machine_token()
    cache = None if cache_dir is None else f"{machine or socket.gethostname()}:{os.path.realpath(cache_dir)}"
    return {"host": socket.gethostname(), "pid": os.getpid(), "machine": machine, "worker": worker,
            "gpus": gpus, "cache": cache}


def pid_dead(owner: Mapping[str, Any]) -> bool:
    """The owner ran on this machine and its process is gone (a PID reused since then reads as alive: safe)."""
    machine = owner.get("machine")
    if not machine or machine != machine_token() or not isinstance(owner.get("pid"), int):
        return False
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False

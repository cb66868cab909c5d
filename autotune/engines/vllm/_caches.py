"""The JIT caches a vLLM start fills, kept under the study's workdir, and whether a configuration's are present.

vLLM's compile cache lives under ``VLLM_CACHE_ROOT`` (``<workdir>/vllm-cache`` by default). Two more caches decide
how long a start takes and lived in the user's home: Triton's kernel cache (on the H200 MoE target its fused-MoE
JIT was most of a 190 s cold start) and FlashInfer's JIT workspace. Both are placed next to the compile cache, so
a workdir copied to another machine, or shared by workers, brings them along:

* ``TRITON_CACHE_DIR``: Triton's cache directory (``triton/knobs.py``: ``cache_knobs.dir`` reads
  ``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``, ``TRITON_HOME`` defaulting to ``~``).
* ``FLASHINFER_WORKSPACE_BASE``: FlashInfer's base directory (``flashinfer/jit/env.py``:
  ``FLASHINFER_BASE_DIR = $FLASHINFER_WORKSPACE_BASE or ~``; its JIT cache is ``<base>/.cache/flashinfer``).

A variable the user set, in their environment or in the space's ``engine.env``, is never overridden; nor is
Triton's when ``TRITON_HOME`` is set (it places Triton's cache too).

Cold or warm is decided from the caches themselves, not from the study's history: a configuration's first
successful start writes a marker listing what it left behind (the compile-cache directories vLLM logged, and
whether Triton's cache was filled), paths under the workdir kept relative so a copied workdir still matches. A
later start is warm only while all of that is still there: after a resume on a fresh machine with the database
copied but not the workdir, every first start is cold, and said so; with the workdir copied too, it is warm.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core.confine import open_confined

__all__ = ["STUDY_CACHES", "caches_empty", "caches_present", "jit_cache_env", "left_to_user", "record_caches",
           "triton_cache_dir"]

#: Each JIT cache autotune places under the workdir: its variable, and the workdir subdirectory.
STUDY_CACHES = {"TRITON_CACHE_DIR": "triton-cache", "FLASHINFER_WORKSPACE_BASE": "flashinfer"}
#: Variables that place each cache when the user sets them (any one of them leaves it to the user).
_PLACED_BY = {"TRITON_CACHE_DIR": ("TRITON_CACHE_DIR", "TRITON_HOME"),
              "FLASHINFER_WORKSPACE_BASE": ("FLASHINFER_WORKSPACE_BASE",)}

#: vLLM's log line naming a start's compile-cache directory (vllm/compilation/backends.py).
_COMPILE_DIR = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")


def jit_cache_env(work_dir: Path, user_env: Mapping[str, str], space_env: Mapping[str, str]) -> dict[str, str]:
    """The cache variables to set for the engine: each under ``work_dir`` unless the user placed it already."""
    out: dict[str, str] = {}
    for var, sub in STUDY_CACHES.items():
        if not any(name in user_env or name in space_env for name in _PLACED_BY[var]):
            out[var] = str(work_dir / sub)
    return out


def left_to_user(user_env: Mapping[str, str], space_env: Mapping[str, str]) -> list[str]:
    """The caches the user placed (``NAME=value`` of the variable that placed each), for saying so once."""
    out = []
    for var in STUDY_CACHES:
        for name in _PLACED_BY[var]:
            value = space_env.get(name, user_env.get(name))
            if value is not None:
                out.append(f"{name}={value}")
                break
    return out


def triton_cache_dir(env: Mapping[str, str]) -> Path:
    """Where Triton caches kernels under ``env`` (the engine process's environment), as ``triton.knobs`` decides."""
    if env.get("TRITON_CACHE_DIR"):
        return Path(env["TRITON_CACHE_DIR"])
    return Path(env.get("TRITON_HOME") or os.path.expanduser("~")) / ".triton" / "cache"


def _filled(path: Path) -> bool:
    try:
        return path.is_dir() and any(path.iterdir())
    except OSError:
        return False


def _stored(path: Path, work_dir: Path) -> str:
    """A path as the marker keeps it: relative to the workdir when under it (a copied workdir still matches)."""
    try:
        return str(Path(os.path.realpath(path)).relative_to(os.path.realpath(work_dir)))
    except ValueError:
        return str(path)


def _resolved(stored: str, work_dir: Path) -> Path:
    return Path(stored) if os.path.isabs(stored) else work_dir / stored


def record_caches(marker: Path, work_dir: Path, log_text: str, env: Mapping[str, str]) -> None:
    """After a configuration's start got ready: write ``marker`` with what its caches now hold."""
    # Only what this machine sees counts: a launcher's container may log paths that are not mounted here.
    dirs = sorted({_stored(Path(d), work_dir) for d in _COMPILE_DIR.findall(log_text) if _filled(Path(d))})
    data: dict[str, Any] = {"compile_dirs": dirs, "triton": _filled(triton_cache_dir(env))}
    if data["triton"]:
        data["triton_dir"] = _stored(triton_cache_dir(env), work_dir)
    with open_confined(work_dir, os.path.abspath(marker)) as fh:  # inside the study's directory, never through a link out of it
        fh.write(json.dumps(data))


def caches_empty(cache_root: Path, env: Mapping[str, str]) -> bool:
    """Whether every JIT cache a start would use is empty: the compile cache root, Triton's cache and FlashInfer's
    workspace (wherever ``env``, the engine process's environment, places them). A start then compiles the kernels
    every configuration shares, once per cache (on the H200: 170-190 s against 38-90 s for later cold starts)."""
    flashinfer = Path(env.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")) / ".cache" / "flashinfer"
    return not any(_filled(p) for p in (cache_root, triton_cache_dir(env), flashinfer))


def caches_present(marker: Path, work_dir: Path, cache_root: Path) -> bool:
    """Whether the configuration's caches are all still there (its next start is warm).

    A marker written before markers listed caches (an empty file) vouches for nothing but itself: the start is
    warm while the compile cache root it would have filled is not empty.
    """
    try:
        text = marker.read_text()
    except OSError:
        return False
    if not text.strip():
        return _filled(cache_root)
    try:
        data = json.loads(text)
    except ValueError:
        return False
    if not all(_filled(_resolved(d, work_dir)) for d in data.get("compile_dirs", [])):
        return False
    if data.get("triton") and not _filled(_resolved(str(data.get("triton_dir", "")), work_dir)):
        return False
    return True

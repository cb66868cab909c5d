"""The page-cache policy before each real start: ``engine.page_cache: keep | drop | warm``.

On unified memory (a GB10) vLLM's start-up counts the page cache against the KV budget, so the same flags give a
smaller KV cache on a cold start, whose weight load fills the cache, than on a warm one (NVIDIA/xr-ai #462).
A study compares restarts, so every start should see the same cache:

* ``keep`` does nothing (the default where the GPU has its own memory: there the cache is not the GPU's memory);
* ``drop`` syncs and writes ``3`` to ``/proc/sys/vm/drop_caches`` (NVIDIA's playbook does this before vLLM on a
  Spark): every start begins with no cache, and pays a cold weight load;
* ``warm`` drops, then reads the model's weight files once: every start begins with the weights cached and
  nothing else (the default on unified memory).

Dropping needs root. An explicit ``drop`` or ``warm`` without root is refused before anything starts
(:meth:`PageCachePlan.refusal`, checked at preflight); the *default* ``warm`` without root falls back to ``keep``
with a note (:meth:`PageCachePlan.note`), so that a non-root user's study still starts.

The weight files are found from ``engine_args.model``: a local directory, or a hub id in the Hugging Face cache
(:func:`weight_files`; ``autotune doctor`` sizes the weights with the same function).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.machine._settle import MemoryNotSettled

__all__ = [
    "DROP_CACHES_PATH",
    "PAGE_CACHE_POLICIES",
    "WEIGHT_SUFFIXES",
    "PageCacheFailed",
    "PageCachePlan",
    "apply_page_cache",
    "hub_cache_dir",
    "parse_page_cache",
    "plan_page_cache",
    "weight_files",
    "weights_bytes",
]

PAGE_CACHE_POLICIES = ("keep", "drop", "warm")
DROP_CACHES_PATH = "/proc/sys/vm/drop_caches"
#: Files that hold weights in a model directory (a hub snapshot holds the same names, linked to its blobs).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
#: Read size while warming: large sequential reads, one buffer reused.
_CHUNK = 16 * 1024 * 1024
_FIELD = "engine.page_cache"


class PageCacheFailed(MemoryNotSettled):
    """The policy could not be applied before a start (one line: what failed and the fix).

    A :class:`MemoryNotSettled`: like memory that did not come back, it means this start cannot be made comparable
    to the others, so the engines stop the study with the line, and the same command resumes once it is fixed.
    """


def parse_page_cache(value: Any) -> str | None:
    """``engine.page_cache`` as written: ``None`` (the default) or one of :data:`PAGE_CACHE_POLICIES`.

    Raises:
        ValueError: anything else; the message is one line naming the field and the choices.
    """
    if value is None or value in PAGE_CACHE_POLICIES:
        return value
    raise ValueError(f"{_FIELD} must be one of {', '.join(PAGE_CACHE_POLICIES)}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class PageCachePlan:
    """The policy an engine applies before each start, resolved once when the engine is made.

    Attributes:
        policy: What each start does: keep, drop or warm.
        requested: What the space asked for (``None``: the default).
        unified: Whether the GPU allocates from host memory (the default is warm there, keep elsewhere).
        root: Whether autotune may write ``/proc/sys/vm/drop_caches``.
    """

    policy: str
    requested: str | None
    unified: bool
    root: bool

    def refusal(self) -> str | None:
        """One line when the space asks for drop or warm and autotune is not root; ``None`` otherwise."""
        if self.requested in ("drop", "warm") and not self.root:
            return (f"{_FIELD}: {self.requested} needs root (it writes {DROP_CACHES_PATH} before each start): run "
                    f"autotune as root (sudo -E), or set {_FIELD}: keep")
        return None

    def note(self) -> str | None:
        """One line when the default (warm, on unified memory) fell back to keep for want of root."""
        if self.requested is None and self.unified and not self.root:
            return (f"{_FIELD} is keep: on unified memory the default is warm (each start sees the same page "
                    f"cache), which needs root to write {DROP_CACHES_PATH}; run as root for warm, or set "
                    f"{_FIELD}: keep to silence this")
        return None


def plan_page_cache(requested: Any, *, unified: bool, root: bool) -> PageCachePlan:
    """Resolve ``engine.page_cache``: the value given, else warm on unified memory and keep elsewhere; a default
    that needs root falls back to keep without it (an explicit one stays, and :meth:`~PageCachePlan.refusal`
    says why it cannot run).

    Raises:
        ValueError: ``requested`` is not a policy (see :func:`parse_page_cache`).
    """
    requested = parse_page_cache(requested)
    policy = requested or ("warm" if unified else "keep")
    if requested is None and policy != "keep" and not root:
        policy = "keep"
    return PageCachePlan(policy, requested, unified, root)


def hub_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The Hugging Face hub cache as ``huggingface_hub`` finds it: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
    ``~/.cache/huggingface/hub``. ``env`` (the engine's own variables) goes before this process's."""
    merged = {**os.environ, **dict(env or {})}
    if merged.get("HF_HUB_CACHE"):
        return Path(merged["HF_HUB_CACHE"]).expanduser()
    home = merged.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home).expanduser() / "hub"


def weight_files(model: Any, hub_cache: Path | None = None) -> list[Path]:
    """A model's weight files: under a local directory, or in the newest snapshot of a hub id ``org/name`` in the
    hub cache (resolved to the blobs they link to). Empty when the model is neither (not downloaded yet)."""
    if not isinstance(model, str) or not model:
        return []
    folder = Path(model).expanduser()
    if not folder.is_dir():
        if model.count("/") != 1:
            return []
        repo = (hub_cache or hub_cache_dir()) / f"models--{model.replace('/', '--')}" / "snapshots"
        if not repo.is_dir():
            return []
        snapshots = sorted((p for p in repo.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        if not snapshots:
            return []
        folder = snapshots[-1]
    found: dict[Path, None] = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix in WEIGHT_SUFFIXES and path.is_file():
            found[path.resolve()] = None  # a snapshot links to blobs; two names for one blob are read once
    return list(found)


def weights_bytes(model: Any, hub_cache: Path | None = None) -> int | None:
    """Total size of :func:`weight_files` (``None`` when there are none)."""
    total = sum(p.stat().st_size for p in weight_files(model, hub_cache))
    return total or None


def apply_page_cache(policy: str, files: list[Path], *, drop_path: str = DROP_CACHES_PATH,
                     sync: Callable[[], None] = os.sync, clock: Callable[[], float] = time.monotonic) -> float:
    """Do what ``policy`` says before a start; returns the seconds it took (0 for keep).

    Raises:
        PageCacheFailed: the cache could not be dropped (no root), or a weight file could not be read.
    """
    if policy == "keep":
        return 0.0
    start = clock()
    sync()  # dirty pages cannot be dropped: write them first, as drop_caches' documentation says
    try:
        with open(drop_path, "w") as fh:
            fh.write("3\n")
    except OSError as exc:
        raise PageCacheFailed(f"{_FIELD}: {policy}: cannot write {drop_path} ({exc.strerror or exc}): run "
                              f"autotune as root, or set {_FIELD}: keep") from None
    if policy == "warm":
        buffer = bytearray(_CHUNK)
        for path in files:
            try:
                with open(path, "rb", buffering=0) as fh:
                    while fh.readinto(buffer):
                        pass
            except OSError as exc:
                raise PageCacheFailed(f"{_FIELD}: warm: cannot read the weight file {path} "
                                      f"({exc.strerror or exc}); fix its permissions, or set {_FIELD}: keep") from None
    return clock() - start

"""Several workers on one machine: one ``autotune worker`` process per GPU (or group of GPUs), all sharing a study.

Each worker is a separate process with ``CUDA_VISIBLE_DEVICES`` set to its GPUs, so every engine it starts sees
only those; workers coordinate only through the study's storage (Optuna's own distributed mode), so workers on
other machines (``autotune worker --study NAME --storage URL``) join the same way. The storage URL reaches the
workers through the environment (:data:`STORAGE_ENV`), never their command line: a PostgreSQL password on a
command line is visible to every user of the machine through ``ps``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from autotune.core.confine import open_confined

__all__ = ["GPU_ENV", "STORAGE_ENV", "WORKER_ENV", "WorkerSpec", "gpu_groups", "run_local_workers"]

#: The variable every CUDA program reads to decide which GPUs it may see.
GPU_ENV = "CUDA_VISIBLE_DEVICES"
#: The storage URL for ``autotune worker`` (the default of ``--storage``).
STORAGE_ENV = "AUTOTUNE_STORAGE"
#: This worker's index among the local workers (its sampler seed and its record in the study).
WORKER_ENV = "AUTOTUNE_WORKER_INDEX"
#: Seconds the workers get to stop after SIGTERM is forwarded to them, before SIGKILL.
STOP_GRACE_S = 30.0


class GpuSpecError(ValueError):
    """``--gpus`` / ``--gpus-per-trial`` cannot be split into workers; the message names the fix."""


def gpu_groups(gpus: str, per_trial: int = 1) -> list[str]:
    """``"0,1,2,3"`` and 2 GPUs per trial -> ``["0,1", "2,3"]``: each worker's ``CUDA_VISIBLE_DEVICES``.

    Raises:
        GpuSpecError: empty entries, repeats, or a count that ``per_trial`` does not divide.
    """
    if per_trial < 1:
        raise GpuSpecError(f"--gpus-per-trial must be >= 1, got {per_trial}")
    devices = [d.strip() for d in gpus.split(",")]
    if not gpus.strip() or any(not d for d in devices):
        raise GpuSpecError(f"--gpus {gpus!r}: expected a comma-separated list of GPU indices or UUIDs, e.g. 0,1,2,3")
    # CUDA_VISIBLE_DEVICES takes an index or a UUID (nvidia-smi -L); anything else (-1, a typo) hides every GPU
    # from the worker, which would then run on none.
    odd = [d for d in devices if not (d.isdigit() or d.startswith(("GPU-", "MIG-")))]
    if odd:
        raise GpuSpecError(f"--gpus {gpus!r}: {odd[0]!r} is not a GPU index or UUID; list indices (0,1,2,3) or the "
                           "UUIDs nvidia-smi -L prints (GPU-...)")
    repeated = sorted({d for d in devices if devices.count(d) > 1})
    if repeated:
        raise GpuSpecError(f"--gpus {gpus!r}: GPU {repeated[0]} is listed twice; list each GPU once")
    if len(devices) % per_trial:
        raise GpuSpecError(f"--gpus {gpus!r}: {len(devices)} GPUs cannot be split into groups of --gpus-per-trial "
                           f"{per_trial}; list a multiple of {per_trial} GPUs")
    return [",".join(devices[i:i + per_trial]) for i in range(0, len(devices), per_trial)]


class WorkerSpec:
    """One local worker: its GPUs, its command, its log file."""

    def __init__(self, index: int, gpus: str, argv: Sequence[str], log_path: Path) -> None:
        self.index, self.gpus, self.argv, self.log_path = index, gpus, list(argv), log_path
        self.proc: subprocess.Popen[bytes] | None = None


def run_local_workers(worker_argv: Sequence[str], groups: Sequence[str], storage: str, log_dir: str | os.PathLike[str],
                      out: IO[str], env: Mapping[str, str] | None = None,
                      progress: Callable[[], str | None] | None = None, progress_every_s: float = 30.0) -> int:
    """Start one worker per GPU group, wait for all of them, and return the worst exit status.

    Args:
        worker_argv: The arguments after ``python -m autotune`` (``worker --study NAME ...``), without the storage.
        groups: Each worker's ``CUDA_VISIBLE_DEVICES``.
        storage: The storage URL, handed over in :data:`STORAGE_ENV`.
        log_dir: Each worker's output goes to ``worker-<i>.log`` here.
        out: Where the one line per worker start and end goes.
        env: The workers' base environment (default: this process's).
        progress: Called every ``progress_every_s`` seconds while workers run; a line it returns is printed.

    The workers stay in this process's process group, so Ctrl-C in a terminal reaches each of them at once (each
    saves its trial and exits); a SIGTERM sent to this process is passed on to them.
    """
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    base = dict(os.environ if env is None else env)
    specs = [WorkerSpec(i, g, [sys.executable, "-m", "autotune", *worker_argv], Path(log_dir) / f"worker-{i}.log")
             for i, g in enumerate(groups)]

    def forward(signum: int, _frame: object) -> None:
        for spec in specs:
            if spec.proc is not None and spec.proc.poll() is None:
                spec.proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        for spec in specs:
            worker_env = {**base, GPU_ENV: spec.gpus, STORAGE_ENV: storage, WORKER_ENV: str(spec.index),
                          "PYTHONPATH": _same_autotune(base.get("PYTHONPATH"))}
            with open_confined(log_dir, spec.log_path.name, "ab") as log:  # never through a link put there
                spec.proc = subprocess.Popen(spec.argv, env=worker_env, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT)
            print(f"worker {spec.index}: GPUs {spec.gpus}, pid {spec.proc.pid}, log {spec.log_path}", file=out)
        next_progress = time.monotonic() + progress_every_s
        running = list(specs)
        worst = 0
        while running:
            for spec in list(running):
                assert spec.proc is not None
                code = spec.proc.poll()
                if code is None:
                    continue
                running.remove(spec)
                worst = max(worst, code if code >= 0 else 128 - code)
                print(f"worker {spec.index}: exited with status {code}" if code >= 0 else
                      f"worker {spec.index}: killed by signal {-code}", file=out)
            if running and progress is not None and time.monotonic() >= next_progress:
                line = progress()
                if line:
                    print(line, file=out)
                next_progress = time.monotonic() + progress_every_s
            if running:
                time.sleep(0.2)
        return worst
    except KeyboardInterrupt:
        # The workers got the same Ctrl-C: give them the time to save their trials, then make sure they are gone.
        _stop(specs)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _same_autotune(pythonpath: str | None) -> str:
    """A PYTHONPATH under which ``python -m autotune`` is this very autotune (a checkout, not another install)."""
    import autotune

    root = str(Path(autotune.__file__).resolve().parent.parent)
    return os.pathsep.join([root, *([pythonpath] if pythonpath else [])])


def _stop(specs: Sequence[WorkerSpec]) -> None:
    deadline = time.monotonic() + STOP_GRACE_S
    for spec in specs:
        if spec.proc is None:
            continue
        try:
            spec.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            spec.proc.kill()
            spec.proc.wait()

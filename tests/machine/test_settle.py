"""Settle before each start: a slow-release fake makes the next start wait; a timeout names what holds memory."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.core.records import EngineConfig, RestartStatus, Workload
from autotune.engines import EngineError
from autotune.engines.cmd import CmdEngine
from autotune.engines.process import EngineProcess, engine_leftovers
from autotune.machine import (
    GIB,
    MeminfoReader,
    MemoryLevel,
    MemoryNotSettled,
    StartSafety,
    settle,
    top_rss,
)

TOTAL = 128 * GIB
WL = Workload(num_prompts=4, output_len=64, timed_passes=2)
CONFIG = EngineConfig(engine_args={"model": "m", "max_num_seqs": 4})


def write_meminfo(path: Path, available: float, total: float = TOTAL) -> None:
    path.write_text(f"MemTotal: {int(total) // 1024} kB\nMemAvailable: {int(available) // 1024} kB\n"
                    f"Cached: {2 * GIB // 1024} kB\n")


class SlowRelease:
    """A fake clock and meminfo: after :meth:`hold`, memory comes back at ``rate`` GiB/s up to ``full``."""

    def __init__(self, path: Path, full: float, rate_gib_s: float = 10.0) -> None:
        self.path, self.full, self.rate, self.now, self.level = path, full, rate_gib_s * GIB, 0.0, full
        write_meminfo(path, full)

    def hold(self, level: float) -> None:
        self.level = level
        write_meminfo(self.path, level)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.level = min(self.full, self.level + self.rate * seconds)
        write_meminfo(self.path, self.level)


def test_a_slow_release_makes_the_wait_last_until_memory_is_back_and_stable(tmp_path):
    fake = SlowRelease(tmp_path / "meminfo", full=100 * GIB)
    baseline = MemoryLevel(100 * GIB)
    fake.hold(60 * GIB)  # an engine that just exited still holds 40 GiB; it comes back at 10 GiB/s
    result = settle(baseline, reader=MeminfoReader(fake.path), clock=fake.clock, sleep=fake.sleep, interval_s=0.5)
    # Within tolerance (5 GiB under 100) after 3.5 s, and stable (within 0.5 GiB) only once it stops rising.
    assert result.waited and result.waited_s >= 3.5 and result.level.host_available >= 95 * GIB
    assert result.level.host_available == 100 * GIB
    # Nothing held: two samples, one interval.
    fake.hold(100 * GIB)
    quick = settle(baseline, reader=MeminfoReader(fake.path), clock=fake.clock, sleep=fake.sleep, interval_s=0.5)
    assert not quick.waited and quick.samples == 2 and quick.waited_s == pytest.approx(0.5)


def test_memory_that_never_comes_back_stops_with_one_line_naming_what_holds_it(tmp_path):
    fake = SlowRelease(tmp_path / "meminfo", full=60 * GIB, rate_gib_s=0)
    with pytest.raises(MemoryNotSettled) as err:
        settle(MemoryLevel(100 * GIB), reader=MeminfoReader(fake.path), clock=fake.clock, sleep=fake.sleep,
               timeout_s=30, holders=lambda: ["4242 python 38.0 GiB"])
    message = str(err.value)
    assert "\n" not in message and "within 30 s" in message
    assert "MemAvailable 60.0 GiB is 40.0 GiB under the 100.0 GiB" in message and "4242 python 38.0 GiB" in message
    assert "run the same command again" in message and fake.now >= 30


def test_gpu_free_memory_is_waited_for_where_nvml_reports_it(tmp_path):
    fake = SlowRelease(tmp_path / "meminfo", full=100 * GIB)
    gpu = iter([(10 * GIB,), (30 * GIB,), (int(79.8 * GIB),), (80 * GIB,), (80 * GIB,)])
    result = settle(MemoryLevel(100 * GIB, (80 * GIB,)), reader=MeminfoReader(fake.path), gpu_reader=lambda: next(gpu),
                    clock=fake.clock, sleep=fake.sleep)
    # 10 and 30 are short of 80; 79.8 is back but still rising from 30; 80 after 79.8 is back and stable.
    assert result.samples == 4 and result.level.gpu_free == (80 * GIB,)


def test_a_leftover_engine_process_is_found_by_its_tag_and_holds_the_start(tmp_path):
    with EngineProcess(["sleep", "30"]) as proc:
        prefix = proc.tag.split("-")[0] + "-"
        # Popen returns once the child's exec closed its close-on-exec pipe, which the kernel does before it sets
        # up the new environment: on a loaded machine /proc/PID/environ can read empty for a moment (53 of 16,051
        # starts beside two busy loops). settle() asks again each interval, so this asks for a few seconds too.
        deadline = time.monotonic() + 5.0
        while f"{proc.pid} (sleep)" not in engine_leftovers(prefix, ()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert f"{proc.pid} (sleep)" in engine_leftovers(prefix, ())
        assert f"{proc.pid} (sleep)" not in engine_leftovers(prefix, exclude_sessions=(proc.pid,))
        fake = SlowRelease(tmp_path / "meminfo", full=100 * GIB)
        with pytest.raises(MemoryNotSettled, match=rf"earlier restart still run: {proc.pid} \(sleep\)"):
            settle(MemoryLevel(100 * GIB), reader=MeminfoReader(fake.path), clock=fake.clock, sleep=fake.sleep,
                   timeout_s=3, leftovers=lambda: engine_leftovers(prefix, ()))
    assert f"{proc.pid} (sleep)" not in engine_leftovers(prefix, ())
    assert top_rss(2) and all("GiB" in row for row in top_rss(2))


def test_a_cmd_engine_start_waits_for_memory_its_previous_restart_left_held(tmp_path):
    fake = SlowRelease(tmp_path / "meminfo", full=100 * GIB)
    # The engine "leaks": its exit leaves MemAvailable at 40 GiB, which comes back at 10 GiB/s.
    engine_script = tmp_path / "leaky.py"
    engine_script.write_text(textwrap.dedent(f"""
        import json, sys
        sys.stdin.read()
        open({str(fake.path)!r}, "w").write("MemTotal: {TOTAL // 1024} kB\\nMemAvailable: {40 * GIB // 1024} kB\\n")
        print(json.dumps({{"status": "ok", "passes_tok_s": [100.0], "resolved": {{}}}}))
    """))
    engine = CmdEngine(command=[sys.executable, str(engine_script)], memory_floor_gib=0)
    engine.safety = StartSafety(0, reader=MeminfoReader(fake.path), gpu_reader=None, kernel_log=None,
                                clock=fake.clock, sleep=fake.sleep, unified=True,  # a GB10: host memory is the GPU's
                                page_cache="keep")  # (warm, the default there, would drop this host's cache as root)
    first = engine.run_restart(CONFIG, WL, restart=0, seed=1)
    assert first.status == RestartStatus.OK and not engine.safety.last_settle.waited
    fake.level = 40 * GIB  # what the engine left
    second = engine.run_restart(CONFIG, WL, restart=1, seed=2)
    assert second.status == RestartStatus.OK
    waited = engine.safety.last_settle
    assert waited.waited and waited.waited_s >= 5.5  # 40 -> within 5 GiB of 100 at 10 GiB/s
    # A memory level that never returns stops the study with one line (an EngineError), before anything starts.
    engine.safety.settle_timeout_s = 2
    fake.rate = 0
    fake.level = 40 * GIB
    with pytest.raises(EngineError, match="memory did not settle within 2 s"):
        engine.run_restart(CONFIG, WL, restart=2, seed=3)


def test_each_restart_leaves_its_memory_and_machine_facts_for_the_record(tmp_path):
    from autotune.machine import GpuState, MachineState

    fake = SlowRelease(tmp_path / "meminfo", full=100 * GIB)
    state = MachineState(3000.0, 2900.0, (GpuState(0, "GB10", sm_clock_mhz=2400, throttle=("hw_slowdown",)),))
    safety = StartSafety(None, reader=MeminfoReader(fake.path), gpu_reader=None, kernel_log=None, clock=fake.clock,
                         sleep=fake.sleep, machine_state=lambda: state, unified=True)  # a GB10: host memory watched
    safety.settle()
    with safety.guard():
        pass
    facts = safety.restart_facts()
    assert facts["settle_wait_s"] == 0.5 and facts["memory_floor_gib"] == 8.96  # 7% of 128 GiB
    assert facts["mem_available_min_gib"] == 100.0 and facts["cached_gib"] == 2.0 and facts["memory_samples"] >= 2
    assert facts["cpu_mhz_mean"] == 3000.0 and facts["gpu0_sm_clock_mhz"] == 2400
    assert facts["gpu_throttle"] == "gpu0:hw_slowdown" and "memory_guard" not in facts


def test_a_worker_sharing_the_host_waits_for_its_own_gpus_and_not_for_host_memory(tmp_path, monkeypatch):
    from autotune.machine import GpuState
    from autotune.machine._gpu import visible

    fake = SlowRelease(tmp_path / "meminfo", full=100 * GIB)
    fake.hold(30 * GIB)  # another worker's engine holds host memory
    result = settle(MemoryLevel(100 * GIB), reader=MeminfoReader(fake.path), clock=fake.clock,
                    sleep=lambda s: setattr(fake, "now", fake.now + s), check_host=False)
    # Nothing is watched (host memory left out, no GPU): one sample decides, with no wait.
    assert result.samples == 1 and not result.waited and result.level.host_available == 30 * GIB
    # A GPU's free memory is watched: stable over two samples, one interval apart.
    with_gpu = settle(MemoryLevel(100 * GIB, (80 * GIB,)), reader=MeminfoReader(fake.path), clock=fake.clock,
                      sleep=lambda s: setattr(fake, "now", fake.now + s), check_host=False,
                      gpu_reader=lambda: (80 * GIB,), interval_s=0.5)
    assert with_gpu.samples == 2 and with_gpu.waited_s == pytest.approx(0.5)
    monkeypatch.setenv("AUTOTUNE_WORKER_INDEX", "1")
    assert StartSafety(reader=MeminfoReader(fake.path), gpu_reader=None, kernel_log=None,
                       unified=True).check_host is False
    monkeypatch.delenv("AUTOTUNE_WORKER_INDEX")
    assert StartSafety(reader=MeminfoReader(fake.path), gpu_reader=None, kernel_log=None,
                       unified=True).check_host is True
    # Where the GPU has memory of its own (or there is none), host memory is not the engine's: no wait on it.
    assert StartSafety(reader=MeminfoReader(fake.path), gpu_reader=None, kernel_log=None,
                       unified=False).check_host is False
    gpus = [GpuState(0, uuid="GPU-aaaa-1"), GpuState(1, uuid="GPU-bbbb-2"), GpuState(2, uuid="GPU-cccc-3")]
    assert visible(gpus, None) == gpus and visible(gpus, "") == []
    assert visible(gpus, "2,0") == [gpus[2], gpus[0]] and visible(gpus, "GPU-bbbb") == [gpus[1]]
    assert visible(gpus, "MIG-1234") == gpus


def test_a_process_a_live_engine_process_holds_is_not_a_leftover_and_one_nobody_holds_is(tmp_path):
    import os
    import signal

    import psutil

    engine_script = tmp_path / "ok.py"
    engine_script.write_text('import json, sys\nsys.stdin.read()\n'
                             'print(json.dumps({"status": "ok", "passes_tok_s": [1.0], "resolved": {}}))\n')
    engine = CmdEngine(command=[sys.executable, str(engine_script)], settle_timeout_s=2)
    with EngineProcess(["sleep", "30"]):  # e.g. another engine's forkserver host: held, alive, not a leftover
        assert engine.run_restart(CONFIG, WL, restart=0, seed=1).status == RestartStatus.OK
    # A tagged process that nothing holds (an engine core that outlived its restart) stops the next start.
    orphan = EngineProcess(["sleep", "30"])
    from autotune.engines.process import _LIVE

    _LIVE.discard(orphan)
    try:
        with pytest.raises(EngineError, match=rf"earlier restart still run: {orphan.pid} \(sleep\)"):
            engine.run_restart(CONFIG, WL, restart=1, seed=2)
    finally:
        os.killpg(orphan.pid, signal.SIGKILL)
        orphan.popen.wait()
    assert psutil.pid_exists(orphan.pid) is False or psutil.Process(orphan.pid).status() == psutil.STATUS_ZOMBIE


def test_no_start_begins_under_the_guard_floor_even_where_host_memory_is_otherwise_left_out(tmp_path):
    # Seen on the H200 (docs/measurements/h200-memory-guard.md): a hog held host memory under the floor, the
    # guard killed the restart, and its rerun started at once into the same hog and was charged a second hit.
    # Host memory is not the engine's there (check_host=False), but a start under the floor is still refused:
    # the settle waits for MemAvailable to clear the floor.
    fake = SlowRelease(tmp_path / "meminfo", full=100 * GIB, rate_gib_s=4.0)
    fake.hold(20 * GIB)
    result = settle(MemoryLevel(100 * GIB), reader=MeminfoReader(fake.path), clock=fake.clock, sleep=fake.sleep,
                    check_host=False, floor=40 * GIB, interval_s=0.5)
    assert result.waited and result.level.host_available > 40 * GIB and result.waited_s >= 5.0
    # Without a floor (0: off) the same level starts at once, as before.
    fake.hold(20 * GIB)
    quick = settle(MemoryLevel(100 * GIB), reader=MeminfoReader(fake.path), clock=fake.clock,
                   sleep=lambda s: setattr(fake, "now", fake.now + s), check_host=False, floor=0)
    assert quick.samples == 1  # nothing watched and the floor off: one sample, no wait
    # A floor that never clears ends the wait with one line naming it.
    with pytest.raises(MemoryNotSettled, match="under the memory guard's floor"):
        settle(MemoryLevel(100 * GIB), reader=MeminfoReader(fake.path), clock=fake.clock,
               sleep=lambda s: setattr(fake, "now", fake.now + s), check_host=False, floor=40 * GIB, timeout_s=10)


def test_a_trips_lowest_memory_reads_under_its_floor_in_the_record_however_close_it_came(tmp_path):
    # CI once saw a real trip whose recorded lowest MemAvailable was not under the floor: rounded to nearest, a lowest
    # 0.1 MiB under a 5.1236 GiB floor reads 5.124. The record rounds the lowest down.
    floor_gib = 5.1236
    fake = SlowRelease(tmp_path / "meminfo", full=100 * GIB)
    safety = StartSafety(floor_gib, reader=MeminfoReader(fake.path), gpu_reader=None, kernel_log=None,
                         clock=fake.clock, sleep=fake.sleep, unified=False)
    fake.hold(int(floor_gib * GIB) - 100 * 1024)
    with safety.guard():
        pass
    facts = safety.restart_facts()
    assert facts["memory_guard"] == "floor"
    assert facts["mem_available_min_gib"] < floor_gib and facts["mem_available_min_gib"] == 5.123

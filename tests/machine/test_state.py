"""Machine state per restart: CPU clocks, GPU facts, and the restarts that depart from the study's median."""

from __future__ import annotations

from collections import namedtuple

from autotune.records import encode
from autotune.machine import GIB, GpuState, MachineState, departures, gpu_states, is_unified_memory, read_machine_state
from autotune.machine._gpu import throttle_names

Freq = namedtuple("Freq", "current min max")


def test_cpu_clock_mean_and_minimum_over_cores():
    state = read_machine_state(cpu_freq=lambda percpu: [Freq(3000.0, 0, 0), Freq(1500.0, 0, 0), Freq(3000.0, 0, 0)],
                               gpus=lambda: [GpuState(0, "GB10", throttle=("hw_slowdown",))])
    assert state.cpu_mhz_mean == 2500.0 and state.cpu_mhz_min == 1500.0
    assert state.throttle == ("gpu0:hw_slowdown",)
    assert encode(state)["gpus"][0]["throttle"] == ["hw_slowdown"]
    none = read_machine_state(cpu_freq=lambda percpu: [], gpus=lambda: None)
    assert none == MachineState()
    real = read_machine_state()
    assert real.cpu_mhz_mean is None or real.cpu_mhz_mean > 0


def test_a_restart_under_70_percent_of_the_median_cpu_clock_or_throttled_is_marked():
    fast, slow = MachineState(3900.0, 3800.0), MachineState(1500.0, 1400.0)
    throttled = MachineState(3900.0, 3900.0, (GpuState(0, throttle=("sw_thermal",)),))
    marks = departures([fast, fast, slow, throttled, MachineState(2800.0, 2700.0)])
    assert marks[0] is None and marks[1] is None and marks[4] is None  # 2800 is 72% of the 3900 median
    assert "CPU clock 1500 MHz is under 70% of the study's median 3900 MHz" in marks[2]
    assert marks[3] == "GPU throttled (gpu0:sw_thermal)"
    assert departures([MachineState()]) == [None]


def test_throttle_masks_name_their_reasons_and_idle_is_not_one():
    assert throttle_names(0x1) == () and throttle_names(None) == ()
    assert throttle_names(0x4 | 0x40) == ("sw_power_cap", "hw_thermal")


def test_unified_memory_rule():
    host = 121 * GIB
    assert not is_unified_memory(None, host, "x86_64") and not is_unified_memory([], host, "aarch64")
    h200 = GpuState(0, "NVIDIA H200", memory_total=141 * GIB, addressing_mode="none")
    assert not is_unified_memory([h200], 2000 * GIB, "x86_64")
    assert is_unified_memory([GpuState(0, "NVIDIA GB10")], host, "x86_64")  # no framebuffer of its own
    assert is_unified_memory([GpuState(0, memory_total=119 * GIB)], host, "x86_64")  # the host's pool
    assert is_unified_memory([GpuState(0, memory_total=96 * GIB, addressing_mode="ats")], 480 * GIB, "aarch64")
    assert is_unified_memory([h200], 2000 * GIB, "aarch64")  # Grace + a GPU


def test_nvml_absent_is_not_reported_not_an_error():
    states = gpu_states()
    assert states is None or all(isinstance(s, GpuState) for s in states)

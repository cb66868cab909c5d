"""Machine readings are parsed once, at the reading, into typed values (issue 32, principle 1): a malformed
``/proc/meminfo`` line is one error naming it, and an NVML value that cannot be true reads as unknown, never as a
figure the guard or the settle would act on."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from autotune.machine import GIB, gpu_states
from autotune.machine import _gpu
from autotune.machine._guard import MemoryGuard
from autotune.machine._meminfo import MeminfoReader, read_meminfo

GOOD = "MemTotal:       16777216 kB\nMemFree:  100 kB\nMemAvailable:   8388608 kB\nCached:  1024 kB\nHugePages_Total: 0\n"


def _meminfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(text)
    return path


def test_a_well_formed_meminfo_reads_in_bytes(tmp_path: Path) -> None:
    info = read_meminfo(_meminfo(tmp_path, GOOD))
    assert (info.total, info.available, info.cached) == (16 * GIB, 8 * GIB, 1024 * 1024)


@pytest.mark.parametrize(("line", "what"), [
    ("MemAvailable:   abc kB", "abc"),  # non-numeric
    ("MemAvailable:   8388608", "8388608"),  # no unit: was read as bytes, a GiB taken for 8 MiB
    ("MemAvailable:   -5 kB", "-5"),  # negative: was believed, and the guard tripped on it
    ("MemAvailable:   nan kB", "nan"),
    ("MemAvailable:   8388608 MB", "MB"),  # another unit
    ("MemTotal:       1.5 kB", "1.5"),
])
def test_a_malformed_meminfo_line_is_one_error_naming_it(tmp_path: Path, line: str, what: str) -> None:
    name = line.split(":")[0]
    text = "\n".join(ln if not ln.startswith(name + ":") else line for ln in GOOD.splitlines())
    path = _meminfo(tmp_path, text)
    with pytest.raises(ValueError) as caught:
        read_meminfo(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and name in message and what in message, message


@pytest.mark.parametrize(("text", "what"), [
    (GOOD.replace("8388608 kB", "33554432 kB"), "exceeds MemTotal"),  # more available than there is
    (GOOD.replace("16777216 kB", "0 kB").replace("8388608 kB", "0 kB"), "MemTotal is 0"),
    (GOOD.replace("16777216 kB", "99999999999999999999 kB"), "more than any host"),
    ("MemTotal: 16777216 kB\n", "no MemAvailable"),
])
def test_meminfo_figures_that_cannot_be_true_together_are_one_error(tmp_path: Path, text: str, what: str) -> None:
    with pytest.raises(ValueError) as caught:
        read_meminfo(_meminfo(tmp_path, text))
    assert what in str(caught.value) and "\n" not in str(caught.value)


def test_the_guard_never_acts_on_a_malformed_reading(tmp_path: Path) -> None:
    # A negative MemAvailable used to read as -5 KiB, under any floor: the guard killed a healthy engine on a damaged
    # line. A reading the parser refuses is a missed sample (unknown); the next good one counts.
    path = _meminfo(tmp_path, GOOD.replace("8388608 kB", "-5 kB"))
    guard = MemoryGuard(GIB, reader=MeminfoReader(path), kernel_log=None)
    assert guard.sample() is None and guard.trip is None and guard.samples == 0
    path.write_text(GOOD.replace("8388608 kB", "512 kB"))  # a real reading under the floor still trips
    trip = guard.sample()
    assert trip is not None and trip.cause == "floor"


class _Memory:
    def __init__(self, total: object, free: object) -> None:
        self.total, self.free = total, free


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, *, total: object, free: object, clock: object = 1980,
               temperature: object = 40, power: object = 300_000) -> None:
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    nv.NVMLError = NVMLError
    nv.NVML_CLOCK_SM = 1
    nv.NVML_TEMPERATURE_GPU = 0
    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetCount = lambda: 1
    nv.nvmlDeviceGetHandleByIndex = lambda i: object()
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H100"
    nv.nvmlDeviceGetMemoryInfo = lambda h: _Memory(total, free)
    nv.nvmlDeviceGetPowerUsage = lambda h: power
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0
    nv.nvmlDeviceGetClockInfo = lambda h, kind: clock
    nv.nvmlDeviceGetMaxClockInfo = lambda h, kind: clock
    nv.nvmlDeviceGetTemperature = lambda h, kind: temperature
    nv.nvmlDeviceGetUUID = lambda h: b"GPU-1"
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setattr(_gpu, "_nvml_ok", None)


def test_plausible_nvml_values_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, total=80 * GIB, free=79 * GIB)
    [state] = gpu_states()
    assert (state.memory_total, state.memory_free, state.sm_clock_mhz, state.temperature_c, state.power_w) == (
        80 * GIB, 79 * GIB, 1980, 40, 300.0)


@pytest.mark.parametrize(("total", "free"), [
    (80 * GIB, 81 * GIB),  # more free than there is: would wave a start onto a full GPU
    (80 * GIB, -1),
    (2 ** 64 - 1, 2 ** 64 - 1),  # a binding's all-ones "not available"
    (80 * GIB, float("nan")),
])
def test_impossible_nvml_memory_reads_as_unknown(monkeypatch: pytest.MonkeyPatch, total: object,
                                                 free: object) -> None:
    _fake_nvml(monkeypatch, total=total, free=free)
    [state] = gpu_states()
    assert state.memory_free is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert _gpu.gpu_free_bytes() is None  # the settle then goes by host memory, as on a GB10


@pytest.mark.parametrize("field", ["clock", "temperature", "power"])
def test_an_impossible_nvml_sensor_value_reads_as_unknown(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    bad = {"clock": -1, "temperature": 10_000, "power": float("inf")}[field]
    _fake_nvml(monkeypatch, total=80 * GIB, free=79 * GIB, **{field: bad})
    [state] = gpu_states()
    got = {"clock": state.sm_clock_mhz, "temperature": state.temperature_c, "power": state.power_w}[field]
    assert got is None and state.memory_free == 79 * GIB

"""Issue 44, principle 5: one boundary for every input. Machine files (``/proc/meminfo``, ``/proc/cpuinfo``, NVML),
stored reports, replay databases and every flag of every command: one line naming the input and the fix, a non-zero
exit, never a traceback, reads bounded (docs/reliability.md, "Round five", "5. One boundary")."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from autotune.core.exit_status import ExitStatus
from autotune.engines.sim import SimEngine
from tests._helpers.cli import one_line, run_cli, space_file, tune_argv


# -- stored reports ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [100_000, 80])
def test_report_from_json_of_deeply_nested_json_is_one_line(tmp_path, capsys, depth):
    """``[[[[...]]]]`` 100,000 deep was a RecursionError traceback; 80 levels inside a report-shaped object reached
    the readers below the decoder. Both are one line naming the file, exit 2."""
    path = tmp_path / "deep.json"
    path.write_text('{"format": "autotune.report/1", "record": ' + "[" * depth + "]" * depth + "}")
    status, _, err = run_cli(["report", "--from-json", str(path)], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and str(path) in line and "nested deeper" in line, line


def test_a_cmd_engines_deeply_nested_result_is_a_failed_restart(tmp_path):
    from autotune.core.records import EngineConfig, Workload
    from autotune.engines.cmd import CmdEngine

    script = tmp_path / "engine.py"
    script.write_text("import sys\nsys.stdin.read()\nprint('[' * 100000 + ']' * 100000)\n")
    engine = CmdEngine(cache_dir=str(tmp_path / "c"), command=[sys.executable, str(script)])
    result = engine.run_restart(EngineConfig(engine_args={"model": "m"}), Workload(num_prompts=4), restart=0, seed=0)
    assert not result.ok and "not JSON" in (result.error or "")


# -- flags -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("params", ["k_schedule=[[1,2]]", "k_schedule=abc", "k_schedule=[[1,8,2],[9,512,1]]",
                                    "K=2", "foo=1", "draft=nope"])
def test_audit_params_that_the_space_cannot_take_are_one_line_before_the_engine_starts(tmp_path, capsys, monkeypatch,
                                                                                     params):
    """``audit --params k_schedule=...`` without a draft was a KeyError traceback, a malformed schedule an Infeasible
    traceback; an unknown key (``foo=1``) was dropped and the defaults audited, exit 0."""
    starts: list[object] = []
    monkeypatch.setattr(SimEngine, "run_restart", lambda self, *a, **kw: starts.append(a))
    status, _, err = run_cli(["audit", "--space", str(space_file(tmp_path)), "--engine", "sim", "--workdir",
                           str(tmp_path / "a"), "--params", params], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and "--params" in line, line
    assert starts == []


@pytest.mark.parametrize("argv", [["--port", "99999"], ["--port", "-1"], ["--host", "no such host"]],
                         ids=["port-high", "port-negative", "host"])
def test_ui_address_flags_are_one_line_and_make_nothing(tmp_path, capsys, monkeypatch, argv):
    """``ui --port 99999`` was an OverflowError traceback after ``mlruns/`` was made; an unknown host was called
    "in use"."""
    monkeypatch.chdir(tmp_path)
    status, _, err = run_cli(["ui", "--tracking-uri", f"sqlite:///{tmp_path}/m/mlflow.db", *argv], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and argv[0] in line and "in use" not in line, line
    assert not (tmp_path / "m").exists()


_BENCH_FLAGS = [
    ("replay", ["--draws", "0"]), ("replay", ["--draws", "-1"]), ("replay", ["--budgets", "nan"]),
    ("replay", ["--budgets", "0"]), ("replay", ["--seed", "-1"]), ("replay", ["--max-share", "5"]),
    ("replay", ["--scenario", "no-such-study"]),
    ("recheck", ["--draws", "0"]), ("recheck", ["--restarts", "1"]), ("recheck", ["--seeds", "0"]),
    ("coverage", ["--seed", "-5"]), ("coverage", ["--draws", "0"]),
    ("warmstart", ["--seeds", "0"]), ("warmstart", ["--shift", "inf"]), ("warmstart", ["--jobs", "0"]),
    ("memory", ["--budget", "0"]), ("memory", ["--seeds", "x"]),
    ("redaction", ["--bound", "-1"]), ("warmup", ["--processes", "0"]),
]


@pytest.mark.parametrize("module,argv", _BENCH_FLAGS, ids=[f"{m}{''.join(a)}" for m, a in _BENCH_FLAGS])
def test_every_benchmarks_flag_is_one_line_before_it_runs(capsys, module, argv):
    """``make bench-replay REPLAY_ARGS="--draws 0"`` was a ZeroDivisionError traceback after the replay's setup;
    ``--budgets nan`` and ``--seed -1`` tracebacks too; ``--draws -1`` ran and printed an empty table."""
    import importlib

    main = importlib.import_module(f"autotune.bench.{module}").main
    with pytest.raises(SystemExit) as caught:
        main(argv)
    err = capsys.readouterr().err
    line = one_line(err)
    assert caught.value.code == 2, (caught.value.code, line)
    assert argv[0] in line, line


# -- machine files ------------------------------------------------------------------------------------------------

def _meminfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(text)
    return path


def test_doctor_on_a_meminfo_without_memavailable_is_a_fix_line(tmp_path, capsys, monkeypatch):
    """A kernel before 3.14 (or a foreign file) has no MemAvailable line: ``doctor`` was a ValueError traceback."""
    from autotune.machine import _checkup as checkup
    from autotune.machine import read_meminfo

    path = _meminfo(tmp_path, "MemTotal:       16000000 kB\nMemFree:         8000000 kB\nCached: 100 kB\n")
    monkeypatch.setattr(checkup, "read_meminfo", lambda: read_meminfo(path))
    status, out, err = run_cli(["doctor"], capsys)
    assert "Traceback" not in err and err == "", err
    fix = [line for line in out.splitlines() if line.startswith("FIX") and "memory" in line]
    assert status == ExitStatus.ERROR and fix and str(path) in fix[0] and "MemAvailable" in fix[0], out


def test_a_study_on_a_meminfo_without_memavailable_is_one_line(tmp_path, capsys, monkeypatch):
    """The engines read the same file when they are made (their memory guard): one line naming it, exit 1."""
    from autotune.machine import _meminfo as meminfo

    path = _meminfo(tmp_path, "MemTotal:       16000000 kB\n")
    monkeypatch.setattr(meminfo.MeminfoReader.__init__, "__defaults__", (str(path),))
    space = space_file(tmp_path, lambda raw: raw.update(engine={"name": "cmd", "cmd": {"command": [
        sys.executable, "-c", "pass"]}}))
    argv = tune_argv(tmp_path, space)
    argv[argv.index("--engine") + 1] = "cmd"
    status, _, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == ExitStatus.ERROR and str(path) in line and "MemAvailable" in line, line


def _garbled_cpuinfo(monkeypatch, tmp_path: Path) -> None:
    """psutil's own parser of ``/proc/cpuinfo`` (used where the kernel has no cpufreq) on a file with garbage MHz
    lines: ``float()`` raises, as it does on such a machine."""
    import psutil
    from psutil import _pslinux

    fake = tmp_path / "cpuinfo"
    fake.write_bytes(b"processor\t: 0\ncpu MHz\t\t: abc\n\nprocessor\t: 1\ncpu MHz\t\t: 1e400\n")
    real_open = _pslinux.open_binary
    monkeypatch.setattr(_pslinux, "open_binary",
                        lambda path, *a, **k: real_open(str(fake)) if path.endswith("cpuinfo") else real_open(path))
    monkeypatch.setattr(psutil, "cpu_freq", lambda percpu=False: [
        psutil._common.scpufreq(x, 0.0, 0.0) for x in _pslinux._cpu_get_cpuinfo_freq()])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="psutil's Linux parser")
def test_doctor_and_the_machine_state_on_a_garbled_cpuinfo(tmp_path, capsys, monkeypatch):
    """``doctor`` was a ValueError traceback, and so was every restart's machine state (``read_machine_state``):
    a clock that cannot be read is a clock not reported."""
    import psutil

    from autotune.machine import read_machine_state

    _garbled_cpuinfo(monkeypatch, tmp_path)
    with pytest.raises(ValueError):
        psutil.cpu_freq(percpu=True)  # the injection reproduces psutil's own failure
    state = read_machine_state(cpu_freq=psutil.cpu_freq, gpus=lambda: None)
    assert state.cpu_mhz_mean is None and state.cpu_mhz_min is None
    status, out, err = run_cli(["doctor"], capsys)
    assert "Traceback" not in err and err == "", err
    assert any(line.startswith("note  cpu") and "clock not reported" in line for line in out.splitlines()), out


def test_an_impossible_cpu_clock_reads_as_unknown():
    from autotune.machine import cpu_clocks

    freq = types.SimpleNamespace
    got = cpu_clocks(lambda percpu=False: [freq(current=float("nan"), max=5e6), freq(current=2400.0, max=3000.0),
                                           freq(current=-1.0, max=None)])
    assert got == [(None, None), (2400.0, 3000.0), (None, None)]


def test_doctor_without_any_gpu_does_not_describe_one(capsys, monkeypatch):
    """``doctor`` on a machine with no GPU said "no: the GPU has its own memory"."""
    from autotune.machine import _checkup as checkup

    monkeypatch.setattr(checkup, "gpu_states", lambda: None)
    _, out, _ = run_cli(["doctor"], capsys)
    unified = [line for line in out.splitlines() if "unified" in line]
    assert unified and "the GPU has its own memory" not in unified[0] and "no GPU" in unified[0], unified


class _FakeNvml(types.ModuleType):
    """A pynvml whose library misbehaves as a broken driver does."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0

    def __init__(self, mode: str) -> None:
        super().__init__("pynvml")
        self.mode = mode

    def nvmlInit(self) -> None:
        if self.mode == "init":
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    def nvmlDeviceGetCount(self) -> int:
        return 2**32 - 1 if self.mode == "count" else 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> object:
        return object()

    def nvmlDeviceGetName(self, handle: object) -> bytes:
        return b"\xff\xfeNVIDIA \x1b[2J" + b"x" * 10_000

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"\xff550.54"

    def __getattr__(self, name: str) -> object:
        def fail(*args: object) -> object:
            raise self.NVMLError("Unknown Error")
        return fail


@pytest.mark.parametrize("mode", ["init", "count", "names"])
def test_nvml_errors_read_as_not_reported(monkeypatch, mode):
    """A library that fails to load (OSError, not an NVMLError), a device count NVML cannot truthfully report
    (the loop ran 4 billion times), names that are not UTF-8 (UnicodeDecodeError): each reads as not reported."""
    from autotune.machine import _gpu

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(mode))
    monkeypatch.setattr(_gpu, "_nvml_ok", None)
    states = _gpu.gpu_states()
    version = _gpu.driver_version()
    if mode == "init":
        assert states is None and version is None
    elif mode == "count":
        assert states == []
    else:
        assert states and len(states[0].name) <= 256 and version is not None


@pytest.mark.parametrize("argv", [["--seeds", "0"], ["--seeds", "-1"], ["--workers", "0"], ["--workers", "1,x"],
                                  ["--profiles", "nope"], ["--first-seed", "-1"], ["--workers", "1000"]],
                         ids=lambda a: "".join(a))
def test_bench_scaling_flags_are_one_line(capsys, argv):
    """A held-out probe of every numeric flag of every command (115 values): ``bench-scaling --seeds 0`` (and -1)
    ran nothing and exited 0; ``--workers 0``, ``--profiles nope`` were KeyError tracebacks, ``--workers 1,x`` and
    ``--first-seed -1`` ValueError tracebacks."""
    status, _, err = run_cli(["bench-scaling", *argv], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and argv[0] in line, line


# -- the MLflow tracking URI -----------------------------------------------------------------------------------

_SECRET = "hunter2-tracking"


def _tracking_commands(tmp_path: Path) -> dict[str, list[str]]:
    """Every command that logs to MLflow, as argv that would otherwise make a store, a workdir or run an engine."""
    store = ["--storage", f"sqlite:///{tmp_path}/sub/optuna.db"]
    return {
        "tune": ["tune", "--space", str(space_file(tmp_path)), "--engine", "sim", "--trials", "2", "--no-verify",
                 "--quiet", *store, "--workdir", str(tmp_path / "w"), "--study", "one"],
        "worker": ["worker", "--study", "one", *store, "--workdir", str(tmp_path / "w")],
        "recheck": ["recheck", "--study", "one", *store, "--workdir", str(tmp_path / "w")],
        "track": ["track", "--study", "one", *store],
        "ui": ["ui"],
        "bench": ["bench", "--seeds", "1", "--budgets", "4", "--out", str(tmp_path / "bench")],
    }


def _made(tmp_path: Path) -> set[str]:
    return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")} - {"space.yaml"}


@pytest.mark.parametrize("command", ["tune", "worker", "recheck", "track", "ui", "bench"])
@pytest.mark.parametrize("source", ["flag", "env"])
def test_a_tracking_uri_mlflow_cannot_use_is_one_line_in_every_command_that_logs(tmp_path, capsys, monkeypatch,
                                                                                  command, source):
    """``--tracking-uri xx://...`` (or ``MLFLOW_TRACKING_URI``) ran the study without MLflow, a warning line after
    the store and the workdir were made (``bench`` ran its whole benchmark first). Now every command that logs to
    MLflow refuses it in one line naming where it came from, exit 2, nothing made, the password not shown."""
    monkeypatch.chdir(tmp_path)
    uri = f"xx://bob:{_SECRET}@tracking.example/x"
    argv = _tracking_commands(tmp_path)[command]
    if source == "flag":
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        argv = [*argv, "--tracking-uri", uri]
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    status, out, err = run_cli(argv, capsys)
    line = one_line(err)
    name = "--tracking-uri" if source == "flag" else "MLFLOW_TRACKING_URI"
    assert status == ExitStatus.BAD_INPUT and line.startswith(f"autotune: error: {name} 'xx://***@tracking"), line
    assert "'xx'" in line and "sqlite:///mlruns/mlflow.db" in line, line
    assert _SECRET not in line + out and "bob" not in line
    assert _made(tmp_path) == set()


@pytest.mark.parametrize("uri,why", [
    ("http://[::1", "not a URI"), (f"http://u:{_SECRET}@h:abc", "not a URI"), ("http://", "names no host"),
    (f"postgresql://u:{_SECRET}@db:port/x", "not a URI"), ("sqlite:x.db", "not a database URL"), ("sqlite://", "in memory"),
    ("uc", "model-registry"), (f"bob:{_SECRET}@host", "scheme 'bob'"), ("", "empty"), ("file:", "path is empty")])
def test_a_malformed_tracking_uri_is_refused_before_the_study_starts(tmp_path, capsys, monkeypatch, uri, why):
    monkeypatch.chdir(tmp_path)
    status, out, err = run_cli([*_tracking_commands(tmp_path)["tune"], "--tracking-uri", uri], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and "--tracking-uri" in line and why in line, line
    assert _SECRET not in line + out
    assert _made(tmp_path) == set()


@pytest.mark.parametrize("uri", ["sqlite:///m/mlflow.db", "http://mlflow.team:5000", "https://u:p@h/prefix",
                                 "postgresql+psycopg2://u:p@db/x", "mysql://db/x", "file:///tmp/m", "m/runs",
                                 "databricks", "databricks://profile"])
def test_tracking_uris_mlflow_can_use_are_not_refused(uri):
    from autotune.observers.mlflow import tracking_uri_problem

    assert tracking_uri_problem(uri) is None


def test_no_mlflow_leaves_the_tracking_uri_unread(tmp_path, capsys, monkeypatch):
    """A command told ``--no-mlflow`` never uses the URI: a bad ``MLFLOW_TRACKING_URI`` in the shell does not stop
    it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "xx://nowhere")
    status, _, err = run_cli([*_tracking_commands(tmp_path)["tune"], "--no-mlflow"], capsys)
    assert status == ExitStatus.SUCCESS, err

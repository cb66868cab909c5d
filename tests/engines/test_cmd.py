"""The cmd engine: protocol, failures as data, timeouts that kill the whole process group."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.records import encode
from autotune.engines import EngineError, make_engine
from autotune.engines._output_check import check_request
from autotune.engines.cmd import CmdEngine
from autotune.engines.sim import SimEngine
from autotune.core.records import EngineConfig, Workload

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "cmd_engine_example.py"
WL = Workload(num_prompts=4, output_len=64, timed_passes=2)
CONFIG = EngineConfig(engine_args={"model": "m", "max_num_seqs": 4},
                      compilation_config={"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [4, 8, 16]},
                      speculative_config={"method": "ngram", "num_speculative_tokens": 3},
                      params={"cudagraph_mode": "FULL"}, draft="ngram")

GOOD_RESULT = {"status": "ok", "passes_tok_s": [100.0, 102.5], "warmup_tok_s": [60.0],
               "resolved": {"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [4, 8, 16],
                            "notes": ["setting cudagraph_mode=PIECEWISE"]},
               "accept_len": 2.5, "startup_s": 12.0, "cold": True}


def script(tmp_path: Path, body: str, name: str = "engine.py") -> list[str]:
    """A Python script in ``tmp_path`` as a command."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def printing(tmp_path: Path, last_line: str, exit_code: int = 0) -> list[str]:
    """A command that logs a little, then prints ``last_line`` last."""
    return script(tmp_path, f"""
        import sys
        sys.stdin.read()
        print("INFO loading model", flush=True)
        print("some warning", file=sys.stderr)
        print({last_line!r})
        sys.exit({exit_code})
    """)


def run(engine: CmdEngine, restart: int = 0, seed: int = 7):
    return engine.run_restart(CONFIG, WL, restart=restart, seed=seed)


def test_good_command_gets_the_request_and_its_result_is_parsed(tmp_path):
    seen = tmp_path / "seen.json"
    command = script(tmp_path, f"""
        import json, os, sys
        request = json.load(sys.stdin)
        env = {{k: os.environ.get(k) for k in ("AUTOTUNE_RESTART", "AUTOTUNE_SEED", "AUTOTUNE_CACHE_DIR")}}
        open({str(seen)!r}, "w").write(json.dumps({{"request": request, "env": env}}))
        print("INFO engine ready")
        print(json.dumps({GOOD_RESULT!r}))
    """)
    engine = CmdEngine(cache_dir=str(tmp_path / "cache"), command=command)
    result = run(engine, restart=2, seed=41)
    assert result.ok and result.status == "ok"
    assert result.passes_tok_s == (100.0, 102.5) and result.warmup_tok_s == (60.0,)
    assert result.value == pytest.approx(101.25)
    assert result.resolved is not None and result.resolved.cudagraph_mode == "PIECEWISE"
    assert result.resolved.cudagraph_capture_sizes == (4, 8, 16)
    assert result.accept_len == 2.5 and result.startup_s == 12.0 and result.cold is True
    assert (result.restart, result.seed) == (2, 41)
    assert result.wall_s is not None and 0 < result.wall_s < 30
    assert result.error is None and result.log_tail is None
    got = json.loads(seen.read_text())
    assert got["request"] == {"config": encode(CONFIG), "llm_kwargs": CONFIG.llm_kwargs(),
                              "workload": encode(WL), "restart": 2, "seed": 41,
                              "output_check": check_request(WL)}
    # The output check asks for the first 32 tokens of a few fixed prompts (the same for every configuration).
    assert got["request"]["output_check"]["tokens"] == 32 and got["request"]["output_check"]["prompts"]
    assert got["env"] == {"AUTOTUNE_RESTART": "2", "AUTOTUNE_SEED": "41", "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache")}
    assert result.log_path == str(tmp_path / "cache" / "logs" / f"{CONFIG.key()}-r2.log")
    assert "INFO engine ready" in Path(result.log_path).read_text()


def test_bad_json_line_is_a_failed_restart_with_the_output_kept(tmp_path):
    engine = CmdEngine(cache_dir=str(tmp_path), command=printing(tmp_path, "Traceback (most recent call last): {"))
    result = run(engine)
    assert result.status == "failed" and not result.ok
    assert result.error == "cmd engine: last stdout line is not JSON: 'Traceback (most recent call last): {'"
    assert result.log_tail is not None and "INFO loading model" in result.log_tail and "some warning" in result.log_tail
    log = Path(result.log_path or "")
    assert log.parent == tmp_path / "logs" and "some warning" in log.read_text()


def test_crashing_command_reports_its_exit_status_and_traceback(tmp_path):
    command = script(tmp_path, """
        import sys
        sys.stdin.read()
        print("INFO starting")
        raise RuntimeError("engine core died")
    """)
    result = run(CmdEngine(command=command))
    assert result.status == "failed"
    assert result.error == "cmd engine: command exited with status 1: RuntimeError: engine core died"
    assert result.log_tail is not None and "Traceback (most recent call last)" in result.log_tail
    assert result.log_path is None  # no cache_dir, no log file


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def gone(pid: int, within_s: float = 3.0) -> bool:
    """True once ``pid`` has died (killed processes take a moment to disappear)."""
    deadline = time.monotonic() + within_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_hanging_command_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    command = script(tmp_path, f"""
        import subprocess, sys, time
        sys.stdin.read()
        child = subprocess.Popen(["sleep", "300"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("INFO waiting forever", flush=True)
        time.sleep(300)
    """)
    engine = CmdEngine(command=command, timeout_s=1.0, kill_grace_s=2.0)
    started = time.monotonic()
    result = run(engine)
    assert result.status == "timeout" and not result.ok
    assert "no result within 1s" in (result.error or "")
    assert result.log_tail is not None and "INFO waiting forever" in result.log_tail
    assert result.wall_s is not None and 1.0 <= result.wall_s < 6.0 and time.monotonic() - started < 8.0
    assert gone(int(pid_file.read_text()))


def test_children_that_ignore_sigterm_are_killed_too(tmp_path):
    pid_file = tmp_path / "stubborn.pid"
    command = script(tmp_path, f"""
        import subprocess, sys, time
        sys.stdin.read()
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
        child = subprocess.Popen([sys.executable, "-c", code])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(300)
    """)
    result = run(CmdEngine(command=command, timeout_s=1.0, kill_grace_s=0.5))
    assert result.status == "timeout"
    assert gone(int(pid_file.read_text()))


def test_a_child_left_running_neither_delays_the_result_nor_survives_it(tmp_path):
    pid_file = tmp_path / "leftover.pid"
    command = script(tmp_path, f"""
        import json, subprocess, sys
        sys.stdin.read()
        child = subprocess.Popen(["sleep", "300"])  # inherits stdout, like an engine core process
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print(json.dumps({GOOD_RESULT!r}))
    """)
    started = time.monotonic()
    result = run(CmdEngine(command=command, timeout_s=30))
    assert result.ok and time.monotonic() - started < 10
    assert gone(int(pid_file.read_text()))


def test_failed_status_object_is_a_failed_restart(tmp_path):
    line = json.dumps({"status": "failed", "error": "CUDA out of memory while capturing graphs for sizes up to 512",
                       "resolved": {"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [512]}})
    result = run(CmdEngine(command=printing(tmp_path, line)))
    assert result.status == "failed"
    assert result.error == "CUDA out of memory while capturing graphs for sizes up to 512"
    assert result.resolved is not None and result.resolved.cudagraph_capture_sizes == (512,)


@pytest.mark.parametrize(("payload", "problem"), [
    ({"status": "ok"}, "'passes_tok_s' must be a non-empty list of numbers"),
    ({**GOOD_RESULT, "passes_tok_s": ["fast"]}, "'passes_tok_s' must hold finite numbers"),
    ({**GOOD_RESULT, "resolved": None}, "'resolved' must be an object"),
    ({**GOOD_RESULT, "resolved": {"cudagraph_capture_sizes": "4,8"}}, "must be a list of integers"),
    ({**GOOD_RESULT, "accept_len": "2.5"}, "'accept_len' must hold finite numbers"),
    ({**GOOD_RESULT, "cold": "yes"}, "'cold' must be true or false"),
    ({**GOOD_RESULT, "latency": [1]}, "'latency' must be an object"),
    ({**GOOD_RESULT, "latency": {"tpot_p99_ms": "slow"}}, "'latency.tpot_p99_ms' must hold finite numbers"),
    ({**GOOD_RESULT, "status": "done"}, "'status' must be \"ok\" or \"failed\""),
    ([1, 2, 3], "JSON but not an object"),
])
def test_missing_or_ill_typed_fields_say_what_was_wrong(tmp_path, payload, problem):
    result = run(CmdEngine(command=printing(tmp_path, json.dumps(payload))))
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("cmd engine: ") and problem in result.error
    assert "\n" not in result.error


def test_latency_is_read_when_the_command_reports_it(tmp_path):
    line = json.dumps({**GOOD_RESULT, "latency": {"tpot_p99_ms": 9.5, "ttft_p99_ms": 120}})
    result = run(CmdEngine(command=printing(tmp_path, line)))
    assert result.status == "ok" and result.latency == {"tpot_p99_ms": 9.5, "ttft_p99_ms": 120.0}


def test_phases_are_recorded_as_phase_facts_and_priced_by_the_minutes_budget(tmp_path):
    from autotune.core import facts as F
    from autotune.study._budget import StartCosts

    phases = {"load": 12.0, "compile": 30.0, "import": 3.0, "warmup": 4.0, "timed": 10.0}
    result = run(CmdEngine(command=printing(tmp_path, json.dumps({**GOOD_RESULT, "phases": phases}))))
    assert result.ok
    assert {k: v for k, v in result.facts.items() if k in F.PHASES} == {
        F.PHASE_LOAD_S: 12.0, F.PHASE_COMPILE_S: 30.0, F.PHASE_IMPORT_S: 3.0, F.PHASE_WARMUP_S: 4.0,
        F.PHASE_TIMED_S: 10.0}
    assert StartCosts.from_runs([("k", result)]).phased  # the budget's forecast prices it by phases


@pytest.mark.parametrize(("phases", "problem"), [
    ({"loading": 1.0}, "'phases.loading' is not a phase; use launch, import, setup, load, compile"),
    ({"load": -1.0}, "'phases.load' must be >= 0"),
    ({"load": "slow"}, "'phases.load' must hold finite numbers"),
    ([1.0], "'phases' must be an object of seconds"),
])
def test_bad_phases_are_a_failed_restart_naming_the_field(tmp_path, phases, problem):
    result = run(CmdEngine(command=printing(tmp_path, json.dumps({**GOOD_RESULT, "phases": phases}))))
    assert result.status == "failed" and result.error is not None and problem in result.error, result.error


def test_ok_line_with_nonzero_exit_is_not_trusted(tmp_path):
    result = run(CmdEngine(command=printing(tmp_path, json.dumps(GOOD_RESULT), exit_code=3)))
    assert result.status == "failed" and "status 3" in (result.error or "")


def test_missing_executable_is_a_failed_restart(tmp_path):
    result = run(CmdEngine(command=[str(tmp_path / "no-such-engine")]))
    assert result.status == "failed" and "cannot start" in (result.error or "")


def test_options_are_validated():
    with pytest.raises(EngineError, match=r"engine\.cmd\.command is missing"):
        make_engine("cmd")
    with pytest.raises(EngineError, match=r"engine\.cmd\.command must be"):
        CmdEngine(command=[1, 2])
    with pytest.raises(EngineError, match=r"engine\.cmd\.timeout_s"):
        CmdEngine(command="true", timeout_s=0)
    with pytest.raises(EngineError, match=r"engine\.cmd\.retries.*engine\.cmd\.command"):
        CmdEngine(command="true", retries=2)
    engine = make_engine("cmd", command="python3 -m my_engine --flag 'a b'")
    assert isinstance(engine, CmdEngine)
    assert engine.command == ["python3", "-m", "my_engine", "--flag", "a b"]
    assert engine.settings.timeout_s == 1800 and encode(engine.describe()) == {"engine": "cmd", "command": engine.command}


def test_example_wrapper_reproduces_the_sim_engine(tmp_path):
    """The example drives the sim engine in a subprocess: same inputs, same numbers, through JSON."""
    engine = CmdEngine(cache_dir=str(tmp_path / "cmd"), command=[sys.executable, str(EXAMPLE), "--profile", "gb10"])
    direct = SimEngine(cache_dir=str(tmp_path / "direct"), profile="gb10")
    for restart in range(2):
        via_cmd = engine.run_restart(CONFIG, WL, restart=restart, seed=restart)
        expected = direct.run_restart(CONFIG, WL, restart=restart, seed=restart)
        assert via_cmd.ok and via_cmd.cold == (restart == 0)
        assert via_cmd.passes_tok_s == expected.passes_tok_s
        assert via_cmd.warmup_tok_s == expected.warmup_tok_s
        assert via_cmd.resolved == expected.resolved
        assert via_cmd.accept_len == expected.accept_len and via_cmd.startup_s == expected.startup_s
        phases = {k: v for k, v in expected.facts.items() if k.startswith("phase_")}
        assert phases and {k: via_cmd.facts[k] for k in phases} == phases  # where its time went, through JSON


def test_load_levels_come_back_one_entry_per_level(tmp_path):
    levels = Workload(num_prompts=4, output_len=64, timed_passes=1, concurrency=(1, 8), aggregate="min")
    reply = {"status": "ok", "passes_tok_s": [50.0, 300.0], "resolved": {"cudagraph_mode": "FULL"},
             "levels": [{"concurrency": 1, "passes_tok_s": [50.0], "latency": {"tpot_p99_ms": 5.0}},
                        {"concurrency": 8, "passes_tok_s": [300.0]}]}
    engine = CmdEngine(command=printing(tmp_path, json.dumps(reply)))
    result = engine.run_restart(CONFIG, levels, restart=0, seed=1)
    assert result.ok and [lv.concurrency for lv in result.levels] == [1, 8]
    assert result.levels[0].latency == {"tpot_p99_ms": 5.0} and levels.scored(result).value == 50.0
    one_level = engine.run_restart(CONFIG, WL, restart=0, seed=1)
    assert not one_level.ok and "load levels are [4] but the reply's 'levels' are [1, 8]" in one_level.error
    missing = CmdEngine(command=printing(tmp_path, json.dumps(GOOD_RESULT)))
    result = missing.run_restart(CONFIG, levels, restart=0, seed=1)
    assert not result.ok and "load levels are [1, 8] but the reply's 'levels' are []" in result.error


@pytest.mark.parametrize(("extra", "problem"), [
    ({"latency": {"tpot_p99_ms": -5.0}}, "'latency.tpot_p99_ms' must be >= 0"),
    ({"latency": {"ttft_p99_ms": float("nan")}}, "'latency.ttft_p99_ms' must hold finite numbers, got nan"),
    ({"latency": {"ttft_p99_ms": float("inf")}}, "'latency.ttft_p99_ms' must hold finite numbers, got inf"),
    ({"startup_s": -1}, "'startup_s' must be >= 0"),
])
def test_cmd05_a_negative_or_non_finite_value_is_a_failed_restart_with_the_reason(tmp_path, extra, problem):
    """CMD05: a negative latency met every slo limit and won; it is a failed restart naming the field."""
    line = json.dumps({**GOOD_RESULT, **extra})  # json writes NaN / Infinity, which Python's reader accepts
    result = run(CmdEngine(command=printing(tmp_path, line)))
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("cmd engine: ") and problem in result.error and "\n" not in result.error


def test_cmd05_a_negative_latency_at_a_load_level_is_refused():
    from autotune.engines.cmd import ProtocolError, parse_result_line

    line = json.dumps({**GOOD_RESULT, "levels": [{"concurrency": 4, "passes_tok_s": [1.0],
                                                  "latency": {"e2el_p99_ms": -1}}]})
    with pytest.raises(ProtocolError, match=r"'levels\[0\].latency.e2el_p99_ms' must be >= 0"):
        parse_result_line(line)


def test_an_unknown_field_is_refused_not_ignored(tmp_path):
    """A misspelt 'latency' would drop the slo check silently: the ok line is validated strictly."""
    result = run(CmdEngine(command=printing(tmp_path, json.dumps({**GOOD_RESULT, "latancy": {"tpot_p99_ms": 9}}))))
    assert result.status == "failed" and "'latancy' is not a field of the protocol; use status, passes_tok_s" in (
        result.error or "")
    ok = run(CmdEngine(command=printing(tmp_path, json.dumps({**GOOD_RESULT, "accept_len": None, "latency": None}))))
    assert ok.status == "ok", "null still means not reported"

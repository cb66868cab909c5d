"""The launcher and the engine around it: deadlines, crashes, whole-group kills, results (no vLLM needed).

Each test runs a small Python child script that behaves like a misbehaving engine: it hangs, crashes, or
spawns grandchildren that ignore SIGTERM. Every test then checks that no process of the group is left.
"""

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
from autotune.engines.vllm import VllmEngine
from autotune.engines.vllm import _passes as passes_mod
from autotune.engines.vllm import _runner as runner
from autotune.engines.vllm import _serve as serve
from autotune.engines.vllm._facts import accept_length
from autotune.engines.vllm._launcher import kill_group, launch, tail_text
from autotune.config.workload import DEFAULT_PROMPTS
from autotune.core.records import Dataset, EngineConfig, RestartStatus, Workload
from tests._helpers.processes import wait_gone

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="process checks read /proc")


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def _launch(argv: list[str], tmp_path: Path, **kwargs):
    kwargs.setdefault("startup_timeout_s", 30)
    kwargs.setdefault("measure_timeout_s", 30)
    kwargs.setdefault("kill_grace_s", 1.0)
    return launch(argv, log_path=tmp_path / "logs" / "engine.log", **kwargs)


SPAWN_GRANDCHILDREN = """
    import os, signal, subprocess, sys, time
    pidfile = sys.argv[1]
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]),
            subprocess.Popen([sys.executable, "-c", stubborn])]
    with open(pidfile, "w") as fh:
        fh.write(" ".join(str(p) for p in [os.getpid()] + [k.pid for k in kids]))
    print("spawned", flush=True)
    {tail}
"""


def _pids(path: Path, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return [int(p) for p in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("child never wrote its pids")


def test_success_parses_ready_and_result_markers(tmp_path: Path) -> None:
    argv = _script(tmp_path, """
        import json, sys
        request = json.loads(sys.stdin.read())
        print("engine says hello")
        print("AUTOTUNE_READY " + json.dumps({"startup_s": 0.1}), flush=True)
        print("AUTOTUNE_RESULT " + json.dumps({"echo": request["x"], "passes_tok_s": [1.0, 2.0]}), flush=True)
    """)
    out = _launch(argv, tmp_path, stdin_text=json.dumps({"x": 42}))
    assert out.returncode == 0
    assert out.timed_out is None
    assert out.ready == {"startup_s": 0.1}
    assert out.result == {"echo": 42, "passes_tok_s": [1.0, 2.0]}
    assert out.startup_s is not None and out.startup_s < out.wall_s
    assert "engine says hello" in out.tail
    assert "engine says hello" in Path(out.log_path).read_text()


def test_marker_after_output_without_newline_is_found(tmp_path: Path) -> None:
    # A benchmark child that exits mid-line (a native extension's warning) must not hide the next marker.
    argv = _script(tmp_path, """
        import sys
        sys.stdout.write("leak warning without newline")
        print('AUTOTUNE_RESULT {"passes_tok_s": [3.0]}', flush=True)
    """)
    out = _launch(argv, tmp_path)
    assert out.result == {"passes_tok_s": [3.0]}


def test_crash_is_noticed_before_the_deadline(tmp_path: Path) -> None:
    argv = _script(tmp_path, """
        import sys, time
        time.sleep(0.3)
        print("Traceback (most recent call last):")
        print("RuntimeError: boom while loading", file=sys.stderr, flush=True)
        sys.exit(3)
    """)
    start = time.monotonic()
    out = _launch(argv, tmp_path, startup_timeout_s=60)
    assert time.monotonic() - start < 10, "a crash must not wait for the start-up deadline"
    assert out.returncode == 3
    assert out.timed_out is None and out.ready is None and out.result is None
    assert "RuntimeError: boom while loading" in out.tail


def test_error_marker_is_parsed(tmp_path: Path) -> None:
    argv = _script(tmp_path, """
        import json, sys
        print("AUTOTUNE_ERROR " + json.dumps({"type": "ValueError", "message": "bad size"}), flush=True)
        sys.exit(1)
    """)
    out = _launch(argv, tmp_path)
    assert out.returncode == 1
    assert out.failure == {"type": "ValueError", "message": "bad size"}


def test_startup_deadline_kills_a_hung_engine(tmp_path: Path) -> None:
    argv = _script(tmp_path, """
        import time
        print("loading forever", flush=True)
        time.sleep(600)
    """)
    start = time.monotonic()
    # 3 s: long enough for the child's interpreter to start and print even on a loaded machine.
    out = _launch(argv, tmp_path, startup_timeout_s=3.0)
    elapsed = time.monotonic() - start
    assert out.timed_out == "startup"
    assert 3.0 <= elapsed < 15
    assert out.returncode is not None and out.returncode < 0  # killed by a signal
    assert "loading forever" in out.tail


def test_measure_deadline_starts_at_the_ready_marker(tmp_path: Path) -> None:
    # Start-up takes longer than the measurement deadline: only the start-up deadline applies before READY.
    argv = _script(tmp_path, """
        import time
        time.sleep(1.5)
        print("AUTOTUNE_READY {}", flush=True)
        time.sleep(600)
    """)
    out = _launch(argv, tmp_path, startup_timeout_s=10, measure_timeout_s=1.0)
    assert out.timed_out == "measure"
    assert out.ready == {}
    assert out.startup_s is not None and out.startup_s >= 1.5
    assert out.wall_s >= out.startup_s + 1.0


def test_timeout_kills_the_whole_group_including_sigterm_ignoring_grandchildren(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    argv = _script(tmp_path, SPAWN_GRANDCHILDREN.format(tail="time.sleep(600)")) + [str(pidfile)]
    out = _launch(argv, tmp_path, startup_timeout_s=3.0)
    assert out.timed_out == "startup"
    pids = _pids(pidfile)
    assert len(pids) == 3
    assert wait_gone(pids) == []


def test_grandchildren_left_behind_by_a_finished_engine_are_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    tail = 'print("AUTOTUNE_RESULT {}", flush=True); sys.exit(0)'
    argv = _script(tmp_path, SPAWN_GRANDCHILDREN.format(tail=tail)) + [str(pidfile)]
    out = _launch(argv, tmp_path)
    assert out.returncode == 0 and out.result == {}
    assert wait_gone(_pids(pidfile)) == []


def test_crashing_engine_takes_its_grandchildren_with_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    tail = 'os.kill(os.getpid(), signal.SIGSEGV)'
    argv = _script(tmp_path, SPAWN_GRANDCHILDREN.format(tail=tail)) + [str(pidfile)]
    out = _launch(argv, tmp_path)
    assert out.returncode == -11
    assert wait_gone(_pids(pidfile)) == []


def test_missing_executable_is_reported_not_raised(tmp_path: Path) -> None:
    out = _launch([str(tmp_path / "no-such-python")], tmp_path)
    assert out.returncode is None
    assert out.error is not None and "no-such-python" in out.error


def test_environment_and_stdin_reach_the_child(tmp_path: Path) -> None:
    argv = _script(tmp_path, """
        import json, os, sys
        data = sys.stdin.read()
        print("AUTOTUNE_RESULT " + json.dumps({"env": os.environ.get("AUTOTUNE_TEST_VAR"), "stdin": data}))
    """)
    env = dict(os.environ, AUTOTUNE_TEST_VAR="yes")
    out = _launch(argv, tmp_path, env=env, stdin_text="hello")
    assert out.result == {"env": "yes", "stdin": "hello"}
    assert not list((tmp_path / "logs").glob("*.stdin")), "the stdin file is removed after launch"


def test_kill_group_escalates_to_sigkill(tmp_path: Path) -> None:
    import subprocess

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    os.killpg(proc.pid, 15)
    time.sleep(0.3)
    assert proc.poll() is None, "the child ignores SIGTERM"
    start = time.monotonic()
    kill_group(proc.pid, grace_s=0.5)
    proc.wait(timeout=5)
    assert proc.returncode == -9
    assert time.monotonic() - start < 10


def test_tail_keeps_the_last_lines_and_the_last_progress_state() -> None:
    text = "\n".join(f"line {i}" for i in range(200)) + "\nCapturing: 10%\rCapturing: 50%\rCapturing: 100% 7/7\n"
    tail = tail_text(text, lines=5)
    lines = tail.splitlines()
    assert lines[-1] == "Capturing: 100% 7/7"
    assert lines[0] == "line 196"
    assert len(tail_text("x" * 50_000, chars=1000)) == 1000


# -- the engine around the launcher, with fake runners (no vLLM) ---------------------------------------------

WORKLOAD = Workload(num_prompts=2, input_len=8, output_len=4, concurrency=2, timed_passes=2)
CONFIG = EngineConfig(
    engine_args={"model": "org/model", "max_num_seqs": 2},
    compilation_config={"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2, 4, 8]},
    speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                        "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.6, 0.5, 0.4]},
)

FAKE_OK = """
    import json, os, sys
    request = json.loads(sys.stdin.read())
    with open(os.environ["FAKE_REQUEST_FILE"], "w") as fh:
        json.dump({"request": request, "cache_root": os.environ.get("VLLM_CACHE_ROOT")}, fh)
    print("WARNING 01-01 00:00:00 [vllm.py:1605] Async scheduling not supported with ngram-based speculative "
          "decoding and will be disabled.")
    resolved = {"cudagraph_mode": "CUDAGraphMode.NONE", "cudagraph_capture_sizes": [], "compile_mode": "NONE",
                "details": {"speculative_method": "ngram", "async_scheduling": False}}
    print("AUTOTUNE_READY " + json.dumps({"startup_s": 0.1, "resolved": resolved}), flush=True)
    print("AUTOTUNE_RESULT " + json.dumps({"passes_tok_s": [100.0, 110.0], "warmup_tok_s": [50.0, 99.0, 100.0],
                                           "accept_len": 2.5, "peak_memory_gib": None}), flush=True)
"""

FAKE_OOM = """
    import sys
    print("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Profiling CUDA graph memory: FULL=4 (largest=8)")
    print("Capturing CUDA graphs (decode, FULL):  50%|#####     | 2/4", flush=True)
    print("Traceback (most recent call last):")
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.", flush=True)
    sys.exit(1)
"""

FAKE_REJECT = """
    import json, sys
    msg = ("1 validation error for SpeculativeConfig\\n  Value error, synthetic_acceptance_rates must have length 3, "
           "got [0.8]. [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]")
    print("Traceback (most recent call last):")
    print("AUTOTUNE_ERROR " + json.dumps({"type": "ValidationError", "message": msg}), flush=True)
    sys.exit(1)
"""


def _fake_engine(tmp_path: Path, body: str, **options) -> VllmEngine:
    script = tmp_path / "fake_runner.py"
    script.write_text(textwrap.dedent(body))
    # The engine appends the runner's path to the launcher; the fake ignores it and reads stdin like the runner.
    return VllmEngine(cache_dir=str(tmp_path / "study"), launcher=[sys.executable, str(script)],
                      startup_timeout_s=options.pop("startup_timeout_s", 30), **options)


def test_restart_result_from_a_fake_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_REQUEST_FILE", str(tmp_path / "request.json"))
    engine = _fake_engine(tmp_path, FAKE_OK, env={"MY_VAR": 1})
    first = engine.run_restart(CONFIG, WORKLOAD, restart=0, seed=7)
    second = engine.run_restart(CONFIG, WORKLOAD, restart=1, seed=8)
    assert first.status == RestartStatus.OK and first.passes_tok_s == (100.0, 110.0)
    assert first.warmup_tok_s == (50.0, 99.0, 100.0) and first.accept_len == 2.5
    assert first.cold is True and second.cold is False, "the first start of a config is cold, later ones warm"
    assert first.resolved is not None and first.resolved.cudagraph_mode == "NONE"
    assert first.resolved.notes == (
        "Async scheduling not supported with ngram-based speculative decoding and will be disabled.",)
    assert first.log_path != second.log_path and Path(first.log_path).is_file()
    seen = json.loads((tmp_path / "request.json").read_text())
    request = seen["request"]
    assert seen["cache_root"] == str(tmp_path / "study" / "vllm-cache"), "study-local compile cache by default"
    assert request["env"]["MY_VAR"] == "1" and request["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert request["seed"] == 8 and request["llm_kwargs"]["seed"] == 8
    # A space without a dataset runs autotune's shipped prompts on a real checkpoint.
    assert request["workload"] == {**encode(WORKLOAD),
                                   "dataset": {"source": "jsonl", "path": str(DEFAULT_PROMPTS), "name": None, "args": {}}}
    # One synthetic rate per draft position: the space's longer list is cut to K.
    assert request["llm_kwargs"]["speculative_config"]["synthetic_acceptance_rates"] == [0.8, 0.6, 0.5]
    assert request["llm_kwargs"]["compilation_config"] == {"cudagraph_mode": "FULL",
                                                           "cudagraph_capture_sizes": [1, 2, 4, 8]}


def test_oom_while_capturing_is_a_failed_restart_with_one_line(tmp_path: Path) -> None:
    engine = _fake_engine(tmp_path, FAKE_OOM)
    result = engine.run_restart(CONFIG, WORKLOAD, restart=0, seed=0)
    assert result.status == RestartStatus.FAILED
    assert result.error == "CUDA out of memory while capturing graphs for sizes up to 8"
    assert result.log_tail and "OutOfMemoryError" in result.log_tail
    assert not engine.cold_marker(CONFIG).exists(), "a start that never got ready leaves the config cold"


def test_rejected_config_reason_is_vllms_value_error(tmp_path: Path) -> None:
    result = _fake_engine(tmp_path, FAKE_REJECT).run_restart(CONFIG, WORKLOAD, restart=0, seed=0)
    assert result.status == RestartStatus.FAILED
    assert result.error == "ValidationError: synthetic_acceptance_rates must have length 3, got [0.8]."


def test_startup_timeout_is_a_timeout_restart(tmp_path: Path) -> None:
    engine = _fake_engine(tmp_path, "import time\nprint('compiling', flush=True)\ntime.sleep(600)\n",
                          startup_timeout_s=3)
    result = engine.run_restart(CONFIG, WORKLOAD, restart=0, seed=0)
    assert result.status == RestartStatus.TIMEOUT
    assert result.error is not None and result.error.startswith("engine start-up exceeded 3 s")
    assert "compiling" in (result.log_tail or "")


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"bogus": 1}, "unknown option engine.vllm.bogus"),
        ({"python": "/x/python", "launcher": ["docker", "run", "img", "python3"]}, "engine.vllm.python and engine.vllm.launcher"),
        ({"mode": "batch"}, "engine.vllm.mode must be one of offline, serve, got 'batch'"),
        ({"startup_timeout_s": 0}, "engine.vllm.startup_timeout_s must be a number of seconds over 0"),
        ({"env": ["A=1"]}, "engine.vllm.env must be"),
        ({"extra_args": {"compilation_config": {}}}, "engine.vllm.extra_args.compilation_config"),
        ({"launcher": []}, "engine.vllm.launcher must be"),
    ],
)
def test_bad_options_are_rejected_by_name(options: dict, needle: str) -> None:
    with pytest.raises(EngineError, match="vllm engine") as info:
        make_engine("vllm", **options)
    assert needle in str(info.value)


def test_launcher_string_is_split_like_a_shell() -> None:
    engine = VllmEngine(launcher="docker run -i --rm 'my image' python3")
    assert engine.settings.interpreter() == ["docker", "run", "-i", "--rm", "my image", "python3"]


class _Space:
    checked = False

    def check_model_paths(self) -> None:
        self.checked = True


def test_check_names_the_interpreter_and_the_fix_when_vllm_is_missing() -> None:
    no_vllm = [sys.executable, "-c", "raise ModuleNotFoundError(\"No module named 'vllm'\")"]
    engine = VllmEngine(launcher=no_vllm)
    space = _Space()
    with pytest.raises(EngineError) as info:
        engine.check(space)  # type: ignore[arg-type]
    assert space.checked
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("vllm engine: cannot import vllm with ")
    assert "(ModuleNotFoundError: No module named 'vllm')" in message
    assert message.endswith("install vllm there, or set engine.python / engine.launcher, or use --engine sim")
    assert encode(engine.describe()) == {"engine": "vllm", "mode": "offline"}


def test_check_caches_the_version_for_describe() -> None:
    fake = ('import json; print("AUTOTUNE_RESULT " + json.dumps({"vllm": "9.9.9", "torch": "2.0", '
            '"cuda": "13.0", "gpu": "NVIDIA H200", "driver": "580.1"}))')
    engine = VllmEngine(launcher=[sys.executable, "-c", fake])
    engine.check(_Space())  # type: ignore[arg-type]
    facts = engine.describe()
    assert facts.version == "9.9.9" and facts.gpu == "NVIDIA H200"
    assert facts.driver == "580.1" and facts.cuda == "13.0"


# -- the runner's pure parts (it imports only the standard library until it builds the engine) ---------------


class _FakePasses:
    def __init__(self, values: list[float]) -> None:
        self.values = list(values)
        self.rounds: list[int] = []

    def run(self, kind: str, index: int, rounds: int = 1) -> dict:
        self.rounds.append(rounds)
        return {"kind": kind, "index": index, "tok_s": self.values.pop(0), "seconds": 0.5 * rounds}


@pytest.mark.parametrize(
    ("values", "minimum", "maximum", "expected"),
    [
        ([720, 1586, 2089, 3826, 3700, 3900, 3600, 3800], 1, 8, 5),  # the H200 ramp: warm after it (MSER + trend)
        ([3517, 3401, 3773, 2831, 3500], 1, 8, 4),  # the H200 baseline's noise: first pass dropped, three judged
        ([50, 100, 200, 300, 450], 1, 4, 4),  # never steady: capped
        ([100, 100, 100, 100, 100, 100], 5, 6, 5),  # steady early, but the minimum still runs
        ([100], 0, 4, 0),  # warmup_passes 0: none
    ],
)
def test_warm_up_ends_by_the_rule(values, minimum, maximum, expected) -> None:
    workload = {"warmup_passes": minimum, "max_warmup_passes": maximum}
    done = passes_mod.warm_up(_FakePasses(values), workload)  # type: ignore[arg-type]
    assert len(done) == expected


def test_warm_up_with_the_requests_noise_prior_stops_at_the_third_pass_and_says_so() -> None:
    workload = {"warmup_passes": 1, "max_warmup_passes": 4}
    baseline = [3517.0, 3401.0, 3773.0, 2831.0, 3500.0]  # the baseline: noise, no ramp
    done = passes_mod.warm_up(_FakePasses(baseline), workload, {"log_sd": 0.17, "df": 32})  # type: ignore[arg-type]
    assert len(done) == 3 and done[-1]["stop"] == "prior"
    assert passes_mod.phases({}, done, [])["warmup_rule"] == "prior"
    ramp = [720.0, 1586.0, 2089.0, 3826.0, 3800.0]  # the measured ramp: still rising at the third pass
    assert len(passes_mod.warm_up(_FakePasses(ramp), workload, {"log_sd": 0.17, "df": 32})) == 4  # type: ignore[arg-type]
    # An older engine sends no prior: the rule alone, which cannot stop before its cap of 4 here.
    done = passes_mod.warm_up(_FakePasses(baseline), workload)  # type: ignore[arg-type]
    assert len(done) == 4 and done[-1]["stop"] == "cap"
    assert passes_mod.phases({}, [], [])["warmup_rule"] == "none"


def test_the_request_carries_the_studys_noise_prior_once_there_is_one(tmp_path) -> None:
    engine = VllmEngine(cache_dir=str(tmp_path))
    config = EngineConfig(engine_args={"model": "m"})
    assert engine.request(config, Workload(), seed=0)["warmup_noise"] is None
    for passes in ((1000.0, 1100.0, 950.0), (2000.0, 1900.0, 2050.0)):
        engine.learn_noise(_ok(passes))
    noise = engine.request(config, Workload(), seed=0)["warmup_noise"]
    assert noise["df"] == 4 and 0.0 < noise["log_sd"] < 0.2
    assert json.loads(json.dumps(noise)) == noise  # it travels as JSON


def _ok(passes):
    from autotune.core.records import RestartResult

    return RestartResult("ok", passes_tok_s=tuple(passes))


def test_timed_passes_are_sized_from_the_last_warm_up_pass() -> None:
    passes = _FakePasses([1000.0] * 9)
    warmups = passes_mod.warm_up(passes, {"warmup_passes": 1, "max_warmup_passes": 4})  # 0.5 s a round
    timed = passes_mod.time_passes(passes, {"timed_passes": 3, "pass_seconds": 5.0}, warmups)
    assert len(timed) == 3 and passes.rounds[len(warmups):] == [10, 10, 10]
    assert passes_mod.time_passes(passes, {"timed_passes": 1, "pass_seconds": 0}, warmups) and passes.rounds[-1] == 1


def test_runner_prompts_are_token_ids_and_repeat_an_ngram() -> None:
    workload = {"seed": 1, "num_prompts": 3, "input_len": 40, "repetitive_prompts": True}
    prompts = runner.build_prompts(workload, vocab_size=1024)
    assert len(prompts) == 3 and all(len(p) == 40 for p in prompts)
    assert prompts[0][:16] == prompts[0][16:32]
    assert prompts == runner.build_prompts(workload, vocab_size=1024), "the same seed gives the same prompts"
    assert all(0 <= t < 1024 for p in prompts for t in p)


def test_serve_mode_runs_vllm_bench_serve_at_each_load_level(tmp_path: Path) -> None:
    workload = encode(Workload(num_prompts=4, input_len=8, output_len=4, concurrency=(1, 8), aggregate="min",
                               dataset=Dataset("synthetic")))
    request = {"workload": workload, "llm_kwargs": {"model": "m"}}
    assert passes_mod.load_levels(workload) == [1, 8] and passes_mod.load_levels({"concurrency": 4}) is None
    first = serve.ServePasses(request, 8000, str(tmp_path), concurrency=1)
    second = first.at(8)

    def flag(passes: serve.ServePasses, name: str) -> str:
        argv = passes.command("x.json")
        return argv[argv.index(name) + 1]

    assert flag(first, "--max-concurrency") == "1" and flag(second, "--max-concurrency") == "8"
    assert second.totals is first.totals, "acceptance counters run on across levels of one server"
    assert flag(second, "--num-prompts") == "4", "every level runs the same prompts"


def test_level_measurement_keeps_each_level_and_pools_acceptance() -> None:
    def passes(tok_s: float, before: float, after: float) -> dict:
        counters = {"vllm:spec_decode_num_drafts": after, "vllm:spec_decode_num_accepted_tokens": 2 * after}
        start = {"vllm:spec_decode_num_drafts": before, "vllm:spec_decode_num_accepted_tokens": 2 * before}
        timing = {"ttft": 0.01 * tok_s, "e2el": 0.02 * tok_s, "tpot": 0.001, "itl": None}
        return {"tok_s": tok_s, "seconds": 1.0, "tokens": 10, "before": start, "counters": counters,
                "timings": [timing]}

    out = passes_mod.reply(1.0, None, {}, [], [(1, [passes(10.0, 0, 4)]), (8, [passes(50.0, 6, 10)])],
                           None, {"tpot_p99_ms": 5.0})
    assert [lv.concurrency for lv in out.levels] == [1, 8] and out.passes_tok_s == (10.0, 50.0)
    assert out.accept_len == 3.0, "8 drafts, 16 accepted: the warm-up between levels (drafts 4 to 6) left out"
    assert out.latency == {}, "several levels: each level has its latency, the restart's is combined by the engine"
    eight = out.levels[1].latency
    assert eight["ttft_p99_ms"] == pytest.approx(500.0) and eight["goodput"] == 1.0, "1 request in 1 s met 5 ms"


def test_acceptance_length_from_counter_deltas() -> None:
    before = {"vllm:spec_decode_num_drafts": 10.0, "vllm:spec_decode_num_accepted_tokens": 20.0}
    after = {"vllm:spec_decode_num_drafts": 30.0, "vllm:spec_decode_num_accepted_tokens": 60.0}
    assert accept_length(before, after) == 3.0
    assert accept_length(after, after) is None


@pytest.mark.parametrize("name", ["_runner.py", "_passes.py", "_serve.py", "_wire.py", "_dataset.py", "_facts.py",
                                  "_warmup.py"])
def test_runner_module_imports_only_the_standard_library(name: str) -> None:
    import ast

    tree = ast.parse((Path(runner.__file__).parent / name).read_text())
    # The underscored names are the runner's siblings, imported from the runner's own directory.
    allowed = {"__future__", "collections", "json", "math", "os", "random", "shutil", "socket", "subprocess", "sys",
               "statistics", "tempfile", "time", "traceback", "typing", "urllib", "dataclasses", "_dataset", "_facts",
               "_warmup", "_passes", "_serve", "_wire"}
    for node in tree.body:  # module level: what runs before the request is read
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        for module in modules:
            assert module.split(".")[0] in allowed, f"{name} must run without autotune installed: {module}"


# -- the audit through a fake engine process ---------------------------------------------------------------

FAKE_AUDIT = """
    import json, sys
    body = sys.stdin.read()
    if not body:  # the version probe
        print("AUTOTUNE_RESULT " + json.dumps({"vllm": "0.0.fake", "torch": "x", "cuda": None, "gpu": None}))
        sys.exit(0)
    request = json.loads(body)
    k = request["llm_kwargs"]["speculative_config"]["num_speculative_tokens"]
    sizes = request["llm_kwargs"]["compilation_config"]["cudagraph_capture_sizes"]
    rounded = sorted({-(-s // (k + 1)) * (k + 1) for s in sizes if -(-s // (k + 1)) * (k + 1) <= max(sizes)})
    resolved = {"cudagraph_mode": "CUDAGraphMode.FULL_AND_PIECEWISE", "cudagraph_capture_sizes": rounded,
                "compile_mode": "VLLM_COMPILE",
                "details": {"speculative_method": "ngram", "num_speculative_tokens": k, "model_runner": "v1"}}
    print("AUTOTUNE_READY " + json.dumps({"resolved": resolved}), flush=True)
    print("AUTOTUNE_RESULT " + json.dumps({"passes_tok_s": [1000.0], "accept_len": 2.9}), flush=True)
"""


def test_audit_reports_silent_capture_size_rounding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from autotune.cli.audit import run_audit
    from autotune.config.space import load_space

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    script = tmp_path / "fake_vllm.py"
    script.write_text(textwrap.dedent(FAKE_AUDIT))
    space = load_space(root / "search_spaces" / "cpu-tiny.yaml")
    params = {"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": [1, 2, 4, 8], "K": 3}
    options = {"launcher": [sys.executable, str(script)]}
    out = io.StringIO()
    json_path = tmp_path / "audit.json"
    code = run_audit(space, params, options, True, out, engine="vllm", cache_dir=str(tmp_path / "work"),
                     json_path=str(json_path))
    text = out.getvalue()
    assert code == 3, text
    assert "[1, 2, 4, 8]" in text and "[4, 8]" in text
    assert "changed without a log line saying so: capture_sizes" in text
    assert json.loads(json_path.read_text())["changed"] == ["capture_sizes"]
    # Without --strict the same finding is printed but the exit status is 0.
    assert run_audit(space, params, options, False, io.StringIO(), engine="vllm",
                     cache_dir=str(tmp_path / "work")) == 0


def test_audit_reads_the_model_runner_from_the_spaces_engine_env(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit's configured model runner is the engine's own env (the space's engine.vllm.env with --engine-opt
    over it), not --engine-opt alone: a space asking for v2 that the engine resolves as v1 is a changed row."""
    import io

    from autotune.cli.audit import run_audit
    from autotune.config.space import load_space

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    script = tmp_path / "fake_vllm.py"
    script.write_text(textwrap.dedent(FAKE_AUDIT))
    text = (root / "search_spaces" / "cpu-tiny.yaml").read_text()
    text = text.replace("OMP_NUM_THREADS: 1}", "OMP_NUM_THREADS: 1, VLLM_USE_V2_MODEL_RUNNER: 1}")
    assert "VLLM_USE_V2_MODEL_RUNNER" in text
    (tmp_path / "space.yaml").write_text(text)
    space = load_space(tmp_path / "space.yaml")
    out = io.StringIO()
    json_path = tmp_path / "audit.json"
    run_audit(space, {"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": [1, 2, 4, 8], "K": 3},
              {"launcher": [sys.executable, str(script)]}, False, out, engine="vllm",
              cache_dir=str(tmp_path / "work"), json_path=str(json_path))
    assert "model_runner" in json.loads(json_path.read_text())["changed"], out.getvalue()


def test_every_serve_pass_argument_is_one_vllm_bench_serve_accepts(tmp_path: Path) -> None:
    # The passes run vLLM's benchmark client in the runner's interpreter, parsed by the client's own parser:
    # an argument it does not know (or renamed) must fail here, not on a GPU.
    pytest.importorskip("vllm.benchmarks.serve")
    parser = serve.bench_parser()
    workload = Workload(num_prompts=4, input_len=8, output_len=4, concurrency=3, dataset=Dataset("synthetic"))
    passes = serve.ServePasses({"workload": encode(workload), "llm_kwargs": {"model": "m"}}, 8123,
                                str(tmp_path))
    args = parser.parse_args(passes.command("x.json"))
    assert (args.port, args.max_concurrency, args.num_prompts) == (8123, 3, 4)
    assert args.save_detailed and args.result_filename == "x.json" and args.result_dir == str(tmp_path)
    assert args.dataset_name == "random" and args.ignore_eos

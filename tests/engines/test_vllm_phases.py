"""Where a vLLM restart's time went: the runner's clocks split by vLLM's start-up log lines."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from autotune.core import facts as F
from autotune.engines.vllm._phases import restart_phases

LOG = """INFO [gpu_model_runner.py:5347] Model loading took 1.65 GiB memory and 2.5 seconds
INFO [monitor.py:53] torch.compile took 14.88 s in total
INFO [gpu_model_runner.py:6844] Graph capturing finished in 3 secs, took 0.06 GiB
"""


def test_phases_come_from_the_runner_clocks_and_the_log() -> None:
    reported = {"started_at": 1000.5, "import_s": 6.0, "engine_s": 25.0, "warmup_s": 4.0, "timed_s": 15.0,
                "warmup_passes": 5, "pass_rounds": 6, "warmup_rule": "prior"}
    facts = restart_phases(reported, LOG, launched_at=1000.0)
    assert facts[F.PHASE_LAUNCH_S] == pytest.approx(0.5)
    assert facts[F.PHASE_IMPORT_S] == 6.0
    assert facts[F.PHASE_LOAD_S] == 2.5 and facts[F.PHASE_COMPILE_S] == 14.88 and facts[F.PHASE_CAPTURE_S] == 3.0
    assert facts[F.PHASE_OTHER_STARTUP_S] == pytest.approx(25.0 - 2.5 - 14.88 - 3.0)
    assert facts[F.PHASE_WARMUP_S] == 4.0 and facts[F.PHASE_TIMED_S] == 15.0
    assert facts[F.WARMUP_PASSES] == 5 and facts[F.PASS_ROUNDS] == 6 and facts[F.WARMUP_RULE] == "prior"


def test_what_is_not_known_is_left_out() -> None:
    facts = restart_phases({"engine_s": 10.0, "warmup_s": 1.0, "timed_s": 2.0}, "", launched_at=None)
    assert F.PHASE_LAUNCH_S not in facts and F.PHASE_LOAD_S not in facts
    assert facts[F.PHASE_OTHER_STARTUP_S] == 10.0
    assert restart_phases(None, LOG, 0.0) == {}  # an older runner says nothing


def test_an_unknown_phase_name_is_refused() -> None:
    with pytest.raises(ValueError):
        F.phase_facts(lunch=1.0)


# -- the rest of start-up, named from real vLLM 0.26.0 logs (H200) ------------------------------------------------

MEASUREMENTS = Path(__file__).resolve().parents[2] / "docs" / "measurements"
ENGINE_PHASES = (F.PHASE_SETUP_S, F.PHASE_LOAD_S, F.PHASE_COMPILE_S, F.PHASE_PROFILE_S, F.PHASE_CAPTURE_S,
                 F.PHASE_KERNEL_WARMUP_S, F.PHASE_OTHER_STARTUP_S)


def _committed_log(study: str, member: str) -> tuple[str, float]:
    """A restart's log from a measurement's ``engine-logs.tar.gz``, and the start-up seconds its ready line says."""
    with tarfile.open(MEASUREMENTS / study / "engine-logs.tar.gz") as tar:
        handle = tar.extractfile(member)
        assert handle is not None
        text = handle.read().decode(errors="replace")
    ready = json.loads(text.split("AUTOTUNE_READY ", 1)[1].splitlines()[0])
    return text, float(ready["startup_s"])


def _engine_sum(facts: dict) -> float:
    return sum(facts.get(k, 0.0) for k in ENGINE_PHASES)


def test_a_first_start_into_empty_caches_splits_other_startup_by_the_logs_own_times() -> None:
    # The study's first start (forkserver, empty compile/Triton caches). Its lines: first 00:29:37, "Model loading
    # took ... 3.349608 seconds" 00:30:05, "torch.compile took 18.48 s" , "Available KV cache memory" 00:30:26,
    # "Graph capturing finished in 1 secs", "init engine ... took 125.52 s" 00:32:10.
    text, engine_s = _committed_log("h200-budget-20", "./h200-b20/logs/9fe740489603/20261202-002919-r0-s0.log")
    facts = restart_phases({"engine_s": engine_s}, text, launched_at=None)
    # By the whole-second stamps the stretches come to 0.3 s more than the engine's 152.7 s: they give way that much.
    assert facts[F.PHASE_SETUP_S] == pytest.approx(28 - 3.349608, abs=0.3)  # 00:29:37 -> 00:30:05, less the load
    assert facts[F.PHASE_PROFILE_S] == pytest.approx(21 - 18.48, abs=0.3)  # 00:30:05 -> 00:30:26, less compile
    assert facts[F.PHASE_KERNEL_WARMUP_S] == pytest.approx(104 - 1, abs=0.3)  # 00:30:26 -> 00:32:10, less capture
    assert (facts[F.PHASE_LOAD_S], facts[F.PHASE_COMPILE_S], facts[F.PHASE_CAPTURE_S]) == (3.349608, 18.48, 1.0)
    # The named phases cover vLLM's own "init engine" seconds to within the timestamps' whole second ...
    init = sum(facts[k] for k in (F.PHASE_COMPILE_S, F.PHASE_PROFILE_S, F.PHASE_CAPTURE_S, F.PHASE_KERNEL_WARMUP_S))
    assert init == pytest.approx(125.52, abs=1.0)
    # ... and with the rest of start-up they add up to the engine time, the remainder small and never negative.
    assert _engine_sum(facts) == pytest.approx(engine_s)
    assert 0.0 <= facts[F.PHASE_OTHER_STARTUP_S] < 2.0


def test_the_v1_runners_kernel_jit_lands_in_profiling() -> None:
    # The V1 model runner (a draft model) JIT-compiles kernels while profiling: 83 s between "Initial
    # profiling/warmup run took 0.83 s" (08:04:08) and "Profiling CUDA graph memory" (08:05:31).
    text, engine_s = _committed_log("h200-vllm026", "./audit/logs/c7712055af7e/20261130-080253-r0-s0.log")
    facts = restart_phases({"engine_s": engine_s, "import_s": 0.0}, text, launched_at=None)
    # 08:03:40 (load's end) -> 08:05:34 ("Available KV cache memory") is 114 s; target and draft compiled 26.55 s.
    assert facts[F.PHASE_PROFILE_S] == pytest.approx(114 - 26.55)
    assert facts[F.PHASE_KERNEL_WARMUP_S] == pytest.approx(3 - 1)  # 08:05:34 -> 08:05:37, less the 1 s capture
    assert _engine_sum(facts) == pytest.approx(engine_s)


def test_serve_modes_engine_process_start_is_set_up() -> None:
    # vllm serve starts its engine-core process (a new interpreter) between its config lines (18:25:08) and
    # "Initializing a V1 LLM engine" (18:25:26): every restart pays it, cache or not.
    text, engine_s = _committed_log("h200-serve-slo/run2",
                                    "./h200-serve-slo/logs/34d3b4628e2a/20261201-182448-r0-s0.log")
    facts = restart_phases({"engine_s": engine_s}, text, launched_at=None)
    assert facts[F.PHASE_SETUP_S] == pytest.approx(23 - 2.787893)  # 18:25:08 -> 18:25:31, less the load
    assert facts[F.PHASE_SETUP_S] > facts[F.PHASE_COMPILE_S] + facts[F.PHASE_PROFILE_S]
    assert _engine_sum(facts) == pytest.approx(engine_s)


def test_stretches_give_way_before_other_startup_goes_negative() -> None:
    # Whole-second stamps: 10 s of set-up by the stamps, but the engine took 9 s in all with a 1 s load.
    log = ("INFO 01-01 00:00:00 [api_utils.py:273] non-default args: {}\n"
           "INFO 01-01 00:00:11 [model_runner.py:305] Model loading took 1.6 GiB and 1.0 seconds\n")
    facts = restart_phases({"engine_s": 9.0}, log, launched_at=None)
    assert facts[F.PHASE_SETUP_S] == pytest.approx(8.0) and facts[F.PHASE_OTHER_STARTUP_S] == 0.0
    assert _engine_sum(facts) == pytest.approx(9.0)


def test_logs_without_the_lines_degrade_to_other_startup() -> None:
    # The CPU build's lines (another worker, "Loading weights took", no "Available KV cache memory"), a log cut off
    # before the KV cache, no timestamps at all: nothing fails, the unnamed seconds stay "other start-up".
    cpu = (Path(__file__).resolve().parents[1] / "data" / "vllm-kv-logs" / "vllm-cpu-v0.28.1.dev-public.log"
           ).read_text()
    cut = "\n".join(line for line in cpu.splitlines() if "init engine" not in line)
    for text in (cpu, cut, LOG, "garbage\nINFO 13-45 99:99:99 [x.py:1] Model loading took 1 GiB and 1 seconds\n"):
        facts = restart_phases({"engine_s": 50.0}, text, launched_at=None)
        assert _engine_sum(facts) == pytest.approx(50.0) and facts[F.PHASE_OTHER_STARTUP_S] >= 0.0
    assert F.PHASE_KERNEL_WARMUP_S not in restart_phases({"engine_s": 50.0}, cut, None)
    assert F.PHASE_SETUP_S not in restart_phases({"engine_s": 50.0}, LOG, None)

"""Where a vLLM restart's time went: the runner's clocks split by vLLM's start-up log lines."""

from __future__ import annotations

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

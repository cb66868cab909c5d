"""The EngineBackend contract, run against every engine that runs on a CPU.

Every engine: returns a :class:`RestartResult` for every restart and never raises for a bad one; times exactly
``workload.timed_passes`` passes; reports what it resolved; reports ``accept_len`` only when speculating; marks
the first start of a configuration cold; keeps its results JSON-round-trippable; describes itself by name.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.records import decode, encode
from autotune.engines import EngineBackend, make_engine
from autotune.core.records import EngineConfig, EngineFacts, RestartResult, RestartStatus, Workload

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cmd_engine_example.py"
WL = Workload(num_prompts=8, input_len=64, output_len=64, concurrency=4, timed_passes=2)
ARGS = {"model": "m", "max_num_seqs": 4}
BASELINE = EngineConfig(engine_args=ARGS)
SPEC = EngineConfig(engine_args=ARGS, compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE"},
                    speculative_config={"method": "ngram", "num_speculative_tokens": 3})
HUGE = EngineConfig(engine_args=ARGS, compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8, 4096]})

ENGINES: dict[str, Callable[[str], EngineBackend]] = {
    "sim": lambda cache: make_engine("sim", cache_dir=cache, profile="h200"),
    "cmd-example": lambda cache: make_engine("cmd", cache_dir=cache,
                                             command=[sys.executable, str(EXAMPLE), "--profile", "h200"]),
}


@pytest.fixture(params=sorted(ENGINES))
def engine(request, tmp_path) -> EngineBackend:
    built = ENGINES[request.param](str(tmp_path / "cache"))
    yield built
    built.close()


def assert_roundtrips(result: RestartResult) -> None:
    assert decode(RestartResult, encode(result)) == result


def test_a_restart_times_the_workload_and_reports_what_it_ran(engine):
    result = engine.run_restart(BASELINE, WL, restart=3, seed=11)
    assert isinstance(result, RestartResult)
    assert result.ok and result.status == RestartStatus.OK and result.error is None
    assert (result.restart, result.seed) == (3, 11)
    assert len(result.passes_tok_s) == WL.timed_passes
    assert all(math.isfinite(x) and x > 0 for x in result.passes_tok_s + result.warmup_tok_s)
    assert result.value == pytest.approx(sum(result.passes_tok_s) / WL.timed_passes)
    assert result.resolved is not None and isinstance(result.resolved.cudagraph_mode, str)
    assert result.resolved.cudagraph_capture_sizes
    assert result.accept_len is None
    assert result.wall_s is not None and result.wall_s > 0
    assert result.startup_s is not None and result.startup_s > 0
    assert_roundtrips(result)


def test_speculation_reports_acceptance(engine):
    result = engine.run_restart(SPEC, WL, restart=0, seed=0)
    assert result.ok
    assert result.accept_len is not None and 1.0 < result.accept_len <= 1 + SPEC.num_speculative_tokens
    assert_roundtrips(result)


def test_first_start_of_a_config_is_cold(engine):
    first = engine.run_restart(SPEC, WL, restart=0, seed=0)
    second = engine.run_restart(SPEC, WL, restart=1, seed=1)
    assert first.cold and not second.cold
    assert first.value is not None and second.value is not None and first.value < second.value


def test_warm_restarts_are_reproducible(engine):
    engine.run_restart(BASELINE, WL, restart=0, seed=0)
    again = [engine.run_restart(BASELINE, WL, restart=1, seed=5) for _ in range(2)]
    assert again[0].passes_tok_s == again[1].passes_tok_s


def test_a_failing_restart_is_data_not_an_exception(engine):
    result = engine.run_restart(HUGE, WL, restart=0, seed=0)
    assert result.status == RestartStatus.FAILED and not result.ok and result.value is None
    assert result.error and "\n" not in result.error and "out of memory" in result.error
    assert result.passes_tok_s == ()
    assert_roundtrips(result)
    # The engine stays usable after a failure.
    assert engine.run_restart(BASELINE, WL, restart=1, seed=1).ok


def test_describe_names_the_engine(engine):
    facts = engine.describe()
    assert isinstance(facts, EngineFacts) and facts.name == engine.name

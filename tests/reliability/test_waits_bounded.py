"""Issue 32, principle 3: no wait without a sane bound.

A memory floor the machine cannot meet (above MemTotal) made every start wait the full settle timeout (300 s) and
then advise "free it"; ``settle_timeout_s: .nan`` was accepted by the vLLM engine, and the settle then waited
forever. Both are refused when the engine is made, before any start, in one line naming the field, in every engine.
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

import pytest

from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus
from autotune.engines import EngineError, make_engine
from autotune.machine import GIB, read_meminfo

REPO = Path(__file__).resolve().parents[2]

BAD_WAITS = [math.nan, math.inf, -math.inf, -5.0, 0.0, 1e300]


def _engine(name: str, tmp_path: Path, **options):
    if name == "cmd":
        options.setdefault("command", [sys.executable, "-c", "pass"])
    return make_engine(name, cache_dir=str(tmp_path), **options)


@pytest.mark.parametrize("value", BAD_WAITS, ids=repr)
@pytest.mark.parametrize("engine", ["vllm", "cmd"])
def test_a_settle_timeout_that_is_not_a_sane_number_of_seconds_is_one_line_naming_the_field(engine, value, tmp_path):
    with pytest.raises(EngineError) as err:
        _engine(engine, tmp_path, settle_timeout_s=value)
    message = str(err.value)
    assert f"engine.{engine}.settle_timeout_s" in message and "\n" not in message and len(message) < 300


@pytest.mark.parametrize("key", ["startup_timeout_s", "measure_timeout_s"])
def test_the_vllm_engines_other_timeouts_are_bounded_the_same_way(key, tmp_path):
    for value in BAD_WAITS:
        with pytest.raises(EngineError, match=rf"engine\.vllm\.{key}"):
            _engine("vllm", tmp_path, **{key: value})


@pytest.mark.parametrize("key", ["timeout_s", "kill_grace_s"])
def test_the_cmd_engines_other_waits_are_bounded_the_same_way(key, tmp_path):
    for value in BAD_WAITS:
        with pytest.raises(EngineError, match=rf"engine\.cmd\.{key}"):
            _engine("cmd", tmp_path, **{key: value})


def test_the_sim_engine_takes_no_settle_timeout_and_says_so(tmp_path):
    for value in (math.nan, 300):
        with pytest.raises(EngineError, match=r"unknown option engine\.sim\.settle_timeout_s"):
            _engine("sim", tmp_path, settle_timeout_s=value)


def test_sane_waits_are_taken(tmp_path):
    assert _engine("cmd", tmp_path, settle_timeout_s=600, timeout_s=3600).safety.settle_timeout_s == 600
    assert _engine("vllm", tmp_path, settle_timeout_s=30).settings.settle_timeout_s == 30


@pytest.mark.parametrize("engine", ["vllm", "cmd"])
def test_a_floor_above_memtotal_is_refused_when_the_engine_is_made(engine, tmp_path):
    total = read_meminfo().total / GIB
    with pytest.raises(EngineError) as err:
        _engine(engine, tmp_path, memory_floor_gib=math.ceil(total) + 100)
    message = str(err.value)
    assert "engine.memory_floor_gib" in message and "MemTotal" in message and "\n" not in message


def test_a_floor_above_the_simulated_hosts_memtotal_is_refused(tmp_path):
    with pytest.raises(EngineError, match=r"engine\.memory_floor_gib .*MemTotal"):
        _engine("sim", tmp_path, profile="gb10", model_profile="moe", unified_memory=True, memory_floor_gib=500)


def test_tune_with_a_floor_above_memtotal_starts_nothing_and_names_the_floor(tmp_path, capsys):
    total = read_meminfo().total / GIB
    started = tmp_path / "started"
    engine = tmp_path / "engine.py"
    engine.write_text(f"open({str(started)!r}, 'a').write('x')\n")
    space = tmp_path / "space.yaml"
    space.write_text((REPO / "search_spaces" / "gb10.yaml").read_text())
    argv = ["tune", "--space", str(space), "--engine", "cmd", "--engine-opt", f"command={sys.executable} {engine}",
            "--engine-opt", f"memory_floor_gib={math.ceil(total) + 100}", "--trials", "2",
            "--storage", f"sqlite:///{tmp_path}/o.db", "--workdir", str(tmp_path / "w"), "--no-mlflow", "--quiet"]
    status = raw_main(argv, out=io.StringIO())
    err = capsys.readouterr().err
    assert status != ExitStatus.SUCCESS and "engine.memory_floor_gib" in err and "MemTotal" in err
    assert not started.exists()

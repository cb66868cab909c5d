"""The JIT caches travel with the study's workdir, and a start is cold when its caches are gone (issue 21, item 5).

A fake runner behaves like vLLM on a cache: it fills ``$VLLM_CACHE_ROOT/torch_compile_cache/<hash>`` and logs
vLLM's "Using cache directory" line, and it fills Triton's cache where ``TRITON_CACHE_DIR`` points. No vLLM needed.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.core.records import EngineConfig, Workload
from autotune.engines.vllm import VllmEngine
from autotune.engines.vllm._caches import caches_present, jit_cache_env

CONFIG = EngineConfig(engine_args={"model": "org/m"}, compilation_config={"cudagraph_mode": "NONE"})
WORKLOAD = Workload(num_prompts=2, input_len=8, output_len=4, concurrency=2, timed_passes=2)

FAKE_VLLM = """
    import json, os, sys
    request = json.loads(sys.stdin.read())
    env = {k: os.environ.get(k) for k in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TRITON_HOME",
                                          "FLASHINFER_WORKSPACE_BASE")}
    with open(os.environ["FAKE_ENV_FILE"], "a") as fh:
        fh.write(json.dumps(env) + "\\n")
    compiled = os.path.join(env["VLLM_CACHE_ROOT"], "torch_compile_cache", "0123abcd", "rank_0_0", "backbone")
    os.makedirs(compiled, exist_ok=True)
    open(os.path.join(compiled, "graph.py"), "w").write("# compiled")
    print(f"INFO 01-01 00:00:00 [backends.py:1] Using cache directory: {compiled} for vLLM's torch.compile")
    triton = env["TRITON_CACHE_DIR"] or os.path.join(env["TRITON_HOME"] or os.path.expanduser("~"), ".triton", "cache")
    os.makedirs(os.path.join(triton, "K"), exist_ok=True)
    open(os.path.join(triton, "K", "fused_moe.cubin"), "w").write("cubin")
    resolved = {"cudagraph_mode": "CUDAGraphMode.NONE", "cudagraph_capture_sizes": [], "compile_mode": "NONE",
                "details": {}}
    print("AUTOTUNE_READY " + json.dumps({"startup_s": 0.1, "resolved": resolved}), flush=True)
    print("AUTOTUNE_RESULT " + json.dumps({"passes_tok_s": [100.0, 110.0], "warmup_tok_s": [90.0],
                                           "accept_len": None, "peak_memory_gib": None}), flush=True)
"""


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("TRITON_CACHE_DIR", "TRITON_HOME", "FLASHINFER_WORKSPACE_BASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # Triton's default cache, were anything to fall back to it
    monkeypatch.setenv("FAKE_ENV_FILE", str(tmp_path / "env.jsonl"))
    script = tmp_path / "fake_vllm.py"
    script.write_text(textwrap.dedent(FAKE_VLLM))
    return script


def _engine(script: Path, workdir: Path, **options) -> VllmEngine:
    return VllmEngine(cache_dir=str(workdir), launcher=[sys.executable, str(script)], startup_timeout_s=30, **options)


def _seen(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "env.jsonl").read_text().splitlines()]


def test_triton_and_flashinfer_caches_live_under_the_workdir_next_to_vllms(tmp_path, runner):
    work = tmp_path / "study"
    engine = _engine(runner, work)
    first = engine.run_restart(CONFIG, WORKLOAD, restart=0, seed=1)
    second = engine.run_restart(CONFIG, WORKLOAD, restart=1, seed=2)
    assert first.ok and first.cold and second.ok and not second.cold
    env = _seen(tmp_path)[0]
    assert env == {"VLLM_CACHE_ROOT": str(work / "vllm-cache"), "TRITON_CACHE_DIR": str(work / "triton-cache"),
                   "TRITON_HOME": None, "FLASHINFER_WORKSPACE_BASE": str(work / "flashinfer")}
    assert any((work / "triton-cache").rglob("*.cubin")) and not (tmp_path / "home").exists()


def test_a_cache_location_the_user_set_is_never_overridden_and_said_once(tmp_path, runner, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "my-triton"))
    engine = _engine(runner, tmp_path / "study", env={"FLASHINFER_WORKSPACE_BASE": str(tmp_path / "my-fi")})
    engine.run_restart(CONFIG, WORKLOAD, restart=0, seed=1)
    engine.run_restart(CONFIG, WORKLOAD, restart=1, seed=2)
    env = _seen(tmp_path)[0]
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "my-triton")
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / "my-fi")
    err = capsys.readouterr().err
    assert err.count("keeping the JIT cache location you set") == 1
    assert f"TRITON_CACHE_DIR={tmp_path / 'my-triton'}" in err and f"FLASHINFER_WORKSPACE_BASE={tmp_path / 'my-fi'}" in err


def test_triton_home_places_tritons_cache_so_it_is_left_alone():
    env = jit_cache_env(Path("/w"), {"TRITON_HOME": "/fast"}, {})
    assert env == {"FLASHINFER_WORKSPACE_BASE": "/w/flashinfer"}
    assert jit_cache_env(Path("/w"), {}, {}) == {"TRITON_CACHE_DIR": "/w/triton-cache",
                                                 "FLASHINFER_WORKSPACE_BASE": "/w/flashinfer"}


@pytest.mark.parametrize("lost", ["vllm-cache/torch_compile_cache", "triton-cache"])
def test_a_start_whose_caches_are_gone_is_cold_again(tmp_path, runner, lost):
    work = tmp_path / "study"
    engine = _engine(runner, work)
    assert engine.run_restart(CONFIG, WORKLOAD, restart=0, seed=1).cold
    shutil.rmtree(work / lost)  # the marker stays: only the cache says whether the start is warm
    assert engine.cold_marker(CONFIG).exists()
    again = engine.run_restart(CONFIG, WORKLOAD, restart=1, seed=2)
    assert again.ok and again.cold
    assert not engine.run_restart(CONFIG, WORKLOAD, restart=2, seed=3).cold


def test_a_copied_workdir_starts_warm_elsewhere_and_a_fresh_one_cold(tmp_path, runner):
    work = tmp_path / "study"
    _engine(runner, work).run_restart(CONFIG, WORKLOAD, restart=0, seed=1)
    # The study moved to another machine (another path) with its workdir: its caches came along.
    shutil.copytree(work, tmp_path / "elsewhere" / "study")
    moved = _engine(runner, tmp_path / "elsewhere" / "study")
    assert not moved.run_restart(CONFIG, WORKLOAD, restart=1, seed=2).cold
    # The database copied but not the workdir: nothing is cached there, so the first start is cold.
    fresh = _engine(runner, tmp_path / "fresh")
    assert fresh.run_restart(CONFIG, WORKLOAD, restart=1, seed=2).cold


def test_a_marker_from_before_markers_listed_caches_is_warm_only_with_a_compile_cache(tmp_path):
    marker, root = tmp_path / "started" / "k.started", tmp_path / "vllm-cache"
    marker.parent.mkdir()
    marker.touch()
    assert not caches_present(marker, tmp_path, root)
    (root / "torch_compile_cache").mkdir(parents=True)
    assert caches_present(marker, tmp_path, root)
    assert not caches_present(tmp_path / "started" / "other.started", tmp_path, root)


def test_each_start_says_whether_it_found_the_caches_empty_and_a_copied_workdir_is_not(tmp_path, runner):
    # The first start into empty caches compiles what every configuration shares (H200: 170-190 s against 38-90 s
    # for a later configuration's cold start): the budget prices it apart, from this fact and caches_empty().
    work = tmp_path / "study"
    engine = _engine(runner, work)
    assert engine.caches_empty() is True
    first = engine.run_restart(CONFIG, WORKLOAD, restart=0, seed=1)
    assert first.facts["caches_empty"] is True and engine.caches_empty() is False
    other = EngineConfig(engine_args={"model": "org/m"}, compilation_config={"cudagraph_mode": "PIECEWISE"})
    later = engine.run_restart(other, WORKLOAD, restart=0, seed=1)
    assert later.cold and later.facts["caches_empty"] is False  # cold, into caches another configuration filled
    shutil.copytree(work, tmp_path / "elsewhere" / "study")
    assert _engine(runner, tmp_path / "elsewhere" / "study").caches_empty() is False
    assert _engine(runner, tmp_path / "fresh").caches_empty() is True

"""``engine.page_cache: keep | drop | warm``: resolved once per engine, refused at preflight without root, applied
before each real start, recorded per restart (no root and no GPU needed: the drop file and the euid are injected)."""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.cli._main import raw_main
from autotune.cli.preflight import PreflightError, check_page_cache
from autotune.core import facts as fact
from autotune.core.exit_status import ExitStatus
from autotune.engines import EngineError
from autotune.engines.cmd import CmdEngine
from autotune.machine import (GIB, MeminfoReader, PageCacheFailed, StartSafety, plan_page_cache, weight_files,
                              weights_bytes)
from autotune.machine._pagecache import apply_page_cache

ROOT, USER = (lambda: 0), (lambda: 1000)


def _meminfo(tmp_path: Path) -> MeminfoReader:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal: {64 * GIB // 1024} kB\nMemAvailable: {60 * GIB // 1024} kB\nCached: 1024 kB\n")
    return MeminfoReader(path)


def _safety(tmp_path: Path, **kwargs) -> StartSafety:
    return StartSafety(0, reader=_meminfo(tmp_path), gpu_reader=None, kernel_log=None,
                       drop_caches_path=str(tmp_path / "drop_caches"), settle_interval_s=0.01, **kwargs)


def test_the_default_is_warm_on_unified_memory_and_keep_elsewhere_resolved_once():
    assert plan_page_cache(None, unified=True, root=True).policy == "warm"
    assert plan_page_cache(None, unified=False, root=True).policy == "keep"
    assert plan_page_cache(None, unified=False, root=False).note() is None
    # Without root the default falls back to keep, and says so once, with how to get warm; it is no refusal.
    fallback = plan_page_cache(None, unified=True, root=False)
    assert fallback.policy == "keep" and fallback.refusal() is None
    assert "root" in fallback.note() and "warm" in fallback.note()
    for value in ("drop", "warm", "keep"):
        assert plan_page_cache(value, unified=False, root=True).policy == value


def test_a_bad_value_is_one_line_naming_the_field_and_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"^engine.page_cache must be one of keep, drop, warm, got 'cold'$"):
        plan_page_cache("cold", unified=False, root=True)
    with pytest.raises(EngineError, match=r"cmd engine: engine\.cmd\.page_cache must be one of keep, drop, warm"):
        CmdEngine(command=[sys.executable, "-c", "pass"], page_cache="cold")
    from autotune.engines.vllm import VllmOptions

    with pytest.raises(EngineError, match=r"vllm engine: engine\.vllm\.page_cache must be one of keep, drop, warm"):
        VllmOptions.parse({"page_cache": True})


@pytest.mark.parametrize("policy", ["drop", "warm"])
def test_an_explicit_drop_or_warm_is_refused_at_preflight_without_root_and_passes_as_root(tmp_path, policy):
    out = io.StringIO()
    user = _safety(tmp_path, page_cache=policy, euid=USER, unified=False)
    with pytest.raises(PreflightError) as refused:
        check_page_cache(SimpleNamespace(safety=user), out)  # as the real engines hold their StartSafety
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"engine.page_cache: {policy} ") and "root" in line
    assert "engine.page_cache: keep" in line  # the fix
    root = _safety(tmp_path, page_cache=policy, euid=ROOT, unified=False)
    check_page_cache(SimpleNamespace(safety=root), out)
    check_page_cache(SimpleNamespace(), out)  # the simulator: no policy
    assert out.getvalue() == ""


def test_the_default_without_root_on_unified_memory_starts_with_one_note(tmp_path):
    out = io.StringIO()
    safety = _safety(tmp_path, euid=USER, unified=True)
    check_page_cache(SimpleNamespace(safety=safety), out)
    assert out.getvalue().count("\n") == 1 and out.getvalue().startswith("note: engine.page_cache is keep")
    safety.settle()
    assert not (tmp_path / "drop_caches").exists()
    assert safety.restart_facts()[fact.PAGE_CACHE] == "keep" and fact.PAGE_CACHE_S not in safety.restart_facts()


def test_tune_refuses_an_explicit_drop_without_root_before_any_engine_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    started = tmp_path / "started"
    engine = tmp_path / "engine.py"
    engine.write_text(f"open({str(started)!r}, 'w').write('x')\n")
    space = tmp_path / "space.yaml"
    space.write_text(f"""
engine: {{name: cmd, command: [{sys.executable!r}, {str(engine)!r}], page_cache: drop}}
engine_args: {{model: sim/moe, max_num_seqs: 4, max_model_len: 2048}}
workload: {{num_prompts: 4, input_len: 16, output_len: 16}}
search: {{cudagraph_mode: [NONE, FULL]}}
""")
    status = raw_main(["tune", "--space", str(space), "--storage", f"sqlite:///{tmp_path / 'o.db'}", "--no-mlflow",
                       "--workdir", str(tmp_path / "w"), "--trials", "1"], out=io.StringIO())
    err = capsys.readouterr().err.strip()
    assert status == ExitStatus.BAD_INPUT and not started.exists()
    assert err.count("\n") == 0 and err.startswith("autotune: error: engine.page_cache: drop ")


def test_drop_syncs_and_writes_3_and_warm_then_reads_every_weight_file_to_its_end(tmp_path):
    synced = []
    drop = tmp_path / "drop_caches"
    assert apply_page_cache("keep", [], drop_path=str(drop), sync=lambda: synced.append(1)) == 0.0
    assert not drop.exists() and not synced
    apply_page_cache("drop", [], drop_path=str(drop), sync=lambda: synced.append(1))
    assert drop.read_text() == "3\n" and synced == [1]
    # A weight "file" that is a pipe: its writer finishes only if warm reads it to the end.
    pipe = tmp_path / "weights.fifo"
    os.mkfifo(pipe)
    size = 3 * 1024 * 1024 + 5
    wrote = []
    writer = threading.Thread(target=lambda: wrote.append(Path(pipe).write_bytes(b"w" * size)))
    writer.start()
    drop.unlink()
    seconds = apply_page_cache("warm", [pipe], drop_path=str(drop), sync=lambda: None)
    writer.join(5)
    assert wrote == [size] and drop.read_text() == "3\n" and seconds >= 0
    # Without root the write fails: one line, with the fix (an engine stops the study with it).
    with pytest.raises(PageCacheFailed, match=r"engine.page_cache: drop: cannot write .*set engine.page_cache: keep"):
        apply_page_cache("drop", [], drop_path=str(tmp_path / "no" / "such" / "file"), sync=lambda: None)


def test_the_weight_files_are_a_local_directory_or_the_newest_hub_snapshot(tmp_path):
    local = tmp_path / "model"
    (local / "sub").mkdir(parents=True)
    (local / "model-00001.safetensors").write_bytes(b"a" * 10)
    (local / "sub" / "extra.bin").write_bytes(b"b" * 5)
    (local / "config.json").write_text("{}")
    assert sorted(p.name for p in weight_files(str(local))) == ["extra.bin", "model-00001.safetensors"]
    assert weights_bytes(str(local)) == 15
    hub = tmp_path / "hub"
    repo = hub / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_bytes(b"c" * 7)
    (repo / "blobs" / "cfg").write_text("{}")
    snap = repo / "snapshots" / "rev1"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to(repo / "blobs" / "abc")
    (snap / "config.json").symlink_to(repo / "blobs" / "cfg")
    assert weight_files("org/name", hub) == [(repo / "blobs" / "abc").resolve()]
    assert weights_bytes("org/name", hub) == 7
    assert weight_files("org/other", hub) == [] and weights_bytes("org/other", hub) is None
    assert weight_files("not-a-hub-id", hub) == [] and weight_files(None, hub) == []


def test_each_start_applies_the_policy_before_the_settle_and_records_it(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "w.safetensors").write_bytes(b"x" * 1000)
    safety = _safety(tmp_path, euid=ROOT, unified=True)  # the default on unified memory, as root: warm
    assert safety.page_cache.policy == "warm"
    safety.settle(str(model))
    assert (tmp_path / "drop_caches").read_text() == "3\n"
    with safety.guard():
        pass
    facts = safety.restart_facts()
    assert facts[fact.PAGE_CACHE] == "warm" and isinstance(facts[fact.PAGE_CACHE_S], float)
    assert facts["cached_gib"] is not None  # Cached, read by the guard, sits beside the policy
    # A start that cannot apply its policy stops the study with the line (PageCacheFailed is a MemoryNotSettled,
    # which the engines turn into an EngineError).
    broken = _safety(tmp_path, euid=ROOT, unified=False, page_cache="drop")
    broken.drop_caches_path = str(tmp_path / "missing" / "drop_caches")
    with pytest.raises(PageCacheFailed):
        broken.settle()

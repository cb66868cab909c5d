"""``autotune doctor``: runs on this (GPU-less) machine with an exit status, and its rules on a GB10's facts."""

from __future__ import annotations

import io
import stat
from pathlib import Path

from autotune.cli._main import raw_main
from autotune.cli.doctor import Facts, findings, vllm_version
from autotune.core.exit_status import ExitStatus
from autotune.engines import engine_settings
from autotune.machine import GIB, GpuState, MemInfo

REPO = Path(__file__).resolve().parents[2]


def doctor(*argv: str) -> tuple[ExitStatus, str]:
    out = io.StringIO()
    return raw_main(["doctor", *argv], out), out.getvalue()


def space(tmp_path: Path, engine: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(f"""
engine: {engine}
engine_args: {{model: sim/moe, max_num_seqs: 4, max_model_len: 2048}}
workload: {{num_prompts: 4, input_len: 16, output_len: 16}}
search: {{cudagraph_mode: [NONE, FULL]}}
""")
    return str(path)


def test_doctor_runs_here_and_its_status_says_whether_something_must_be_fixed():
    status, text = doctor("--space", str(REPO / "search_spaces" / "cpu-tiny.yaml"))
    for topic in ("memory", "page cache", "cpu", "driver", "unified", "root", "vllm"):
        assert any(line[6:].startswith(topic) for line in text.splitlines()), (topic, text)
    must_fix = any(line.startswith("FIX") for line in text.splitlines())
    assert status == (ExitStatus.ERROR if must_fix else ExitStatus.SUCCESS)
    assert text.splitlines()[-1].startswith("doctor: ")


def test_a_simulator_space_has_nothing_to_fix(tmp_path):
    status, text = doctor("--space", space(tmp_path, "{name: sim, profile: gb10}"))
    assert status == ExitStatus.SUCCESS, text
    assert "not checked: the engine is sim" in text and text.splitlines()[-1] == "doctor: nothing to fix"


def test_an_interpreter_without_vllm_must_be_fixed_and_one_with_it_is_named(tmp_path):
    status, text = doctor("--space", space(tmp_path, f"{{name: vllm, python: {tmp_path / 'nope' / 'python'}}}"))
    assert status == ExitStatus.ERROR
    assert any(line.startswith("FIX   vllm") and "does not exist" in line for line in text.splitlines()), text
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 0.32.0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert vllm_version([str(fake)]) == ("0.32.0", None)
    status, text = doctor("--space", space(tmp_path, f"{{name: vllm, python: {fake}}}"))
    assert f"ok    vllm         0.32.0 in {fake}" in text


def test_a_bad_space_is_bad_input(tmp_path):
    (tmp_path / "bad.yaml").write_text("engine_args: 3\n")
    status, _ = doctor("--space", str(tmp_path / "bad.yaml"))
    assert status == ExitStatus.BAD_INPUT


def gb10(**overrides) -> Facts:
    facts = dict(
        memory=MemInfo(total=int(121.7 * GIB), available=95 * GIB, cached=30 * GIB), machine="aarch64", root=False,
        governors=("performance",), cpu_mhz=1500.0, cpu_max_mhz=3900.0,
        gpus=(GpuState(0, "NVIDIA GB10", sm_clock_mhz=2400, throttle=("sw_thermal",)),), driver="580.95",
        engine="vllm", settings=engine_settings("vllm", {"page_cache": "drop"}), engine_args={"gpu_memory_utilization": 0.85},
        interpreter=("python3",), vllm_version="0.31.0")
    return Facts(**{**facts, **overrides})


def test_on_a_gb10_the_doctor_names_the_admission_check_cache_clocks_throttling_and_root():
    lines = {f.topic: f for f in findings(gb10())}
    assert lines["unified"].text.startswith("yes")
    admission = lines["admission"]
    assert admission.level == "FIX" and "gpu_memory_utilization 0.85 needs 103.4 GiB" in admission.text
    assert "set it to 0.76 or less" in admission.text
    assert lines["page cache"].level == "ok"  # the space drops the cache before each start
    keep = {f.topic: f for f in findings(gb10(settings=engine_settings("vllm", {})))}
    assert keep["page cache"].level == "warn" and "drop_caches" in keep["page cache"].text
    assert keep["root"].level == "note"  # not root, but nothing asks for drop
    assert lines["cpu"].level == "warn" and "slow state" in lines["cpu"].text
    assert lines["gpu 0"].level == "warn" and "sw_thermal" in lines["gpu 0"].text
    assert lines["root"].level == "FIX" and "page_cache: drop" in lines["root"].text
    assert lines["vllm"].level == "ok"
    fine = {f.topic: f for f in findings(gb10(memory=MemInfo(int(121.7 * GIB), 110 * GIB, 2 * GIB), root=True,
                                               cpu_mhz=3800.0, gpus=(GpuState(0, "NVIDIA GB10"),)))}
    assert all(f.level in ("ok", "note") for f in fine.values()), fine
    # Weights that would push the shared pool under the guard's floor must be fixed.
    big = {f.topic: f for f in findings(gb10(weights_bytes=100 * GIB))}
    assert big["memory"].level == "FIX" and "weights (100.0 GiB)" in big["memory"].text
    # A host already under the floor: every start would be killed.
    low = {f.topic: f for f in findings(gb10(memory=MemInfo(int(121.7 * GIB), 6 * GIB, 1 * GIB)))}
    assert low["memory"].level == "FIX" and "killed at once" in low["memory"].text


def test_the_gb10_recipe_passes_the_admission_check_on_every_reported_spark(monkeypatch, tmp_path):
    from autotune.cli.doctor import gather
    from autotune.config.space import load_space

    monkeypatch.setenv("PATH", str(tmp_path))  # no docker here: the import check fails fast, the rest is read
    facts = gather(load_space(str(REPO / "search_spaces" / "gb10.yaml")))
    assert facts.engine_args["gpu_memory_utilization"] == 0.70  # what vLLM is given: engine.vllm.extra_args
    assert facts.interpreter[0] == "docker" and not any("{" in part for part in facts.interpreter)
    # Sparks boot with 91-102 of 121.7 GiB free (field reports): the recipe starts on all of them.
    for free in (91, 102):
        spark = gb10(memory=MemInfo(int(121.7 * GIB), free * GIB, 2 * GIB), engine_args=facts.engine_args)
        admission = {f.topic: f for f in findings(spark)}["admission"]
        assert admission.level == "ok", admission
    # The simulator's value (0.85) would not have: vLLM refuses to start.
    assert {f.topic: f for f in findings(gb10(memory=MemInfo(int(121.7 * GIB), 91 * GIB, 2 * GIB)))}[
        "admission"].level == "FIX"


def test_the_import_check_through_the_recipes_container_leaves_nothing_in_tmpdir(monkeypatch, tmp_path):
    # The recipe's launcher mounts {workdir}; before a study has one, the import check ran with a scratch
    # directory made for it and left behind empty in TMPDIR at every `autotune doctor`.
    import sys
    import tempfile

    from autotune.cli.doctor import gather
    from autotune.config.space import load_space

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f"#!{sys.executable}\nimport sys\nif sys.argv[1] != 'run':\n    sys.exit(2)\nprint('0.31.0')\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    facts = gather(load_space(str(REPO / "search_spaces" / "gb10.yaml")))
    assert facts.vllm_version == "0.31.0", facts.vllm_error
    assert any(str(scratch) in part for part in facts.interpreter), "the mount named the throw-away directory"
    assert sorted(p.name for p in scratch.iterdir()) == []


def test_the_import_checks_reason_is_the_clients_error_not_its_usage_hint(tmp_path):
    """A docker launcher with no daemon: the reason doctor gives is "Cannot connect to the Docker daemon", not the
    "Run 'docker run --help'" line the client prints after it."""
    import sys

    from autotune.cli.doctor import vllm_version

    script = tmp_path / "client.py"
    script.write_text("import sys\nsys.stderr.write('docker: Cannot connect to the Docker daemon at "
                      "unix:///var/run/docker.sock. Is the docker daemon running?\\n\\nRun \\'docker run --help\\' "
                      "for more information\\n')\nsys.exit(125)\n")
    version, why = vllm_version([sys.executable, str(script)])
    assert version is None and why.startswith("docker: Cannot connect to the Docker daemon")

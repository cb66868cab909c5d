"""The GB10 recipe's container launcher: the rendered command, its mounts and caches, the image digest in the study,
and a missing container runtime refused before anything starts (a fake ``docker`` stands in; no vLLM, no GPU)."""

from __future__ import annotations

import io
import os
import shlex
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from autotune.cli._main import raw_main
from autotune.config.space import load_space
from autotune.core.exit_status import ExitStatus
from autotune.engines import EngineError, make_engine
from autotune.engines.vllm import RUNNER_PATH, VllmEngine
from autotune.store.fingerprint import fingerprint

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "search_spaces" / "gb10.yaml"


def _recipe_engine(study_dir: Path) -> VllmEngine:
    space = load_space(str(RECIPE))
    assert space.engine.name == "vllm"
    return make_engine("vllm", cache_dir=str(study_dir), **space.engine.vllm)


def _mounts(argv: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for flag, value in zip(argv, argv[1:]):
        if flag == "-v":
            host, inside, *mode = value.split(":")
            out.append((host, inside, mode[0] if mode else "rw"))
    return out


def test_the_recipe_renders_a_spark_container_command_with_its_mounts_and_caches(tmp_path):
    workdir = tmp_path / "runs"
    study = workdir / "gb10-study"
    study.mkdir(parents=True)
    engine = _recipe_engine(study)
    argv = engine.interpreter()
    line = shlex.join(argv)
    # The launch flags a Spark needs (NVIDIA's playbook and vLLM's docker docs).
    for flags in ("docker run -i --rm", "--gpus all", "--ipc=host", "--ulimit memlock=-1", "--ulimit stack=67108864",
                  f"--user {os.getuid()}:{os.getgid()}"):
        assert flags in line, flags
    # The image is the last word before the runner's path, run by python3 (vLLM's image would start `vllm serve`).
    assert argv[-3:] == ["--entrypoint", "python3", "nvcr.io/nvidia/vllm:25.11-py3"]
    assert "{" not in line, "every placeholder is filled in"
    # The workdir at the same path (read-write) and the runner's directory read-only.
    mounts = _mounts(argv)
    assert (str(workdir.resolve()), str(workdir.resolve()), "rw") in mounts
    assert (str(RUNNER_PATH.parent), str(RUNNER_PATH.parent), "ro") in mounts
    # Every cache the runner is told about lies in a mounted, writable directory, so it survives the container.
    env = engine.request(_config(), _workload(), seed=0)["env"]
    caches = {k: env[k] for k in ("VLLM_CACHE_ROOT", "HF_HOME", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
                                  "TORCHINDUCTOR_CACHE_DIR")}
    for name, path in caches.items():
        assert os.path.isabs(path) and Path(path).resolve().is_relative_to(workdir.resolve()), (name, path)
    assert Path(caches["HF_HOME"]).parent == workdir.resolve()  # the model cache: shared by the workdir's studies
    for name in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE"):
        assert Path(caches[name]).resolve().is_relative_to(study.resolve()), name  # compile caches: per study
    # The credential is passed through by name, never written into the command or the study.
    assert "HF_TOKEN" in argv and not any(part.startswith("HF_TOKEN=") for part in argv)


def _config():
    from autotune.core.records import EngineConfig

    return EngineConfig(engine_args={"model": "Qwen/Qwen3-30B-A3B", "max_num_seqs": 4})


def _workload():
    from autotune.core.records import Workload

    return Workload(num_prompts=2, input_len=8, output_len=4, concurrency=2, timed_passes=1)


def _fake_docker(bin_dir: Path, image_id: str) -> None:
    """A ``docker`` that answers ``image inspect`` like Docker and runs the probe as if vLLM were in the image."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "docker"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        if sys.argv[1:3] == ["image", "inspect"]:
            print(json.dumps([{{"Id": {image_id!r}, "RepoDigests": ["nvcr.io/nvidia/vllm@sha256:{'d' * 64}"]}}]))
        elif sys.argv[1] == "run":
            print("AUTOTUNE_RESULT " + json.dumps({{"vllm": "0.31.0", "torch": "2.9", "cuda": "13.0",
                                                   "gpu": "NVIDIA GB10"}}))
        else:
            sys.exit(2)
    """))
    script.chmod(0o755)


def test_the_image_id_and_digest_are_recorded_so_a_changed_image_is_noticed(tmp_path, monkeypatch):
    class Space:
        def check_model_paths(self) -> None:
            pass

    space = load_space(str(RECIPE))
    prints = []
    for image_id in ("sha256:" + "a" * 64, "sha256:" + "b" * 64):
        _fake_docker(tmp_path / "bin", image_id)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
        engine = _recipe_engine(tmp_path / "runs" / "s")
        engine.check(Space())  # type: ignore[arg-type]
        facts = engine.describe()
        assert facts.extra["image"] == "nvcr.io/nvidia/vllm:25.11-py3" and facts.extra["image_id"] == image_id
        assert facts.extra["image_digest"] == f"nvcr.io/nvidia/vllm@sha256:{'d' * 64}"
        prints.append(fingerprint(space, facts))
    assert any("image_id" in d for d in prints[0].differences(prints[1])), "a resume on another image is refused"


def test_an_image_the_runtime_cannot_inspect_is_one_line(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _fake_docker(bin_dir, "")  # no id: as if the image were not there
    monkeypatch.setenv("PATH", str(bin_dir))
    engine = _recipe_engine(tmp_path / "s")
    with pytest.raises(EngineError, match=r"^vllm engine: engine.image: docker image inspect .* pull it first"):
        engine.check(type("S", (), {"check_model_paths": lambda self: None})())


def test_tune_with_the_recipe_and_no_docker_on_path_fails_at_preflight_in_one_line(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    status = raw_main(["tune", "--space", str(RECIPE), "--storage", f"sqlite:///{tmp_path / 'o.db'}",
                       "--no-mlflow", "--workdir", str(tmp_path / "runs"), "--trials", "1"], out=io.StringIO())
    err = capsys.readouterr().err.strip()
    assert status == ExitStatus.ERROR and "\n" not in err
    assert err.startswith("autotune: error: vllm engine: engine.launcher: 'docker' is not on PATH")
    assert not list((tmp_path / "runs").rglob("*.log")), "no engine was started"


@pytest.mark.parametrize(("options", "needle"), [
    ({"launcher": ["docker", "run", "{nope}", "python3"]}, "engine.vllm.launcher: unknown placeholder {nope}"),
    ({"launcher": ["docker", "run", "{image}", "python3"]}, "uses {image} but engine.vllm.image is not set"),
    ({"image": "img", "launcher": ["docker", "run", "img", "python3"]}, "engine.vllm.image is set but engine.vllm.launcher"),
    ({"env": {"HF_HOME": "{home}/hf"}}, "engine.vllm.env.HF_HOME: unknown placeholder {home}"),
])
def test_bad_placeholders_are_refused_when_the_engine_is_made(options, needle):
    with pytest.raises(EngineError) as info:
        VllmEngine(**options)
    assert needle in str(info.value) and "\n" not in str(info.value)



def test_checking_the_recipe_before_the_study_has_its_directory_leaves_nothing_in_tmpdir(tmp_path, monkeypatch):
    # `autotune tune` checks the engine (it probes vLLM in the container) before the study has chosen its
    # directory; the launcher's {workdir} then named a scratch directory made for it, left empty in TMPDIR.
    _fake_docker(tmp_path / "bin", "sha256:" + "a" * 64)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    space = load_space(str(RECIPE))
    engine = make_engine("vllm", **space.engine.vllm)  # as `autotune tune` makes it: no cache_dir yet
    engine.check(type("S", (), {"check_model_paths": lambda self: None})())
    assert engine.describe().version == "0.31.0", "the probe ran"
    assert sorted(p.name for p in scratch.iterdir()) == []
    engine.cache_dir = str(tmp_path / "runs" / "s")  # what opening the study does
    assert engine.work_dir() == tmp_path / "runs" / "s"
    assert sorted(p.name for p in scratch.iterdir()) == []

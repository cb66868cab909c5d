"""Issue 32, principle 5: every process dies with the study, a container engine too.

A real ``docker run`` client is only a client: the container is the daemon's child, outside autotune's process group
and without its environment tag, so stopping the client (after ``kill_grace_s``, or at once on a guard trip) left the
engine running with its memory. A fake ``docker`` on ``PATH`` stands in for Docker here: ``run`` starts a detached
"container" (a new session, the tag scrubbed from its environment, as the daemon's child would be), records its pid
under the container's name, and then waits like an attached client that does not pass SIGTERM on; ``kill NAME``
kills that container. Real processes throughout (psutil).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from autotune.engines.process import EngineProcess


def fake_runtime(bin_dir: Path, state: Path, name: str = "docker") -> Path:
    """A container runtime named ``name`` in ``bin_dir``; its containers' pids go to ``state/<container>.pid``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, signal, subprocess, sys, time
        state = {str(state)!r}
        args = sys.argv[1:]
        with open(os.path.join(state, "calls.jsonl"), "a") as fh:
            fh.write(json.dumps(args) + "\\n")
        if args and args[0] == "run":
            name = next((a.split("=", 1)[1] for a in args if a.startswith("--name=")), None)
            if name is None and "--name" in args:
                name = args[args.index("--name") + 1]
            name = name or "anonymous-%d" % os.getpid()
            env = {{k: v for k, v in os.environ.items() if k != "AUTOTUNE_PROCESS_TAG"}}
            # The daemon's child: its own session, not our environment, not our group.
            box = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env,
                                   start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            with open(os.path.join(state, name + ".pid"), "w") as fh:
                fh.write(str(box.pid))
            label = next((a.split("=", 1)[1] for a in args if a.startswith("--label=")), "")
            with open(os.path.join(state, name + ".label"), "w") as fh:
                fh.write(label)
            print("AUTOTUNE_READY {{}}", flush=True)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # an attached client that does not pass SIGTERM on
            while True:
                time.sleep(1)
        elif args and args[0] == "kill":
            for name in args[1:]:
                path = os.path.join(state, name + ".pid")
                if not os.path.exists(path):
                    print("Error response from daemon: No such container: " + name, file=sys.stderr)
                    sys.exit(1)
                os.kill(int(open(path).read()), signal.SIGKILL)
                print(name)
        elif args and args[0] == "wait":
            path = os.path.join(state, args[1] + ".pid")
            if not os.path.exists(path):
                sys.exit(1)
            pid, deadline = int(open(path).read()), time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    if open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] in "ZX":
                        break
                except OSError:
                    break
                time.sleep(0.05)
            print(137)
        elif args and args[0] == "ps":
            # Running containers carrying the owner label (what --filter label=autotune_owner selects): NAME<TAB>value.
            for path in os.listdir(state):
                if not path.endswith(".label"):
                    continue
                name, label = path[:-len(".label")], open(os.path.join(state, path)).read()
                key, _, value = label.partition("=")
                try:
                    pid = int(open(os.path.join(state, name + ".pid")).read())
                    alive = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] not in "ZX"
                except (OSError, ValueError):
                    alive = False
                if alive and key == "autotune_owner":
                    print(name + "\t" + value)
        else:
            sys.exit(2)
    """))
    script.chmod(0o755)
    return script


def _containers(state: Path, timeout_s: float = 10.0) -> dict[str, int]:
    """The containers the fake runtime started: name -> pid (waits for the first to appear)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = {p.stem: int(p.read_text()) for p in state.glob("*.pid") if p.read_text().strip()}
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("the fake runtime started no container")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def _kill_leftovers(state: Path) -> None:
    for path in state.glob("*.pid"):
        try:
            psutil.Process(int(path.read_text())).kill()
        except (psutil.Error, ValueError):
            pass


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A fake ``docker`` and ``podman`` first on ``PATH``; whatever they started is killed after the test."""
    bin_dir, state = tmp_path / "bin", tmp_path / "containers"
    fake_runtime(bin_dir, state, "docker")
    fake_runtime(bin_dir, state, "podman")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield state
    _kill_leftovers(state)


@pytest.mark.parametrize("program", ["docker", "podman"])
def test_a_container_engine_dies_with_its_restart(runtime, tmp_path, program):
    """The container, not only its client, is gone once the engine process is stopped (here after a grace the
    client ignores, as a timeout or Ctrl-C stops it)."""
    argv = [program, "run", "-i", "--rm", "--init", "nvcr.io/nvidia/vllm:25.11-py3", "python3", "runner.py"]
    with open(tmp_path / "log", "wb") as log, EngineProcess(argv, stdout=log, stderr=log) as proc:
        containers = _containers(runtime)
        assert all(_running(pid) for pid in containers.values())
        proc.stop(grace_s=0.2)
    (name, pid), = containers.items()
    assert not _running(pid), f"the container {name} outlived its stopped client"
    calls = [json.loads(line) for line in (runtime / "calls.jsonl").read_text().splitlines()]
    # The name is the restart's own (unique per start), and the runtime was asked to kill exactly it.
    assert name.startswith("autotune-") and ["kill", name] in calls
    # Named, and labelled with the autotune that started it (so a later one can tell an orphan), the rest as given.
    assert calls[0][:2] == ["run", f"--name={name}"] and calls[0][3:] == argv[2:]
    scope = proc.tag.split("-")[1]  # the workdir it was started for (engines.process.new_tag)
    assert calls[0][2] == f"--label=autotune_owner={os.getpid()}:{psutil.Process().create_time():.2f}:{scope}"


def test_a_launcher_that_names_its_container_is_killed_by_that_name(runtime, tmp_path):
    argv = ["docker", "run", "--rm", "--name", "my-vllm", "img", "python3"]
    with open(tmp_path / "log", "wb") as log, EngineProcess(argv, stdout=log, stderr=log) as proc:
        containers = _containers(runtime)
        proc.stop(grace_s=0.2)
    assert set(containers) == {"my-vllm"} and not _running(containers["my-vllm"])


def fake_sudo(bin_dir: Path) -> Path:
    """A ``sudo`` that runs the rest of its command line (after its own options), as a password-less sudo does."""
    script = bin_dir / "sudo"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys
        with open(os.path.join({str(bin_dir)!r}, "sudo.jsonl"), "a") as fh:
            fh.write(json.dumps(sys.argv[1:]) + "\\n")
        args = sys.argv[1:]
        while args and args[0].startswith("-"):
            args = args[1:]
        os.execvp(args[0], args)
    """))
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("wrapped", [["sudo", "-E"], ["env", "CUDA_VISIBLE_DEVICES=0"], ["nice", "-n", "5"]])
def test_a_runtime_behind_a_wrapper_is_named_and_killed_through_it(runtime, tmp_path, wrapped):
    """``sudo docker run`` (a launcher on a machine where only root reaches the daemon), ``env ... docker run``:
    the container behind the wrapper is named and killed, through the same wrapper (sudo made non-interactive)."""
    fake_sudo(tmp_path / "bin")
    argv = [*wrapped, "docker", "run", "--rm", "img", "python3"]
    with open(tmp_path / "log", "wb") as log, EngineProcess(argv, stdout=log, stderr=log) as proc:
        containers = _containers(runtime)
        proc.stop(grace_s=0.2)
    (name, pid), = containers.items()
    assert name.startswith("autotune-") and not _running(pid), "the wrapped runtime's container outlived its client"
    if wrapped[0] == "sudo":
        sudo_calls = [json.loads(line) for line in (tmp_path / "bin" / "sudo.jsonl").read_text().splitlines()]
        assert ["-n", "-E", "docker", "kill", name] in sudo_calls


def test_a_killed_autotunes_container_is_stopped_by_the_next_study(runtime, tmp_path):
    """``kill -9`` of autotune stops nothing: its engine's client and container run on. The next study's start
    (``stop_orphans``) finds the container by its owner label, since its autotune is gone, and kills it; a
    container whose autotune still runs (this test's) is left alone."""
    import signal
    import subprocess

    from autotune.engines.process import set_scope, stop_orphans

    repo = Path(__file__).resolve().parents[2]
    # Both autotunes work in this test's workdir: the next study stops only its own workdir's orphans.
    killed_study = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom autotune.engines.process import EngineProcess, set_scope\n"
         "set_scope(sys.argv[1])\np = EngineProcess(['docker', 'run', 'img'])\ntime.sleep(120)", str(tmp_path)],
        cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    set_scope(tmp_path)
    live = EngineProcess(["docker", "run", "--name", "mine", "img"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while len(list(runtime.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        containers = _containers(runtime)
        orphan = next(name for name in containers if name != "mine")
        killed_study.send_signal(signal.SIGKILL)
        killed_study.wait()
        assert _running(containers[orphan]), "the fake runtime's container should outlive a kill -9'd autotune"
        stop_orphans()
        assert not _running(containers[orphan]), "the orphaned container was not stopped by the next study"
        assert _running(containers["mine"]), "a container of a running autotune was killed"
    finally:
        live.stop(grace_s=0.2)
    assert not _running(containers["mine"])


def test_a_killed_autotunes_container_of_another_workdir_is_left_alone(runtime, tmp_path, caplog):
    """A container a ``kill -9``'d autotune left for another workdir is another run's: reported, not killed."""
    import signal
    import subprocess

    from autotune.engines.process import set_scope, stop_orphans

    repo = Path(__file__).resolve().parents[2]
    killed_study = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom autotune.engines.process import EngineProcess, set_scope\n"
         "set_scope(sys.argv[1])\np = EngineProcess(['docker', 'run', 'img'])\ntime.sleep(120)",
         str(tmp_path / "theirs")], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    try:
        deadline = time.monotonic() + 20
        while not list(runtime.glob("*.pid")) and time.monotonic() < deadline:
            time.sleep(0.05)
        (name, pid), = _containers(runtime).items()
        killed_study.send_signal(signal.SIGKILL)
        killed_study.wait()
        set_scope(tmp_path / "mine")
        with caplog.at_level("WARNING"):
            assert stop_orphans() == []
        assert _running(pid), "another workdir's orphaned container was killed"
        assert "another workdir, left alone" in caplog.text and name in caplog.text
    finally:
        if killed_study.poll() is None:
            killed_study.kill()
        set_scope(tmp_path / "theirs")
        stop_orphans()  # now this workdir's: stopped
    assert not _running(pid)


def test_two_restarts_get_two_container_names(runtime, tmp_path):
    for i in range(2):
        with open(tmp_path / f"log{i}", "wb") as log, EngineProcess(["docker", "run", "img"], stdout=log,
                                                                    stderr=log) as proc:
            deadline = time.monotonic() + 10
            while len(list(runtime.glob("*.pid"))) < i + 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.stop(grace_s=0.2)
    containers = _containers(runtime)
    assert len(containers) == 2 and not any(_running(pid) for pid in containers.values())


# -- through the GB10 recipe's launcher: a measurement timeout, a memory-guard trip ---------------------------


def _recipe_engine(study_dir: Path, **overrides):
    from autotune.config.space import load_space
    from autotune.engines import make_engine

    space = load_space(str(Path(__file__).resolve().parents[2] / "search_spaces" / "gb10.yaml"))
    study_dir.mkdir(parents=True, exist_ok=True)
    return make_engine("vllm", cache_dir=str(study_dir), **{**space.engine.vllm, **overrides})


def _restart(engine):
    from autotune.core.records import EngineConfig, Workload

    config = EngineConfig(engine_args={"model": "Qwen/Qwen3-30B-A3B", "max_num_seqs": 4})
    return engine.run_restart(config, Workload(num_prompts=2, input_len=8, output_len=4, concurrency=2,
                                               timed_passes=1), restart=0, seed=0)


def test_the_recipes_container_dies_when_its_measurement_times_out(runtime, tmp_path):
    engine = _recipe_engine(tmp_path / "runs" / "s", measure_timeout_s=1)
    try:
        result = _restart(engine)
    finally:
        engine.close()
    assert result.status == "timeout"
    (name, pid), = _containers(runtime).items()
    assert name.startswith("autotune-") and not _running(pid), "the container outlived the timed-out restart"


def test_the_recipes_container_dies_at_a_memory_guard_trip(runtime, tmp_path):
    from autotune.machine import GIB, GUARD_PREFIX, MemInfo, StartSafety

    def meminfo() -> MemInfo:
        # Plenty until the container runs, then under the 1 GiB floor: the guard trips while it runs.
        started = any(runtime.glob("*.pid"))
        return MemInfo(total=16 * GIB, available=GIB // 2 if started else 12 * GIB, cached=0)

    engine = _recipe_engine(tmp_path / "runs" / "s")
    engine.safety = StartSafety(1.0, 10.0, leftovers=engine.safety.leftovers, reader=meminfo, gpu_reader=None,
                                kernel_log=None, unified=False, page_cache="keep")
    try:
        result = _restart(engine)
    finally:
        engine.close()
    assert not result.ok and result.error.startswith(GUARD_PREFIX)
    (name, pid), = _containers(runtime).items()
    assert not _running(pid), "the container outlived the guard's kill"


def test_doctors_import_check_leaves_no_container_when_it_times_out(runtime, tmp_path, monkeypatch):
    """``autotune doctor`` imports vLLM through the recipe's launcher; an import that hangs is given up on after
    its timeout, and its container with it."""
    from autotune.cli import doctor
    from autotune.config.space import load_space

    monkeypatch.setattr(doctor, "IMPORT_TIMEOUT_S", 1.0)
    facts = doctor.gather(load_space(str(Path(__file__).resolve().parents[2] / "search_spaces" / "gb10.yaml")))
    assert facts.vllm_version is None and "took more than 1 s" in (facts.vllm_error or "")
    (name, pid), = _containers(runtime).items()
    assert not _running(pid), "doctor's import check left its container running"


# -- one scanner of tagged processes (engines/process.py); the guard and the settle ask it ---------------------


def test_only_engines_process_scans_for_tagged_processes_or_kills_groups():
    """The memory guard and the settle of ``machine/`` neither read process environments nor kill process groups:
    the engines hand them ``engines.process``'s functions (``machine/`` may not import ``engines/``)."""
    root = Path(__file__).resolve().parents[2] / "autotune"
    sources = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*.py")}
    assert sorted(name for name, text in sources.items() if ".environ().get(" in text) == ["engines/process.py"]
    assert not [name for name, text in sources.items() if name.startswith("machine/")
                and any(word in text for word in ("os.killpg(", "os.kill(", "psutil.process_iter"))
                and name != "machine/_settle.py"]
    # The settle names the largest processes by memory when it gives up (psutil), and nothing else of them.
    assert not any(word in sources["machine/_settle.py"] for word in (".environ(", "os.kill", "TAG"))


def test_the_guards_kill_takes_what_started_since_and_spares_what_was_there(tmp_path):
    """:func:`kill_started_since`, the vLLM engine's kill for its guard: a tagged process that was running before
    the start (a forkserver host) lives on; one started after it, and a ``setsid`` daemon it left, are killed."""
    import subprocess

    from autotune.engines.process import engine_leftovers, kill_started_since, own_tagged

    daemon = textwrap.dedent("""\
        import os, subprocess, sys, time
        child = subprocess.Popen(["setsid", sys.executable, "-c", "import time; time.sleep(60)"])
        open(sys.argv[1], "w").write(str(child.pid))
        time.sleep(60)
    """)
    with EngineProcess(["sleep", "60"]) as host:
        deadline = time.monotonic() + 5
        while host.pid not in own_tagged() and time.monotonic() < deadline:
            time.sleep(0.01)
        before = own_tagged()
        assert host.pid in before
        pidfile = tmp_path / "daemon.pid"
        engine = EngineProcess([sys.executable, "-c", daemon, str(pidfile)], stdout=subprocess.DEVNULL)
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline + 10:
            time.sleep(0.01)
        escaped = int(pidfile.read_text())
        while escaped not in own_tagged() and time.monotonic() < deadline + 10:
            time.sleep(0.01)
        assert f"{escaped} " in " ".join(engine_leftovers())  # outside every live engine's session
        killed = kill_started_since(before)
        assert engine.pid in killed and escaped in killed
        engine.stop(grace_s=0.2)
        assert _running(host.pid) and not _running(engine.pid) and not _running(escaped)

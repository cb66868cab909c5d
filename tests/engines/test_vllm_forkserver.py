"""Forked restarts: a forkserver host in the engine's interpreter, with a fake vLLM first on its PYTHONPATH.

``tests/data/fake-vllm`` stands in for vLLM and torch (the real runner runs against it): it logs which process
imported ``vllm`` and which pid, session and group every engine ran in, and its model name picks a behaviour
(``fake/ok``, ``fake/hang`` with a SIGTERM-ignoring grandchild, ``fake/segv``, ``fake/daemon`` that leaves
the group). Every test checks that no process it caused is left.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from autotune.records import encode
from autotune.core.failure import FailureKind
from autotune.engines import EngineError, make_engine
from autotune.engines.vllm import VllmEngine
from autotune.engines.vllm._forkserver import ForkHost
from autotune.core.records import Dataset, EngineConfig, RestartStatus, Workload
from tests._helpers.processes import wait_gone

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="process checks read /proc")

FAKE_VLLM = Path(__file__).resolve().parents[1] / "data" / "fake-vllm"
# Token-id prompts: the fake vLLM has no tokenizer (a real checkpoint would get autotune's text prompts). One round
# of the prompts per timed pass (pass_seconds 0): these tests are about processes, and the default's 5 s passes
# (sized for a GPU) only made each restart wait 10 s; sizing passes is test_vllm_launcher's and test_warmup's.
WORKLOAD = Workload(num_prompts=2, input_len=8, output_len=4, concurrency=2, timed_passes=2,
                    dataset=Dataset("synthetic"), pass_seconds=0.0)


def _config(behaviour: str) -> EngineConfig:
    return EngineConfig(engine_args={"model": f"fake/{behaviour}"}, compilation_config={}, speculative_config={})


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    paths = {"imports": tmp_path / "imports", "procs": tmp_path / "procs"}
    monkeypatch.setenv("FAKE_VLLM_IMPORT_LOG", str(paths["imports"]))
    monkeypatch.setenv("FAKE_VLLM_PROCS", str(paths["procs"]))
    return paths


@pytest.fixture
def engines(tmp_path: Path):
    """Engines on the fake vLLM, closed after the test whatever happened."""
    made: list[VllmEngine] = []

    def make(**options) -> VllmEngine:
        options.setdefault("python", sys.executable)
        options.setdefault("startup_timeout_s", 30)
        options["env"] = {"PYTHONPATH": str(FAKE_VLLM), **options.get("env", {})}
        engine = VllmEngine(cache_dir=str(tmp_path / "study"), **options)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


def _records(path: Path, kind: str | None = None) -> list[dict]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if kind is None or r["kind"] == kind]


def _importers(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_forked_restarts_import_vllm_once_and_each_run_in_a_session_of_their_own(engines, files) -> None:
    engine = engines()
    first = engine.run_restart(_config("ok"), WORKLOAD, restart=0, seed=0)
    second = engine.run_restart(_config("ok"), WORKLOAD, restart=1, seed=1)

    for result in (first, second):
        assert result.status == RestartStatus.OK, f"{result.error}\n{result.log_tail}"
        assert result.start_method == "forkserver"
        assert len(result.passes_tok_s) == 2 and all(v > 0 for v in result.passes_tok_s)
        assert result.startup_s is not None and 0 < result.startup_s < result.wall_s
        log = Path(result.log_path).read_text()
        assert "fake engine ready" in log and '"preloaded": true' in log
    assert first.cold is True and second.cold is False
    assert first.log_path != second.log_path
    runs = _records(files["procs"], "engine")
    assert len(runs) == 2 and runs[0]["pid"] != runs[1]["pid"], "each restart is a fresh process"
    for run in runs:
        assert run["pid"] == run["sid"] == run["pgid"], "a restart leads its own session and process group"
    importers = _importers(files["imports"])
    assert len(importers) == 1, "vLLM is imported once, by the forkserver, not by each restart"
    assert importers[0] not in {r["pid"] for r in runs}
    host = engine._host
    assert host is not None and engine.describe().extra["start_method"] == "forkserver"
    forkserver = importers[0]

    engine.close()
    assert wait_gone([host.pid, forkserver, *(r["pid"] for r in runs)]) == [], "close() stops host and forkserver"


@pytest.fixture
def short_tmp():
    """An empty directory with a short path: the forkserver's socket path under it must fit AF_UNIX's 107 bytes,
    which a TMPDIR under pytest's tmp_path on CI's /dev/shm does not ("OSError: AF_UNIX path too long")."""
    path = Path(tempfile.mkdtemp(prefix="fs-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_stopped_host_leaves_nothing_in_the_temporary_directory(engines, files, short_tmp: Path) -> None:
    # multiprocessing puts the forkserver's socket in a pymp-* directory under TMPDIR and removes it in an exit
    # hook, which the host's os._exit skips: every study on vLLM left one behind.
    engine = engines(env={"TMPDIR": str(short_tmp)})
    result = engine.run_restart(_config("ok"), WORKLOAD, restart=0, seed=0)
    assert result.status == RestartStatus.OK, f"{result.error}\n{result.log_tail}"
    assert list(short_tmp.glob("pymp-*")), "the forkserver's socket directory is under the engine's TMPDIR"
    host = engine._host
    assert host is not None
    engine.close()
    assert wait_gone([host.pid, *_importers(files["imports"])]) == []
    assert sorted(p.name for p in short_tmp.iterdir()) == []


def test_an_engine_dropped_without_close_stops_its_host(tmp_path: Path, files) -> None:
    import gc

    engine = VllmEngine(cache_dir=str(tmp_path / "study"), python=sys.executable, env={"PYTHONPATH": str(FAKE_VLLM)})
    assert engine.run_restart(_config("ok"), WORKLOAD, restart=0, seed=0).status == RestartStatus.OK
    assert engine._host is not None
    pids = [engine._host.pid, *_importers(files["imports"])]  # the host and its forkserver
    del engine
    gc.collect()
    assert wait_gone(pids) == []


def test_startup_deadline_kills_the_forked_group_and_the_host_serves_the_next_restart(engines, files) -> None:
    engine = engines(startup_timeout_s=3)
    hung = engine.run_restart(_config("hang"), WORKLOAD, restart=0, seed=0)
    assert hung.status == RestartStatus.TIMEOUT
    assert hung.error is not None and hung.error.startswith("engine start-up exceeded 3 s")
    assert "loading forever" in (hung.log_tail or "")
    stuck = [r["pid"] for r in _records(files["procs"]) if r["kind"] in ("engine", "grandchild")]
    assert len(stuck) == 2
    assert wait_gone(stuck) == [], "the restart and its SIGTERM-ignoring grandchild are gone"

    # Room for a loaded test machine: what matters is that the same host serves the next restart.
    engine.settings = engine.settings.model_copy(update={"startup_timeout_s": 60})
    after = engine.run_restart(_config("ok"), WORKLOAD, restart=1, seed=1)
    assert after.status == RestartStatus.OK, after.error
    assert len(_importers(files["imports"])) == 1, "the same forkserver served both restarts"


def test_a_host_that_cannot_fork_before_the_deadline_is_a_startup_timeout(engines, files, monkeypatch) -> None:
    # A forkserver whose preload hangs (an import that blocks): the restart never comes to exist.
    engine = engines(startup_timeout_s=3, env={"FAKE_VLLM_IMPORT_SLEEP": "600"})
    result = engine.run_restart(_config("ok"), WORKLOAD, restart=0, seed=0)
    assert result.status == RestartStatus.TIMEOUT
    assert result.error is not None and result.error.startswith("engine start-up exceeded 3 s")
    assert "the forkserver host did not fork the restart within 3 s" in (result.log_tail or "")
    importers = _importers(files["imports"])
    assert len(importers) == 1 and wait_gone(importers) == [], "the stuck host and its forkserver are stopped"
    assert engine._host is None or not engine._host.alive()


def test_a_daemon_that_left_the_forked_restarts_group_is_found_and_killed(engines, files) -> None:
    engine = engines()
    result = engine.run_restart(_config("daemon"), WORKLOAD, restart=0, seed=0)
    assert result.status == RestartStatus.OK, result.error
    daemon = _records(files["procs"], "daemon")[0]["pid"]
    assert wait_gone([daemon]) == []
    assert "killed 1 process(es) that had left the engine's process group" in Path(result.log_path).read_text()


def test_a_crashing_forked_restart_fails_with_its_signal(engines, files) -> None:
    engine = engines(startup_timeout_s=60)
    start = time.monotonic()
    result = engine.run_restart(_config("segv"), WORKLOAD, restart=0, seed=0)
    assert time.monotonic() - start < 20, "a crash must not wait for the start-up deadline"
    assert result.status == RestartStatus.FAILED
    assert result.error is not None and result.error.startswith("engine killed by signal 11")


def test_a_dead_host_fails_the_running_restart_with_a_reason_and_a_new_host_takes_over(engines, files) -> None:
    engine = engines(startup_timeout_s=60)
    killed: list[int] = []

    def kill_host_once_the_engine_runs() -> None:
        _wait_for(lambda: len(_records(files["procs"], "grandchild")) == 1)
        assert engine._host is not None
        killed.append(engine._host.pid)
        engine._host.proc.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_host_once_the_engine_runs)
    killer.start()
    start = time.monotonic()
    result = engine.run_restart(_config("hang"), WORKLOAD, restart=0, seed=0)
    killer.join()
    assert time.monotonic() - start < 30, "the host's death is noticed, not waited out"
    assert result.status == RestartStatus.FAILED
    assert result.error is not None
    assert result.error.startswith("restart lost: the forkserver host exited with status -9"), result.error
    assert result.failure_kind is FailureKind.LOST  # the engine says so, not only its error line
    orphans = [r["pid"] for r in _records(files["procs"]) if r["kind"] in ("engine", "grandchild")]
    assert wait_gone(orphans) == [], "the unsupervised restart's group is stopped"

    after = engine.run_restart(_config("ok"), WORKLOAD, restart=1, seed=1)
    assert after.status == RestartStatus.OK, after.error
    assert engine._host is not None and engine._host.pid != killed[0]


def test_a_host_that_dies_between_the_fork_and_its_report_leaves_nothing_of_the_restart(engines, files,
                                                                                       tmp_path: Path) -> None:
    # The race a loaded machine makes of the test above, made certain by the fake (FAKE_VLLM_KILL_HOST_ONCE): the
    # host forks the restart and is killed before it reports its pid, while the restart runs on and has started
    # its grandchild. No ForkedProcess ever holds that restart; its tag is all that names it.
    marker = tmp_path / "host-killed"
    engine = engines(startup_timeout_s=60, settle_timeout_s=10, env={"FAKE_VLLM_KILL_HOST_ONCE": str(marker)})
    first_host = engine.fork_host()
    result = engine.run_restart(_config("hang"), WORKLOAD, restart=0, seed=0)
    assert marker.exists(), "the fake killed the host between the fork and its report"
    assert result.status == RestartStatus.FAILED
    assert result.error is not None
    assert result.error.startswith("restart lost: the forkserver host exited with status -9"), result.error
    assert result.failure_kind is FailureKind.LOST
    lost = [r["pid"] for r in _records(files["procs"]) if r["kind"] in ("engine", "grandchild")]
    assert len(lost) == 2, "the restart ran as far as its SIGTERM-ignoring grandchild"
    assert wait_gone(lost, timeout=0.5) == [], "the failed restart stopped what the host had forked"
    assert engine.safety.leftovers() == [], "nothing of the lost restart is left for the next settle"

    after = engine.run_restart(_config("ok"), WORKLOAD, restart=1, seed=1)
    assert after.status == RestartStatus.OK, after.error
    assert engine._host is not None and engine._host.pid != first_host.pid
    assert engine.safety.leftovers() == []


def test_the_host_stops_its_restarts_when_autotune_goes_away(tmp_path: Path, files) -> None:
    import os

    env = dict(os.environ, PYTHONPATH=str(FAKE_VLLM), PYTHONUNBUFFERED="1")
    host = ForkHost([sys.executable], env, tmp_path / "host.log")
    try:
        ready = host.wait_ready(30)
        assert ready is not None and ready["pid"] == host.pid
        request = {"mode": "offline", "llm_kwargs": {"model": "fake/hang"}, "workload": encode(WORKLOAD),
                   "seed": 0, "env": {}}
        log = tmp_path / "restart.log"
        proc = host.start(request, str(log), env, timeout_s=30)
        _wait_for(lambda: len(_records(files["procs"], "grandchild")) == 1)
        forkserver = _importers(files["imports"])[0]
        # What autotune's exit (even SIGKILL) does to the host: its request pipe ends.
        host._stdin.close()
        assert host.proc.wait(timeout=30) == 0
        pids = [proc.pid, forkserver, *(r["pid"] for r in _records(files["procs"], "grandchild"))]
        assert wait_gone(pids, timeout=15) == []
    finally:
        host.stop()


def test_ctrl_c_during_a_forked_restart_stops_its_group(engines, files) -> None:
    engine = engines(startup_timeout_s=60)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        waiter = threading.Thread(target=lambda: _wait_for(lambda: _records(files["procs"], "grandchild")))
        waiter.start()

        def arm() -> None:
            waiter.join()
            signal.setitimer(signal.ITIMER_REAL, 0.2)

        threading.Thread(target=arm).start()
        with pytest.raises(KeyboardInterrupt):
            engine.run_restart(_config("hang"), WORKLOAD, restart=0, seed=0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    pids = [r["pid"] for r in _records(files["procs"]) if r["kind"] in ("engine", "grandchild")]
    assert len(pids) == 2 and wait_gone(pids) == []
    host = engine._host
    assert host is not None
    engine.close()
    assert wait_gone([host.pid]) == []


def test_a_forkserver_that_could_not_preload_vllm_is_reported_once(engines, files, monkeypatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    engine = engines()
    # The forkserver inherits the host's environment at its start: its preload of vLLM fails there ...
    monkeypatch.setenv("FAKE_VLLM_FAIL_IMPORT", "1")
    assert engine.fork_host().wait_ready(30) is not None
    # ... while the restarts' own environment lets them import it.
    monkeypatch.delenv("FAKE_VLLM_FAIL_IMPORT")
    results = [engine.run_restart(_config("ok"), WORKLOAD, restart=i, seed=i) for i in range(2)]
    assert all(r.status == RestartStatus.OK for r in results), [r.error for r in results]
    assert all('"preloaded": false' in Path(r.log_path).read_text() for r in results)
    runs = {r["pid"] for r in _records(files["procs"], "engine")}
    assert runs <= set(_importers(files["imports"])), "each restart imported vLLM itself"
    err = capsys.readouterr().err
    assert err.count("the forkserver could not import vLLM ahead of the restarts") == 1, err


def test_a_missing_interpreter_is_a_failed_restart_not_an_exception(engines, tmp_path: Path) -> None:
    engine = engines(python=str(tmp_path / "no-such-python"))
    result = engine.run_restart(_config("ok"), WORKLOAD, restart=0, seed=0)
    assert result.status == RestartStatus.FAILED and result.start_method == "forkserver"
    assert result.error is not None and result.error.startswith("cannot start the forkserver host with ")
    assert "no-such-python" in result.error


def test_spawn_runs_the_same_runner_in_a_fresh_interpreter(engines, files) -> None:
    engine = engines(start_method="spawn")
    result = engine.run_restart(_config("ok"), WORKLOAD, restart=0, seed=0)
    assert result.status == RestartStatus.OK, result.error
    assert result.start_method == "spawn"
    run = _records(files["procs"], "engine")[0]
    assert _importers(files["imports"]) == [run["pid"]], "a spawned restart imports vLLM itself"
    assert engine._host is None, "spawn starts no forkserver host"


def test_a_launcher_means_spawn_and_says_so_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "runner.py"
    script.write_text('print("AUTOTUNE_RESULT {\\"passes_tok_s\\": [1.0]}", flush=True)\n')
    engine = VllmEngine(cache_dir=str(tmp_path / "study"), launcher=[sys.executable, str(script)])
    assert engine.describe().extra["start_method"] == "spawn"
    for i in range(2):
        assert engine.run_restart(_config("ok"), WORKLOAD, restart=i, seed=i).start_method == "spawn"
    err = capsys.readouterr().err
    assert err.count("start_method spawn") == 1, err
    assert VllmEngine(python=sys.executable).settings.resolved_start_method() == "forkserver"


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"start_method": "fork"}, "engine.vllm.start_method must be one of forkserver, spawn, got 'fork'"),
        ({"start_method": "forkserver", "launcher": ["docker", "run", "-i", "img", "python3"]},
         "use engine.vllm.start_method spawn"),
    ],
)
def test_bad_start_method_is_rejected_by_name(options: dict, needle: str) -> None:
    with pytest.raises(EngineError) as info:
        make_engine("vllm", **options)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_one_engine_start_measures_every_load_level_with_its_cap(engines, files, tmp_path) -> None:
    inflight = tmp_path / "inflight"
    engine = engines(env={"FAKE_VLLM_INFLIGHT": str(inflight)})
    levels = dataclasses.replace(WORKLOAD, num_prompts=6, concurrency=(1, 4), aggregate="min", warmup_passes=0)
    result = engine.run_restart(_config("ok"), levels, restart=0, seed=0)
    assert result.status == RestartStatus.OK, f"{result.error}\n{result.log_tail}"
    assert len(_records(files["procs"], "engine")) == 1, "one engine start for both levels"
    assert [lv.concurrency for lv in result.levels] == [1, 4]
    assert all(len(lv.passes_tok_s) == 2 for lv in result.levels)
    assert result.passes_tok_s == result.levels[0].passes_tok_s + result.levels[1].passes_tok_s
    seen = [int(x) for x in inflight.read_text().split()]
    # Two passes of six prompts at each level, one request finishing per step: 12 steps capped at 1, then 12 at 4.
    assert len(seen) == 24 and max(seen[:12]) == 1 and max(seen[12:]) == 4
    assert levels.scored(result).value == min(lv.tok_s for lv in result.levels)

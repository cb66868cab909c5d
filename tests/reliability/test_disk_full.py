"""A full disk under the study's storage or workdir (issue 22, FS01/FS04): one line naming which and the fix, a
non-zero exit, and the same command, once there is room, finishes with nothing lost and the uninterrupted outcome.

The full disk is real where it can be without root: the run is a child process with ``RLIMIT_FSIZE`` (``ulimit
-f``) set and ``SIGXFSZ`` ignored, so the kernel refuses every write past the limit with ``EFBIG``, as it refuses
one on a full disk with ``ENOSPC``. SQLite reports both as a failed write (``SQLITE_IOERR_WRITE`` /
``SQLITE_FULL``); autotune's own files get the errno itself. The limit is per file, so it fills the one file the
test aims at (the study database grows past it mid-study; the workdir's files are small) and nothing else.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.core.exit_status import ExitStatus
from tests.conftest import _migrated_store
from tests._helpers.faults import REPO, fault_command, read_stored

pytestmark = pytest.mark.slow

PAGE = 4096  # SQLite's default page: the database grows a page at a time


def _limited(limit: int):
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the writer instead of failing the write
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def _run(cmd: list[str], limit: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          preexec_fn=_limited(limit) if limit else None)


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("autotune:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def _cmd(tmp: Path) -> list[str]:
    # The fault test's deterministic study (its outcome can be compared exactly), with a 1 s heartbeat: a trial
    # failed by a run that died before queuing its retry is queued again after the grace period (4 s here).
    return [*fault_command(tmp, "sim"), "--heartbeat", "1"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict, int, set[str]]:
    tmp = tmp_path_factory.mktemp("ref")
    done = _run(_cmd(tmp))
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = read_stored(tmp).outcome
    assert outcome is not None
    return outcome, (tmp / "optuna.db").stat().st_size, _measured(tmp)


def _measured(tmp: Path) -> set[str]:
    """The configurations the search measured to the end (a trial dropped from the search is missing here)."""
    from autotune.store import ledger

    return {r.config.key() for r in ledger.load("faults", f"sqlite:///{tmp}/optuna.db").trial_records()
            if r.state == "COMPLETE" and not r.interrupted and r.duplicate_of is None}


@pytest.mark.parametrize("where", ["search", "verification"])
def test_fs01_a_full_disk_under_the_storage_is_one_line_and_the_resume_loses_nothing(reference, tmp_path, where):
    """The database stops growing two thirds of the way (mid-search) or one page short of its final size (the
    study's last writes). The same command on the still-full disk fails the same way (and must not lose the trial
    it fails on behalf of the dead run); once there is room it finishes with every stored restart kept and the
    uninterrupted run's verdict, winner and verified values."""
    outcome, size, measured = reference
    cmd = _cmd(tmp_path)
    limit = size * 2 // 3 if where == "search" else size - PAGE
    before = None
    # Mid-search, the same command again on the still-full disk (it fails the dead run's trial, then dies itself
    # before queuing the retry); at the end once is enough (CI time: each run is a whole process).
    for _ in range(2 if where == "search" else 1):
        full = _run(cmd, limit)
        assert full.returncode == ExitStatus.ERROR, full.stderr[-3000:]
        line = _one_error_line(full.stderr)
        assert f"cannot write to the study storage --storage sqlite:///{tmp_path}/optuna.db" in line
        assert "free space" in line and "run the same command again" in line
        before = before or read_stored(tmp_path)
    assert before is not None and sum(before.restarts.values()) > 0
    resumed = _run(cmd)
    assert resumed.returncode == ExitStatus.SUCCESS, resumed.stderr[-3000:]
    after = read_stored(tmp_path)
    assert not before.restarts - after.restarts, "restarts stored before the disk filled were lost"
    assert after.outcome == outcome
    assert _measured(tmp_path) == measured, "a configuration dropped out of the search"


def test_fs04_a_full_disk_under_the_workdir_is_one_line_naming_it_and_the_resume_finishes(tmp_path):
    """A study run once (trials stored), its study directory gone (a cleaned scratch disk), then the same command on
    a full disk: the study directory's marker cannot be written. Writes inside the database's existing pages still
    land under ``RLIMIT_FSIZE`` (only growing a file is refused), so the workdir is the write that fails."""
    storage = f"sqlite:///{tmp_path}/optuna.db"
    cmd = [sys.executable, "-m", "autotune", "tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim",
           "--trials", "2", "--quiet", "--storage", storage, "--workdir", str(tmp_path / "work"), "--study", "s",
           "--no-mlflow"]
    first = _run([*cmd, "--no-verify"])
    assert first.returncode == ExitStatus.SUCCESS, first.stderr[-3000:]
    shutil.rmtree(tmp_path / "work" / "s")
    full = _run(cmd, limit=16)
    assert full.returncode == ExitStatus.ERROR, full.stderr[-3000:]
    line = _one_error_line(full.stderr)
    assert f"cannot write to the workdir --workdir {tmp_path / 'work'}" in line and "free space" in line
    # No half-written marker: it would make autotune's own directory read as someone else's.
    assert not (tmp_path / "work" / "s" / ".autotune-study").exists()
    resumed = _run(cmd)
    assert resumed.returncode == ExitStatus.SUCCESS, resumed.stderr[-3000:]
    assert "Verdict:" in resumed.stdout


# -- MLflow (FS02, FS03) ---------------------------------------------------------------------------------

SIM = ["--space", "search_spaces/gb10.yaml", "--engine", "sim", "--trials", "2", "--no-verify", "--quiet"]


def _create_store_on_a_full_disk(db: Path) -> subprocess.CompletedProcess[str]:
    """autotune's MLflow session creating the store ``db`` while the disk fills a sixth of the way in."""
    code = ("import sys; from autotune.observers.mlflow._session import _Session; "
            "_Session(sys.argv[1]).client.search_experiments(max_results=1)")
    return _run([sys.executable, "-c", code, f"sqlite:///{db}"], limit=len(_migrated_store()) // 6)


def _tune(tmp: Path, capsys, uri: str) -> tuple[int, str]:
    import io

    from autotune.cli._main import raw_main

    status = raw_main(["tune", *SIM, "--storage", f"sqlite:///{tmp}/optuna.db", "--workdir", str(tmp / "w"),
                       "--study", "s", "--tracking-uri", uri], out=io.StringIO())
    return status, capsys.readouterr().err


def _parent_artifacts(uri: str) -> tuple[set[str], dict[str, str]]:
    import mlflow

    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string="tags.`autotune.kind` = 'study'")
    assert len(runs) == 1
    return {a.path for a in client.list_artifacts(runs[0].info.run_id)}, runs[0].data.params


def test_fs02_a_store_created_on_a_full_disk_is_not_left_half_built(tmp_path):
    db = tmp_path / "mlruns" / "mlflow.db"
    made = _create_store_on_a_full_disk(db)
    assert made.returncode != 0  # the disk is full: no store can be made
    assert not db.exists(), "a half-built store was left in place"
    assert os.listdir(db.parent) == [], "the temporary store was left behind"


def test_fs02_a_half_built_store_is_rebuilt_and_the_study_is_tracked(tmp_path, capsys):
    """A store MLflow itself began on a full disk (as autotune before this fix did): the next study rebuilds it,
    keeping the old file beside it, and is tracked; before, every later study ran with tracking off."""
    db = tmp_path / "mlruns" / "mlflow.db"
    code = "import sys, mlflow; mlflow.MlflowClient(sys.argv[1]).search_experiments()"
    assert _run([sys.executable, "-c", code, f"sqlite:///{db}"], limit=len(_migrated_store()) // 6).returncode
    assert db.exists()  # half-built by MLflow
    status, err = _tune(tmp_path, capsys, f"sqlite:///{db}")
    assert status == ExitStatus.SUCCESS, err
    assert "tracking is off" not in err and "tracking problem" not in err, err
    assert "was half-built" in err
    kept = [p.name for p in db.parent.iterdir() if p.name.startswith("mlflow.db.half-built-")]
    assert len(kept) == 1
    artifacts, params = _parent_artifacts(f"sqlite:///{db}")
    assert {"gb10.yaml", "command.txt"} <= artifacts and params.get("model")


def test_fs03_a_resume_logs_the_command_and_space_file_a_full_disk_kept_out(tmp_path, capsys, monkeypatch):
    """The first run's artifact writes fail with ENOSPC (a fault injected at the MLflow session's artifact
    boundary: the disk fills between the store's last row and the artifact file); the study carries on with one
    warning. The resume, with room again, logs the space file and the command the parent run lacks."""
    import errno

    from autotune.observers.mlflow._session import _Session
    from tests.conftest import store

    uri = store(tmp_path)

    def full(self, run_id, text, artifact_file):
        raise OSError(errno.ENOSPC, "No space left on device", artifact_file)

    with monkeypatch.context() as patch:
        patch.setattr(_Session, "log_text", full)
        status, err = _tune(tmp_path, capsys, uri)
    assert status == ExitStatus.SUCCESS and "MLflow tracking problem" in err, err
    artifacts, _ = _parent_artifacts(uri)
    assert not {"gb10.yaml", "command.txt"} & artifacts
    status, err = _tune(tmp_path, capsys, uri)
    assert status == ExitStatus.SUCCESS and "tracking problem" not in err, err
    artifacts, _ = _parent_artifacts(uri)
    assert {"gb10.yaml", "command.txt"} <= artifacts

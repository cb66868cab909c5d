"""Bad flags and broken stores: one line naming the flag and the fix, a non-zero exit, before any engine starts."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import optuna
import pytest

from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus

SIM = ["--space", "search_spaces/gb10.yaml", "--engine", "sim", "--trials", "2", "--no-verify", "--quiet"]


def _run(argv: list[str], capsys) -> tuple[ExitStatus, str, str]:
    out = io.StringIO()
    status = raw_main(argv, out=out)
    return status, out.getvalue(), capsys.readouterr().err


def _tune(tmp_path: Path, capsys, *extra: str, mlflow: bool = False) -> tuple[ExitStatus, str, str]:
    argv = ["tune", *SIM, "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir", str(tmp_path / "w"),
            "--study", "s", *extra]
    if not mlflow:
        argv.append("--no-mlflow")
    return _run(argv, capsys)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _no_study(tmp_path: Path) -> bool:
    db = tmp_path / "optuna.db"
    return not db.exists() or not optuna.get_all_study_summaries(f"sqlite:///{db}")


def _made_study(tmp_path: Path, capsys) -> str:
    status, _, err = _tune(tmp_path, capsys)
    assert status == ExitStatus.SUCCESS, err
    return f"sqlite:///{tmp_path}/optuna.db"


# -- numeric flags ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, words", [
    (["--top-k", "0"], "--top-k must be >= 1"),
    (["--top-k", "-2"], "--top-k must be >= 1"),
    (["--seed", "-1"], "--seed must be between 0 and"),
    (["--seed", str(2**32)], "--seed must be between 0 and"),
    (["--budget-restarts", "0"], "--budget-restarts must be >= 1"),
    (["--budget-restarts", "-4"], "--budget-restarts must be >= 1"),
    (["--budget-minutes", "-5"], "--budget-minutes must be a positive number"),
    (["--budget-minutes", "0"], "--budget-minutes must be a positive number"),
    (["--budget-minutes", "nan"], "--budget-minutes must be a positive number"),
])
def test_bad_numeric_flags_are_one_line_before_anything_runs(tmp_path, capsys, flags, words):
    status, _, err = _tune(tmp_path, capsys, *flags)
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err)
    assert _no_study(tmp_path)


def test_a_budget_too_small_for_baseline_and_verification_is_refused(tmp_path, capsys):
    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--budget-restarts", "5",
            "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir", str(tmp_path / "w"), "--no-mlflow"]
    status, _, err = _run(argv, capsys)
    assert status == ExitStatus.BAD_INPUT and "--budget-restarts 5 cannot measure anything" in _one_line(err)
    # Two baselines (cold + 2, cold + 1), one search trial (cold + 1), verification (2 x 3).
    assert "at least --budget-restarts 13" in err and _no_study(tmp_path)


def test_top_k_verifies_exactly_k(tmp_path, capsys):
    # --verify-rounds 0: the fixed design, so each verified configuration has exactly --verify-restarts restarts
    # (sequential rounds would add the winner's and the baseline's while the interval straddles 1).
    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--trials", "6", "--top-k", "1",
            "--verify-restarts", "2", "--verify-rounds", "0", "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir",
            str(tmp_path / "w"), "--study", "k", "--no-mlflow", "--quiet"]
    status, _, err = _run(argv, capsys)
    assert status == ExitStatus.SUCCESS, err
    from autotune.store import ledger

    stored = ledger.load("k", f"sqlite:///{tmp_path}/optuna.db")
    candidates = stored.verify_candidates()
    # One challenger and the baseline; with no restart budget a runner-up joins the first round only.
    assert candidates is not None and [c.role for c in candidates if not c.runner_up] == ["candidate", "baseline"]
    assert sum(c.runner_up for c in candidates) <= 1
    went_on = [e for e in stored.verification().entries if e.candidate.role == "candidate" and not e.dropped]
    assert len(went_on) == 1 and len(went_on[0].summary.values) == 2


@pytest.mark.parametrize("item, words", [
    ("num_speculative_tokens=99", "num_speculative_tokens 99 is outside the space"),
    ("num_speculative_tokens=-1", "num_speculative_tokens -1 is outside the space"),
    ("num_speculative_tokens=two", "num_speculative_tokens 'two' is outside the space"),
    ("cudagraph_mode=TURBO", "cudagraph_mode 'TURBO' is not in the space"),
    ("cudagraph_mode=FULL,capture_sizes=huge", "capture_sizes has no choice 'huge'"),
    ("num_speculative_tokens=3,draft=eagle9", "drafts has no choice 'eagle9'"),
])
def test_enqueue_outside_the_space_is_refused(tmp_path, capsys, item, words):
    status, _, err = _tune(tmp_path, capsys, "--enqueue", item)
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err) and "--enqueue" in err
    assert _no_study(tmp_path)


# -- storage ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url, words", [
    ("mlruns/optuna.db", "not a database URL"),
    ("sqlite:/optuna.db", "three slashes"),
    ("nosuchdialect://host/db", "not a database URL Optuna can open"),
    ("postgresql://user@127.0.0.1:1/optuna", "--storage postgresql://user@127.0.0.1:1/optuna"),
])
def test_bad_storage_urls_are_one_line(tmp_path, capsys, url, words):
    argv = ["tune", *SIM, "--storage", url, "--workdir", str(tmp_path / "w"), "--no-mlflow"]
    status, _, err = _run(argv, capsys)
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err)


def test_a_storage_password_is_not_printed(tmp_path, capsys):
    argv = ["tune", *SIM, "--storage", "postgresql://bob:hunter2@127.0.0.1:1/optuna", "--no-mlflow",
            "--workdir", str(tmp_path / "w")]
    status, _, err = _run(argv, capsys)
    assert status == ExitStatus.BAD_INPUT and "hunter2" not in err and "bob:***@" in err


def test_a_corrupt_store_is_one_line_for_report_export_and_tune(tmp_path, capsys):
    url = _made_study(tmp_path, capsys)
    db = tmp_path / "optuna.db"
    with open(db, "r+b") as fh:
        fh.truncate(db.stat().st_size // 3)
    for argv in (["report", "--storage", url], ["export", "--storage", url], ["report", "--storage", url, "--json"]):
        status, _, err = _run(argv, capsys)
        assert status == ExitStatus.BAD_INPUT and "not a usable SQLite database" in _one_line(err)
    status, _, err = _tune(tmp_path, capsys)
    assert status == ExitStatus.BAD_INPUT and "not a usable SQLite database" in _one_line(err)


def test_a_file_that_is_not_a_database_is_one_line(tmp_path, capsys):
    (tmp_path / "notes.db").write_text("shopping list\n" * 100)
    status, _, err = _run(["report", "--storage", f"sqlite:///{tmp_path}/notes.db"], capsys)
    assert status == ExitStatus.BAD_INPUT and "not a usable SQLite database" in _one_line(err)
    assert (tmp_path / "notes.db").read_text().startswith("shopping list")


def test_a_store_whose_directory_cannot_be_created_is_one_line(tmp_path, capsys):
    (tmp_path / "mlruns").write_text("a file where the store's directory should be")
    argv = ["tune", *SIM, "--storage", f"sqlite:///{tmp_path}/mlruns/optuna.db", "--no-mlflow",
            "--workdir", str(tmp_path / "w")]
    status, _, err = _run(argv, capsys)
    assert status == ExitStatus.BAD_INPUT and "cannot create files in" in _one_line(err)


def test_report_does_not_create_a_store(tmp_path, capsys):
    status, _, err = _run(["report", "--storage", f"sqlite:///{tmp_path}/none/optuna.db"], capsys)
    assert status == ExitStatus.BAD_INPUT and "make demo" in _one_line(err)
    assert not (tmp_path / "none").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits (CI runs unprivileged); "
                    "test_a_store_whose_directory_cannot_be_created_is_one_line covers the same check as root")
def test_a_read_only_store_is_one_line_for_tune(tmp_path, capsys):
    _made_study(tmp_path, capsys)
    os.chmod(tmp_path / "optuna.db", 0o444)
    os.chmod(tmp_path, 0o555)
    try:
        status, _, err = _tune(tmp_path, capsys)
    finally:
        os.chmod(tmp_path, 0o755)
    assert status == ExitStatus.BAD_INPUT and "--storage" in _one_line(err)


# -- outputs and MLflow ----------------------------------------------------------------------------------


def test_an_unwritable_json_path_fails_before_the_study_runs(tmp_path, capsys):
    status, _, err = _tune(tmp_path, capsys, "--json", str(tmp_path / "missing_dir" / "r.json"))
    assert status == ExitStatus.BAD_INPUT and "does not exist" in _one_line(err)
    assert _no_study(tmp_path)


def test_a_json_path_that_is_a_directory_fails_before_the_study_runs(tmp_path, capsys):
    status, _, err = _tune(tmp_path, capsys, "--json", str(tmp_path))
    assert status == ExitStatus.BAD_INPUT and "is a directory" in _one_line(err)
    assert _no_study(tmp_path)


def test_report_and_export_check_their_output_paths(tmp_path, capsys):
    url = _made_study(tmp_path, capsys)
    status, _, err = _run(["report", "--storage", url, "--json", str(tmp_path / "nope" / "r.json")], capsys)
    assert status == ExitStatus.BAD_INPUT and "--json" in _one_line(err)
    status, _, err = _run(["export", "--storage", url, "--out", str(tmp_path / "nope" / "w.yaml")], capsys)
    assert status == ExitStatus.BAD_INPUT and "--out" in _one_line(err)


def test_an_unwritable_mlflow_store_is_detected_up_front(tmp_path, capsys):
    (tmp_path / "mlruns").write_text("not a directory")
    started = time.monotonic()
    status, _, err = _tune(tmp_path, capsys, "--tracking-uri", f"sqlite:///{tmp_path}/mlruns/mlflow.db", mlflow=True)
    assert status == ExitStatus.BAD_INPUT and "--tracking-uri" in _one_line(err)
    assert time.monotonic() - started < 30 and _no_study(tmp_path)


def test_a_restart_budget_too_small_for_one_search_trial_is_refused_before_any_engine_start(tmp_path, capsys):
    # gb10: two baselines (cold + 2 and cold + 1), one trial (cold + 1), verification (2 x 3): 13 starts.
    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--budget-restarts", "12",
            "--storage", f"sqlite:///{tmp_path}/o.db", "--workdir", str(tmp_path / "w"), "--study", "b",
            "--no-mlflow", "--quiet"]
    status, _, err = _run(argv, capsys)
    assert status == ExitStatus.BAD_INPUT
    assert "--budget-restarts 12 cannot measure anything" in _one_line(err)
    assert "give at least --budget-restarts 13" in err and _no_study(tmp_path)


def test_a_corrupt_mlflow_store_is_detected_up_front(tmp_path, capsys):
    (tmp_path / "mlruns").mkdir()
    (tmp_path / "mlruns" / "mlflow.db").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    status, _, err = _tune(tmp_path, capsys, "--tracking-uri", f"sqlite:///{tmp_path}/mlruns/mlflow.db", mlflow=True)
    assert status == ExitStatus.BAD_INPUT and "not a usable SQLite database" in _one_line(err)


@pytest.mark.parametrize("budget, seed", [(13, 1), (30, 2)])
def test_a_restart_budget_is_never_overrun(tmp_path, capsys, budget, seed):
    import json

    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--budget-restarts", str(budget),
            "--seed", str(seed), "--storage", f"sqlite:///{tmp_path}/o.db", "--workdir", str(tmp_path / "w"),
            "--study", "b", "--no-mlflow", "--quiet", "--json", str(tmp_path / "r.json")]
    status, _, err = _run(argv, capsys)
    assert status == ExitStatus.SUCCESS, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert 0 < report["budget"]["restarts_used"] <= budget
    assert report["verification"] is not None  # the reserve held back for verification was there to spend


# -- output paths never overwrite what autotune reads or keeps (FS10) ---------------------------------------


def _space_with_dataset(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the sim space (tests must not risk the repository's file) reading a JSONL dataset."""
    import yaml

    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "hello"}\n{"prompt": "world"}\n')
    space = yaml.safe_load(Path("search_spaces/gb10.yaml").read_text())
    space["workload"] = {**space.get("workload", {}), "dataset": str(dataset)}
    path = tmp_path / "my-space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path, dataset


def _refused(status: ExitStatus, err: str, flag: str, what: str) -> None:
    line = _one_line(err)
    assert status == ExitStatus.BAD_INPUT, err
    assert line.startswith(f"autotune: error: {flag} ") and what in line and "write elsewhere" in line, line


def test_output_paths_never_overwrite_the_store_the_space_the_dataset_or_the_study_dir(tmp_path, capsys):
    url = _made_study(tmp_path, capsys)
    db = tmp_path / "optuna.db"
    before = [(s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url)]
    (tmp_path / "link.json").symlink_to(db)
    os.link(db, tmp_path / "hard.yaml")
    # report --json / export --out onto the storage: directly, through a symbolic link, through a hard link.
    for path in (db, tmp_path / "link.json", tmp_path / "hard.yaml"):
        _refused(*_run(["report", "--storage", url, "--json", str(path)], capsys)[::2], "--json", "Optuna storage")
    for path in (tmp_path / "hard.yaml", tmp_path / "sub" / ".." / "hard.yaml"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        _refused(*_run(["export", "--storage", url, "--out", str(path)], capsys)[::2], "--out", "Optuna storage")
    _refused(*_run(["report", "--storage", url, "--json", f"{db}-journal"], capsys)[::2], "--json", "Optuna storage")
    assert [(s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url)] == before

    # tune --json onto the space file, the dataset, the study's directory and the MLflow store.
    space, dataset = _space_with_dataset(tmp_path)
    space_text = space.read_text()
    mlflow_db = tmp_path / "mlflow.db"
    mlflow_db.write_bytes(b"")
    tracking = f"sqlite:///{mlflow_db}"
    base = ["tune", *SIM[2:], "--space", str(space), "--storage", f"sqlite:///{tmp_path}/fresh.db",
            "--workdir", str(tmp_path / "w"), "--study", "t", "--tracking-uri", tracking]
    for path, what in ((space, "space file"), (dataset, "dataset"), (tmp_path / "w" / "t" / "r.json", "study's"),
                       (mlflow_db, "MLflow store"), (tmp_path / "artifacts" / "r.json", "MLflow artifact")):
        _refused(*_run([*base, "--json", str(path)], capsys)[::2], "--json", what)
    assert space.read_text() == space_text and mlflow_db.read_bytes() == b""
    assert not (tmp_path / "fresh.db").exists()  # refused before the study was created

    # A path next to them is fine, and so is the study's report where it belongs.
    status, _, err = _run(["report", "--storage", url, "--json", str(tmp_path / "report.json")], capsys)
    assert status == ExitStatus.SUCCESS, err


# -- --fresh while another run holds the study (CC03, CC04) -------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_fresh_is_refused_while_another_run_holds_the_study_naming_it(tmp_path, capsys):
    import signal
    import socket
    import subprocess
    import sys

    import yaml

    from autotune.store._liveness import live_holders
    from tests.conftest import SMALL_SPACE

    pidfile = tmp_path / "engine.pid"
    engine = tmp_path / "slow.py"
    # The holder's engine blocks (a long measurement); any other run's answers at once, so a --fresh that is
    # wrongly let through finishes (and fails the test) rather than hanging.
    engine.write_text(f"""import json, os, sys, time
sys.stdin.read()
if os.environ.get("HOLD"):
    open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid()))
    os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r})
    time.sleep(600)
print(json.dumps({{"status": "ok", "passes_tok_s": [100.0, 100.0], "resolved": {{"cudagraph_mode": None}}}}))
""")
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**SMALL_SPACE, "engine": {"name": "cmd", "command": [sys.executable, str(engine)]}}))
    storage = f"sqlite:///{tmp_path}/optuna.db"
    argv = ["tune", "--space", str(space), "--study", "cc", "--storage", storage, "--workdir", str(tmp_path / "work"),
            "--trials", "2", "--no-verify", "--no-mlflow", "--quiet"]
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "HOLD": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    holder = subprocess.Popen([sys.executable, "-m", "autotune", *argv], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pidfile.exists(), holder.communicate(timeout=30)[1]
        before = [(t.number, t.state) for t in optuna.load_study(study_name="cc", storage=storage).get_trials()]
        status, _, err = _run([*argv, "--fresh"], capsys)
        line = _one_line(err)
        assert status == ExitStatus.BAD_INPUT, err
        assert f"pid {holder.pid} on {socket.gethostname()}" in line and "--fresh" in line and "--study" in line, line
        # Nothing was deleted: the holder's study, and its running trial, are as they were.
        after = [(t.number, t.state) for t in optuna.load_study(study_name="cc", storage=storage).get_trials()]
        assert after == before and any(state == optuna.trial.TrialState.RUNNING for _, state in after)
    finally:
        if holder.poll() is None:
            holder.send_signal(signal.SIGTERM)
            holder.communicate(timeout=60)
    assert holder.returncode == 128 + signal.SIGTERM
    assert live_holders(storage, "cc") == []  # once it is gone, --fresh may go ahead


def test_a_holder_on_another_machine_is_live_while_its_heartbeat_is_recent(tmp_path):
    from autotune.store._liveness import live_holders
    from autotune.store.ledger import Ledger, make_storage

    # Two-second heartbeats: the grace (8 s) must outlast a stall of this process on a loaded 2-core CI machine
    # between the heartbeat and the check (one-second heartbeats failed there once: no live holder found).
    HEARTBEAT_S = 2
    url = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="far", storage=make_storage(url, heartbeat_s=HEARTBEAT_S))
    trial = study.ask()
    Ledger(study, create=True).record_owner(trial, {"host": "gpu-node-7", "pid": 4242, "machine": "gpu-node-7/boot/1"})
    study._storage.record_heartbeat(trial._trial_id)
    (holder,) = live_holders(url, "far", heartbeat_s=HEARTBEAT_S)
    assert (holder.host, holder.pid, holder.holds) == ("gpu-node-7", 4242, "trial 0")
    time.sleep(4 * HEARTBEAT_S + 2.5)  # well past the grace period (4 heartbeats, whole seconds in SQLite)
    assert live_holders(url, "far", heartbeat_s=HEARTBEAT_S) == []

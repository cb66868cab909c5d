"""Issue 32, principles 4-7, held-out cases: ones the round's own tests did not name, found by probing the commands
(docs/reliability.md, "Round four", each principle's table)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus
from autotune.engines.sim import SimEngine
from tests.test_reliability_boundaries import _one_line, _run, _space, _tune


@pytest.fixture(scope="module")
def _stored(tmp_path_factory) -> Path:
    """A finished two-trial sim study with verification (study ``one``), once for the module."""
    root = tmp_path_factory.mktemp("stored")
    argv = [a for a in _tune(root, _space(root)) if a != "--no-verify"] + ["--verify-restarts", "2", "--top-k", "1"]
    assert raw_main(argv, out=io.StringIO()) == ExitStatus.SUCCESS
    return root


# -- principle 7: every output flag is checked before the work, "-" included -------------------------------------

def _output_commands(tmp: Path, stored: Path) -> dict[str, list[str]]:
    """Every command that writes a file named by a flag, as argv without that flag's value (it comes last)."""
    url = f"sqlite:///{stored}/optuna.db"
    return {
        "tune": _tune(tmp, _space(tmp), "--json"),
        "audit": ["audit", "--space", str(_space(tmp)), "--engine", "sim", "--workdir", str(tmp / "a"), "--json"],
        "recheck": ["recheck", "--storage", url, "--study", "one", "--workdir", str(stored / "w"), "--no-mlflow",
                    "--restarts", "2", "--json"],
        "export": ["export", "--storage", url, "--study", "one", "--out"],
    }


@pytest.mark.parametrize("command", ["tune", "audit", "recheck", "export"])
@pytest.mark.parametrize("where", ["dash", "missing-directory"])
def test_every_output_flag_is_checked_before_any_engine_start(tmp_path, capsys, monkeypatch, _stored, command, where):
    """``--json -`` (or ``--out -``) where stdout carries the command's own output, and a path in a directory that
    does not exist: one line naming the flag, exit 2, before any restart; no file named ``-`` is written."""
    monkeypatch.chdir(tmp_path)
    starts: list[object] = []
    real = SimEngine.run_restart
    monkeypatch.setattr(SimEngine, "run_restart", lambda self, *a, **kw: starts.append(a) or real(self, *a, **kw))
    value = "-" if where == "dash" else str(tmp_path / "no-such-dir" / "out.yaml")
    status, _, err = _run([*_output_commands(tmp_path, _stored)[command], value], capsys)
    line = _one_line(err)
    assert status == ExitStatus.BAD_INPUT, (status, line)
    assert ("--json" in line or "--out" in line) and (value in line or "-:" in line), line
    assert starts == [], f"{command} started the engine before it checked its output path"
    assert not (tmp_path / "-").exists()


def test_report_json_dash_still_writes_json_to_stdout(capsys, _stored):
    """``report --json -`` is the one output flag whose ``-`` means stdout (the report is its only output)."""
    import json

    status, out, err = _run(["report", "--storage", f"sqlite:///{_stored}/optuna.db", "--study", "one", "--json",
                             "-"], capsys)
    assert status == ExitStatus.SUCCESS and err == ""
    assert json.loads(out)["format"].startswith("autotune.report/")


# -- principle 6: the store tells the truth: a lost race to create a new store's tables is not a broken store ------

def test_two_commands_creating_one_new_store_at_once_is_not_a_broken_store(tmp_path, capsys, monkeypatch):
    """Two ``tune`` commands started at once on a new SQLite file race to create Optuna's tables; the loser's
    first open fails with ``UNIQUE constraint failed: alembic_version.version_num`` (measured: the second of two
    ``tune`` processes started together said ``--storage ...: cannot be used (...); check the URL, the server and
    permissions`` and exited 2). Every opener tries again, as the workers' opener always did."""
    import optuna
    import sqlalchemy.exc

    real, lost = optuna.get_all_study_summaries, []

    def racing(storage, *args, **kwargs):
        if not lost:  # the other command was creating the tables as this one read them
            lost.append(storage)
            raise sqlalchemy.exc.IntegrityError("INSERT INTO alembic_version", {}, Exception(
                "UNIQUE constraint failed: alembic_version.version_num"))
        return real(storage, *args, **kwargs)

    monkeypatch.setattr(optuna, "get_all_study_summaries", racing)
    status, out, err = _run(_tune(tmp_path, _space(tmp_path)), capsys)
    assert lost and status == ExitStatus.SUCCESS, err
    assert "cannot be used" not in err and "Search ended" in out, (out, err)

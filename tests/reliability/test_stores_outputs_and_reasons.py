"""Issue 32, principles 4-7, held-out cases: ones the round's own tests did not name, found by probing the commands
(docs/reliability.md, "Round four", each principle's table)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus
from autotune.engines.sim import SimEngine
from tests._helpers.cli import one_line, run_cli, space_file, tune_argv




# -- principle 7: every output flag is checked before the work, "-" included -------------------------------------

def _output_commands(tmp: Path, stored: Path) -> dict[str, list[str]]:
    """Every command that writes a file named by a flag, as argv without that flag's value (it comes last)."""
    url = f"sqlite:///{stored}/optuna.db"
    return {
        "tune": tune_argv(tmp, space_file(tmp), "--json"),
        "audit": ["audit", "--space", str(space_file(tmp)), "--engine", "sim", "--workdir", str(tmp / "a"), "--json"],
        "recheck": ["recheck", "--storage", url, "--study", "one", "--workdir", str(stored / "w"), "--no-mlflow",
                    "--restarts", "2", "--json"],
        "export": ["export", "--storage", url, "--study", "one", "--out"],
    }


@pytest.mark.parametrize("command", ["tune", "audit", "recheck", "export"])
@pytest.mark.parametrize("where", ["dash", "missing-directory"])
def test_every_output_flag_is_checked_before_any_engine_start(tmp_path, capsys, monkeypatch, stored_study, command,
                                                               where):
    """``--json -`` (or ``--out -``) where stdout carries the command's own output, and a path in a directory that
    does not exist: one line naming the flag, exit 2, before any restart; no file named ``-`` is written."""
    monkeypatch.chdir(tmp_path)
    starts: list[object] = []
    real = SimEngine.run_restart
    monkeypatch.setattr(SimEngine, "run_restart", lambda self, *a, **kw: starts.append(a) or real(self, *a, **kw))
    value = "-" if where == "dash" else str(tmp_path / "no-such-dir" / "out.yaml")
    status, _, err = run_cli([*_output_commands(tmp_path, stored_study)[command], value], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT, (status, line)
    assert ("--json" in line or "--out" in line) and (value in line or "-:" in line), line
    assert starts == [], f"{command} started the engine before it checked its output path"
    assert not (tmp_path / "-").exists()


def test_report_json_dash_still_writes_json_to_stdout(capsys, stored_study):
    """``report --json -`` is the one output flag whose ``-`` means stdout (the report is its only output)."""
    import json

    status, out, err = run_cli(["report", "--storage", f"sqlite:///{stored_study}/optuna.db", "--study", "one",
                             "--json", "-"], capsys)
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
    status, out, err = run_cli(tune_argv(tmp_path, space_file(tmp_path)), capsys)
    assert lost and status == ExitStatus.SUCCESS, err
    assert "cannot be used" not in err and "Search ended" in out, (out, err)


# -- principle 4: the output check applies to the winner, or the report says why not -----------------------------

#: A cmd engine whose speculating configurations are twice as fast and answer the output check per ``MODE``.
_OUTPUTS_ENGINE = '''
import json, sys
mode, req = sys.argv[1], json.load(sys.stdin)
k = req["config"]["params"].get("num_speculative_tokens") or 0
cc = req["config"].get("compilation_config") or {}
v = 100.0 + 50 * k
r = {"status": "ok", "passes_tok_s": [v, v], "startup_s": 1.0, "cold": False,
     "resolved": {"cudagraph_mode": cc.get("cudagraph_mode") or "FULL_AND_PIECEWISE",
                  "cudagraph_capture_sizes": cc.get("cudagraph_capture_sizes") or [1, 2]}}
oc = req.get("output_check")
if oc:
    tokens = {str(i): [7] * oc["tokens"] for i in oc["prompts"]}
    if k and mode == "silent-challenger":
        tokens = None
    if k and mode == "other-prompts":
        tokens = {"999": [7]}
    if not k and mode == "silent-baseline":
        tokens = None
    r["output_tokens"] = tokens
print(json.dumps(r))
'''


def _cmd_space(tmp_path: Path, mode: str) -> Path:
    import sys

    import yaml

    script = tmp_path / "engine.py"
    script.write_text(_OUTPUTS_ENGINE)
    space = {"name": "oc", "engine": {"name": "cmd", "cmd": {"command": [sys.executable, str(script), mode],
                                                             "memory_floor_gib": 0}},
             "engine_args": {"model": "org/model", "max_num_seqs": 4},
             "workload": {"num_prompts": 4, "input_len": 16, "output_len": 16, "concurrency": 4, "timed_passes": 2},
             "search": {"num_speculative_tokens": {"low": 0, "high": 2},
                        "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}}}}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


@pytest.mark.parametrize(("mode", "why"), [
    ("silent-challenger", "its restarts reported no outputs for the checked prompts"),
    ("other-prompts", "its outputs answered none of the prompts the baseline's did"),
    ("silent-baseline", "the baseline reported no outputs to compare with"),
    ("all-answer", None),
])
def test_a_winner_whose_outputs_were_never_compared_is_said_so(tmp_path, capsys, mode, why):
    """The engine checks outputs (some restart answered the request), but the winner's were never compared with the
    baseline's: before, the report said FASTER and nothing about outputs; now a WARNING line says why."""
    argv = ["tune", "--space", str(_cmd_space(tmp_path, mode)), "--trials", "3", "--no-mlflow", "--quiet",
            "--storage", f"sqlite:///{tmp_path}/o.db", "--workdir", str(tmp_path / "w"), "--study", "oc",
            "--verify-restarts", "2", "--verify-rounds", "0", "--enqueue", "num_speculative_tokens=2,draft=ngram"]
    status, out, err = run_cli(argv, capsys)
    assert status == ExitStatus.SUCCESS and "Verdict: FASTER" in out, (out, err)
    warned = [line for line in out.splitlines() if line.startswith("WARNING: the output check did not apply")]
    if why is None:
        assert warned == [], warned
    else:
        assert len(warned) == 1 and why in warned[0], out
        # The same in the report's JSON, and read back from it.
        import json

        status, out, _ = run_cli(["report", "--storage", f"sqlite:///{tmp_path}/o.db", "--study", "oc", "--json", "-"],
                              capsys)
        assert json.loads(out)["output_check"]["winner_unchecked"] == why


# -- principle 4: the reason names the measurement there was, not one that never ran ------------------------------

def test_a_baseline_the_floor_made_infeasible_in_the_search_is_not_called_unsuccessful_in_verification(tmp_path):
    """The engine defaults hit the memory floor twice in the search (infeasible by the floor rule, so verification
    runs none of their restarts). Measured on the gb10 space with ``gpu_memory_utilization: 0.90`` on the
    simulator: ``the baseline ... was not measured in verification: no restart succeeded`` with ``verification: 0
    starts``. The reason is now the search's, and says no verification restart ran."""
    from autotune.config.space import parse_space
    from autotune.machine import GUARD_PREFIX
    from autotune.report._build import build_report
    from autotune.study import run_study
    from tests.conftest import SMALL_SPACE, FakeEngine
    from tests._helpers.transient import TRIP, speed, study_options

    space = parse_space(SMALL_SPACE)
    base = space.baseline().key()
    engine = FakeEngine(speed, fail=lambda c: TRIP if c.key() == base else None)
    report = build_report(run_study(space, engine, study_options(tmp_path)))
    assert report.no_result is not None and "no restart succeeded" not in report.no_result, report.no_result
    assert "none of its restarts ran" in report.no_result and GUARD_PREFIX in report.no_result
    assert "infeasible" in report.no_result


# -- principle 6: a file autotune did not create is not written by reading it, nor taken over --------------------

def _foreign(tmp_path: Path, tables: bool) -> Path:
    import sqlite3

    db = tmp_path / ("app.db" if tables else "empty.db")
    if tables:
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE users (name TEXT)")
        con.commit()
        con.close()
    else:
        db.write_bytes(b"")
    return db


@pytest.mark.parametrize("tables", [True, False], ids=["another-programs-database", "empty-file"])
@pytest.mark.parametrize("command", ["report", "export"])
def test_a_read_command_never_writes_optunas_tables_into_a_file_without_them(tmp_path, capsys, tables, command):
    """Before: ``report --storage sqlite:///app.db`` said "no studies" after Optuna had written its schema into
    the file (its bytes changed). Now one line, exit 2, and the file's bytes as they were."""
    db = _foreign(tmp_path, tables)
    before = db.read_bytes()
    status, _, err = run_cli([command, "--storage", f"sqlite:///{db}"], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and "no studies" in line and "no Optuna tables" in line, line
    assert db.read_bytes() == before


def test_tune_does_not_add_its_tables_to_another_programs_database(tmp_path, capsys):
    db = _foreign(tmp_path, tables=True)
    before = db.read_bytes()
    status, _, err = run_cli(["tune", "--space", str(space_file(tmp_path)), "--engine", "sim", "--trials", "1",
                           "--no-verify", "--no-mlflow", "--quiet", "--storage", f"sqlite:///{db}", "--workdir",
                           str(tmp_path / "w")], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and "another program's SQLite database" in line and "users" in line, line
    assert db.read_bytes() == before


def test_tune_still_starts_a_new_store_in_an_empty_file(tmp_path, capsys):
    db = _foreign(tmp_path, tables=False)
    status, out, err = run_cli(["tune", "--space", str(space_file(tmp_path)), "--engine", "sim", "--trials", "1",
                             "--no-verify", "--no-mlflow", "--quiet", "--storage", f"sqlite:///{db}", "--workdir",
                             str(tmp_path / "w")], capsys)
    assert status == ExitStatus.SUCCESS, err


def test_a_baseline_that_lost_its_place_after_measured_restarts_is_not_called_unmeasured() -> None:
    # Two floor hits on two different verification seeds make the baseline infeasible after one restart ran: the
    # verdict is NONE (no baseline, no speedup), and the reason says how many of its restarts were measured.
    import types

    from autotune.report._counts import TrialCounts
    from autotune.report._no_result import no_result_reason

    def row(n: int, status: str, failure: str | None) -> types.SimpleNamespace:
        return types.SimpleNamespace(label="default-mode default-sizes no-spec", config=None, is_baseline=True,
                                     status=status, n=n, failure=failure, restarts=[object()] * (n + 2))

    why = "memory guard: a configuration that hits the floor twice is infeasible"
    lost = no_result_reason(TrialCounts(), [], None, row(1, "infeasible", why), verified=True)
    assert lost is not None and "lost its place in verification after 1 measured restart(s)" in lost
    assert why in lost and "not measured" not in lost
    never = no_result_reason(TrialCounts(), [], None, row(0, "infeasible", why), verified=True)
    assert never is not None and "was not measured in verification" in never

"""Studies written by older autotunes open, report and resume here: commit 6d3c415 (before the package move) and
commit 2650b8d (main before issue 32's typed boundary), both described in tests/data/README.md.

Stored dict shapes and the fingerprint must read back unchanged: a user upgrading autotune keeps their studies.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus
from autotune.store.ledger import load

DATA = Path(__file__).parents[1] / "data"
#: Each older autotune's unfinished study (the same command wrote both).
FIXTURES = [DATA / "study-6d3c415.db", DATA / "study-2650b8d.db"]
STUDY = "old-study"
#: The command that wrote the fixture, less its storage and workdir (tests/data/README.md).
TUNE = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--study", STUDY, "--trials", "5",
        "--top-k", "1", "--verify-restarts", "2", "--no-mlflow", "--quiet"]


@pytest.fixture(params=FIXTURES, ids=lambda p: p.stem)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    db = tmp_path / "old.db"
    shutil.copyfile(request.param, db)  # the fixture itself is never written
    return f"sqlite:///{db}"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[ExitStatus, str, str]:
    out = io.StringIO()
    status = raw_main(argv, out=out)
    return status, out.getvalue(), capsys.readouterr().err


def test_the_fixture_is_an_unfinished_study(storage: str) -> None:
    ledger = load(STUDY, storage)
    assert ledger.version == 1 and ledger.fingerprint() is not None
    assert ledger.meta().command[:2] == ("autotune", "tune") and ledger.meta().trials == 5
    assert ledger.finished_search_trials() < 5 and not ledger.has_verification()


def test_report_reads_the_old_study(storage: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(["report", "--study", STUDY, "--storage", storage], capsys)
    assert status == ExitStatus.SUCCESS, err
    assert f"Study {STUDY}" in out and "space gb10" in out and "engine sim" in out


def test_the_new_code_resumes_the_old_study_to_its_end(storage: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    before = load(STUDY, storage)
    stored_fingerprint, stored_meta = before.fingerprint(), before.meta()
    status, out, err = _run([*TUNE, "--storage", storage, "--workdir", str(tmp_path / "work")], capsys)
    assert status == ExitStatus.SUCCESS, err
    after = load(STUDY, storage)
    assert after.finished_search_trials() == 5 and after.has_verification()
    assert "Verdict:" in out
    # The resume passed the fingerprint check, and neither the fingerprint nor the metadata was rewritten.
    assert after.fingerprint() == stored_fingerprint and after.meta() == stored_meta
    status, out, err = _run(["report", "--study", STUDY, "--storage", storage], capsys)
    assert status == ExitStatus.SUCCESS and "Verdict:" in out, err


def test_the_fingerprint_check_still_guards_the_old_study(storage: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    text = Path("search_spaces/gb10.yaml").read_text()
    assert "output_len: 256" in text
    edited = tmp_path / "gb10-edited.yaml"
    edited.write_text(text.replace("output_len: 256", "output_len: 128"))  # another measurement
    argv = [*TUNE, "--storage", storage, "--workdir", str(tmp_path / "work")]
    argv[argv.index("search_spaces/gb10.yaml")] = str(edited)
    status, _, err = _run(argv, capsys)
    assert status == ExitStatus.BAD_INPUT and "space sections changed: workload" in err, err
    assert load(STUDY, storage).finished_search_trials() < 5  # refused before anything ran


def test_a_worker_joins_the_old_study_with_the_settings_it_stored(storage: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # No space file, no flags but where: the trial count, top-k and verification restarts come from the study.
    status, out, err = _run(["worker", "--study", STUDY, "--storage", storage, "--workdir", str(tmp_path / "work"),
                             "--no-mlflow", "--quiet"], capsys)
    assert status == ExitStatus.SUCCESS, err
    after = load(STUDY, storage)
    # --trials 5 and --verify-restarts 2, as the study was started (the defaults are 20 and 3).
    assert after.finished_search_trials() == 5 and after.has_verification()
    assert after.verification().restarts_per_config == 2


def _digest(storage: str) -> str:
    import hashlib

    return hashlib.sha256(Path(storage.removeprefix("sqlite:///")).read_bytes()).hexdigest()


def _set_optuna_schema(storage: str, revision: str, library: str) -> None:
    import sqlite3

    con = sqlite3.connect(storage.removeprefix("sqlite:///"))
    with con:
        con.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        con.execute("UPDATE version_info SET library_version = ?", (library,))
    con.close()


@pytest.mark.parametrize(("revision", "library", "fix"), [
    ("v99.0.0.a", "99.0.0", "upgrade optuna"),  # a newer Optuna wrote the tables
    ("v3.0.0.d", "3.0.0", "optuna storage upgrade"),  # an older one did
], ids=["newer", "older"])
def test_another_optunas_table_schema_is_one_line_and_the_file_is_untouched(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], revision: str, library: str,
        fix: str) -> None:
    # Optuna's own refusal was a RuntimeError traceback, after opening the storage (which may write to it).
    _set_optuna_schema(storage, revision, library)
    before = _digest(storage)
    for argv in (["report", "--study", STUDY, "--storage", storage],
                 [*TUNE, "--storage", storage, "--workdir", str(tmp_path / "work")]):
        status, _, err = _run(argv, capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        assert status == ExitStatus.BAD_INPUT and len(lines) == 1 and "Traceback" not in err, err
        assert revision in lines[0] and library in lines[0] and fix in lines[0], lines[0]
        assert _digest(storage) == before


def test_a_newer_autotune_schema_is_one_line_naming_the_upgrade_and_the_file_is_untouched(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import sqlite3

    con = sqlite3.connect(storage.removeprefix("sqlite:///"))
    with con:
        con.execute("UPDATE study_user_attributes SET value_json = ? WHERE key = 'autotune:schema_version'",
                    (json.dumps(99),))
    con.close()
    before = _digest(storage)
    for argv in (["report", "--study", STUDY, "--storage", storage],
                 [*TUNE, "--storage", storage, "--workdir", str(tmp_path / "work")]):
        status, _, err = _run(argv, capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        assert status == ExitStatus.BAD_INPUT and len(lines) == 1, err
        assert "schema version 99" in lines[0] and "upgrade autotune" in lines[0], lines[0]
        assert _digest(storage) == before

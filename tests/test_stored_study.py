"""A study written by an older autotune (commit 6d3c415, tests/data/README.md) opens, reports and resumes here.

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

FIXTURE = Path(__file__).parent / "data" / "study-6d3c415.db"
STUDY = "old-study"
#: The command that wrote the fixture, less its storage and workdir (tests/data/README.md).
TUNE = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--study", STUDY, "--trials", "5",
        "--top-k", "1", "--verify-restarts", "2", "--no-mlflow", "--quiet"]


@pytest.fixture
def storage(tmp_path: Path) -> str:
    db = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, db)  # the fixture itself is never written
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

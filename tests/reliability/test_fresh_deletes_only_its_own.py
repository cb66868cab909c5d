"""Data loss: study names are checked like file names and ``--fresh`` deletes only what the study created."""

from __future__ import annotations

import io
import json
from pathlib import Path

import optuna
import pytest

from autotune.cli._main import raw_main
from autotune.store.ledger import study_names
from autotune.core.exit_status import ExitStatus
from autotune.store.studydir import MARKER, MAX_NAME_BYTES, NotOwned, check_study_name, prepare_study_dir, remove_study_dir


def _tune(tmp_path: Path, capsys, *extra: str) -> tuple[ExitStatus, str]:
    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--trials", "2", "--no-verify",
            "--no-mlflow", "--quiet", "--storage", f"sqlite:///{tmp_path}/optuna.db", *extra]
    if "--workdir" not in extra:
        argv += ["--workdir", str(tmp_path / "mlruns" / "autotune")]
    status = raw_main(argv, out=io.StringIO())
    return status, capsys.readouterr().err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_fresh_with_an_absolute_study_name_deletes_nothing(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    status, err = _tune(tmp_path, capsys, "--study", str(victim), "--fresh")
    assert status == ExitStatus.BAD_INPUT
    assert "--study" in _one_error_line(err) and "path separator" in err
    assert (victim / "thesis.tex").read_text() == "years of work"


def test_fresh_with_study_dotdot_keeps_the_store(tmp_path, capsys):
    store = tmp_path / "mlruns"
    (store / "autotune").mkdir(parents=True)
    (store / "mlflow.db").write_text("every study's tracking")
    status, err = _tune(tmp_path, capsys, "--study", "..", "--fresh")
    assert status == ExitStatus.BAD_INPUT and "directory reference" in _one_error_line(err)
    assert (store / "mlflow.db").read_text() == "every study's tracking"


def test_fresh_in_a_models_directory_keeps_the_model(tmp_path, capsys):
    models = tmp_path / "models"
    (models / "Qwen3-8B").mkdir(parents=True)
    (models / "Qwen3-8B" / "model.safetensors").write_bytes(b"weights")
    status, err = _tune(tmp_path, capsys, "--workdir", str(models), "--study", "Qwen3-8B", "--fresh")
    assert status == ExitStatus.BAD_INPUT and "not created by autotune" in _one_error_line(err)
    assert (models / "Qwen3-8B" / "model.safetensors").read_bytes() == b"weights"
    # Nothing was deleted from the Optuna store either: the check runs before the study is opened.
    assert not (tmp_path / "optuna.db").exists() or not optuna.get_all_study_summaries(f"sqlite:///{tmp_path}/optuna.db")


def test_a_non_empty_foreign_directory_is_not_written_into_without_fresh(tmp_path, capsys):
    models = tmp_path / "models"
    (models / "Qwen3-8B").mkdir(parents=True)
    (models / "Qwen3-8B" / "config.json").write_text("{}")
    status, err = _tune(tmp_path, capsys, "--workdir", str(models), "--study", "Qwen3-8B")
    assert status == ExitStatus.BAD_INPUT and "not created by autotune" in err
    assert sorted(p.name for p in (models / "Qwen3-8B").iterdir()) == ["config.json"]


def test_a_300_character_study_name_is_one_line_and_leaves_no_empty_study(tmp_path, capsys):
    status, err = _tune(tmp_path, capsys, "--study", "s" * 300)
    assert status == ExitStatus.BAD_INPUT
    assert f"limit is {MAX_NAME_BYTES}" in _one_error_line(err)
    db = tmp_path / "optuna.db"
    assert not db.exists() or not optuna.get_all_study_summaries(f"sqlite:///{db}")


def test_fresh_empties_only_the_directory_the_study_created(tmp_path, capsys):
    work = tmp_path / "mlruns" / "autotune"
    status, _ = _tune(tmp_path, capsys, "--study", "mine")
    assert status == ExitStatus.SUCCESS
    marker = json.loads((work / "mine" / MARKER).read_text())
    assert marker["study"] == "mine"
    assert any((work / "mine" / "sim-compile-cache").iterdir())  # the sim's compile cache lives there
    (work / "neighbour").mkdir()
    (work / "neighbour" / "keep.txt").write_text("another study's file")
    status, _ = _tune(tmp_path, capsys, "--study", "mine", "--fresh")
    assert status == ExitStatus.SUCCESS
    assert (work / "neighbour" / "keep.txt").exists()
    summaries = optuna.get_all_study_summaries(f"sqlite:///{tmp_path}/optuna.db")
    assert [s.n_trials for s in summaries if s.study_name == "mine"] == [2]  # started over, not resumed


def test_a_study_directory_that_links_outside_the_workdir_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.bin").write_bytes(b"x")
    work = tmp_path / "work"
    work.mkdir()
    (work / "linked").symlink_to(outside)
    with pytest.raises(NotOwned, match="outside --workdir"):
        prepare_study_dir(work, "linked", fresh=True)
    assert (outside / "data.bin").exists()


def test_remove_study_dir_refuses_a_marker_for_another_study(tmp_path):
    prepare_study_dir(tmp_path, "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / MARKER).write_text((tmp_path / "a" / MARKER).read_text())  # copied, names study "a"
    (tmp_path / "b" / "file").write_text("x")
    with pytest.raises(NotOwned):
        remove_study_dir(tmp_path, "b")
    assert (tmp_path / "b" / "file").exists()
    assert remove_study_dir(tmp_path, "a") and not (tmp_path / "a").exists()


@pytest.mark.parametrize("name, problem", [
    ("", "empty"), (".", "directory reference"), ("..", "directory reference"), ("a/b", "path separator"),
    ("a\\b", "path separator"), ("a\x00b", "path separator"), ("tab\there", "control character"),
    ("-rf", "starts with '-'"), (" padded ", "whitespace"), ("é" * 65, "bytes long"),
])
def test_bad_study_names_are_named(name, problem):
    assert problem in (check_study_name(name) or "")


@pytest.mark.parametrize("name", ["demo-gb10", "h200-vllm-Llama-3.1-8B-Instruct", "a" * MAX_NAME_BYTES, "étude"])
def test_good_study_names_pass(name):
    assert check_study_name(name) is None


def test_the_default_study_name_of_a_long_model_path_is_valid(tmp_path, capsys):
    status, _ = _tune(tmp_path, capsys, "--model", "org/" + "m" * 300)
    assert status == ExitStatus.SUCCESS
    # (the ledger lists studies without their hidden companion claims study)
    (name,) = study_names(f"sqlite:///{tmp_path}/optuna.db")
    assert check_study_name(name) is None

"""Resuming: a study resumed with another model, engine or space stops with one line instead of mixing them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.store import ledger as _ledger
from autotune.core.exit_status import ExitStatus
from tests._helpers.cli import tune_status


@pytest.fixture(autouse=True)
def _token(monkeypatch):
    """The spaces reference their credential (issue 44: a literal is refused); the environment holds it."""
    monkeypatch.setenv("AT_RESUME_TOKEN", "hf_first_token_value")


def _space(tmp_path: Path, token: str = "${AT_RESUME_TOKEN}", **search_changes) -> Path:
    space = yaml.safe_load(Path("search_spaces/gb10.yaml").read_text())
    space["search"].update(search_changes)
    space["engine_args"]["hf_token"] = token
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def _trials(tmp_path: Path) -> int:
    return len(_ledger.load("one", f"sqlite:///{tmp_path}/optuna.db").study.trials)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_resume_with_another_model_stops_naming_it(tmp_path, capsys):
    space = _space(tmp_path)
    assert tune_status(tmp_path, capsys, space)[0] == ExitStatus.SUCCESS
    before = _trials(tmp_path)
    status, err = tune_status(tmp_path, capsys, space, "--model", "Qwen/Qwen3-8B", trials=4)
    line = _one_line(err)
    assert status == ExitStatus.BAD_INPUT
    assert "model 'Qwen/Qwen3-30B-A3B' -> 'Qwen/Qwen3-8B'" in line and "--study NEW-NAME" in line
    assert _trials(tmp_path) == before  # nothing ran on the other model


def test_resume_with_another_engine_profile_stops_naming_it(tmp_path, capsys):
    space = _space(tmp_path)
    assert tune_status(tmp_path, capsys, space)[0] == ExitStatus.SUCCESS
    status, err = tune_status(tmp_path, capsys, space, "--engine-opt", "profile=h200", trials=4)
    assert status == ExitStatus.BAD_INPUT and "engine" in _one_line(err) and "H200" in err


def test_resume_with_an_edited_space_stops_naming_the_section_not_an_optuna_traceback(tmp_path, capsys):
    assert tune_status(tmp_path, capsys, _space(tmp_path))[0] == ExitStatus.SUCCESS
    edited = _space(tmp_path, capture_sizes={"tiny": [1, 2, 4, 8], "other": [2, 4]})
    status, err = tune_status(tmp_path, capsys, edited, trials=6)
    line = _one_line(err)
    assert status == ExitStatus.BAD_INPUT and "search.capture_sizes" in line
    assert "dynamic value space" not in err


def test_resume_with_the_same_setup_continues(tmp_path, capsys):
    space = _space(tmp_path)
    assert tune_status(tmp_path, capsys, space)[0] == ExitStatus.SUCCESS
    status, err = tune_status(tmp_path, capsys, space, trials=3)
    assert status == ExitStatus.SUCCESS, err
    assert _ledger.load("one", f"sqlite:///{tmp_path}/optuna.db").finished_search_trials() == 3


def test_a_rotated_credential_is_not_another_experiment(tmp_path, capsys, monkeypatch):
    assert tune_status(tmp_path, capsys, _space(tmp_path))[0] == ExitStatus.SUCCESS
    monkeypatch.setenv("AT_RESUME_TOKEN", "hf_rotated_token_value")  # the same reference, a new value
    status, err = tune_status(tmp_path, capsys, _space(tmp_path), trials=3)
    assert status == ExitStatus.SUCCESS, err


def test_fresh_starts_over_with_the_new_setup(tmp_path, capsys):
    space = _space(tmp_path)
    assert tune_status(tmp_path, capsys, space)[0] == ExitStatus.SUCCESS
    status, err = tune_status(tmp_path, capsys, space, "--model", "Qwen/Qwen3-8B", "--fresh")
    assert status == ExitStatus.SUCCESS, err
    fp = _ledger.load("one", f"sqlite:///{tmp_path}/optuna.db").fingerprint()
    assert fp is not None and fp.model == "Qwen/Qwen3-8B"

"""The command line run in-process, as the reliability tests drive it: a small simulated space file, ``tune``'s
argv, one run's status, output and error, and the one error line a refusal must be."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import yaml

from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus

#: A small simulated space every case edits.
SIM_SPACE = {
    "name": "b",
    "engine": {"name": "sim", "sim": {"profile": "h200", "model_profile": "dense"}},
    "engine_args": {"model": "sim/dense-1b", "max_model_len": 4096},
    "workload": {"num_prompts": 8, "input_len": 64, "output_len": 64, "concurrency": 4, "timed_passes": 2},
    "search": {"cudagraph_mode": ["NONE", "FULL_AND_PIECEWISE"]},
}


def space_file(tmp_path: Path, edit=None, name: str = "space.yaml") -> Path:
    """:data:`SIM_SPACE`, edited in place by ``edit``, written to ``tmp_path/name``."""
    raw = copy.deepcopy(SIM_SPACE)
    if edit is not None:
        edit(raw)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def one_line(err: str) -> str:
    """The one line ``err`` must be (no traceback)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def tune_argv(tmp_path: Path, space: Path | str, *extra: str, trials: int = 2) -> list[str]:
    """``tune``'s argv on ``space``: the simulator, ``trials`` trials, no verification, no MLflow, study ``one``."""
    return ["tune", "--space", str(space), "--engine", "sim", "--trials", str(trials), "--no-verify", "--no-mlflow",
            "--quiet", "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir", str(tmp_path / "w"),
            "--study", "one", *extra]


def run_cli(argv: list[str], capsys) -> tuple[ExitStatus, str, str]:
    """Run ``argv`` in-process: its status, its output and its error output."""
    out = io.StringIO()
    status = raw_main(argv, out=out)
    return status, out.getvalue(), capsys.readouterr().err


def tune_status(tmp_path: Path, capsys, space: Path, *extra: str, trials: int = 2) -> tuple[ExitStatus, str]:
    """Run ``tune`` on ``space`` (the simulator, no verification, no MLflow): its status and its error output."""
    status = raw_main(tune_argv(tmp_path, space, *extra, trials=trials), out=io.StringIO())
    return status, capsys.readouterr().err

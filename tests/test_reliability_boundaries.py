"""Issue 32, round four: every input is checked at its boundary, the same way in every command.

Principles tested here (docs/reliability.md, "Round four (issue 32): input boundaries"):

1. One typed boundary per input, used by every command: the space file (YAML, its keys and types, its engine
   sections), the dataset, the stored attributes; bad input is one line naming the file or field and the fix.
2. Numbers are checked before they are believed: finite and plausible, sizes bounded at load, YAML aliases bounded.
6. The store tells the truth: locked is not corrupt, a wrong stored type is one line naming the key and the trial.
7. Output paths are checked before the work; ``report | head`` is not an error.
"""

from __future__ import annotations

import copy
import io
import os
import time
from pathlib import Path

import pytest
import yaml

from autotune.cli._main import raw_main
from autotune.config.space import SpaceError, load_space
from autotune.core.exit_status import ExitStatus

#: A small simulated space every case edits.
SPACE = {
    "name": "b",
    "engine": {"name": "sim", "sim": {"profile": "h200", "model_profile": "dense"}},
    "engine_args": {"model": "sim/dense-1b", "max_model_len": 4096},
    "workload": {"num_prompts": 8, "input_len": 64, "output_len": 64, "concurrency": 4, "timed_passes": 2},
    "search": {"cudagraph_mode": ["NONE", "FULL_AND_PIECEWISE"]},
}


def _space(tmp_path: Path, edit=None, name: str = "space.yaml") -> Path:
    raw = copy.deepcopy(SPACE)
    if edit is not None:
        edit(raw)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _tune(tmp_path: Path, space: Path | str, *extra: str) -> list[str]:
    return ["tune", "--space", str(space), "--engine", "sim", "--trials", "2", "--no-verify", "--no-mlflow",
            "--quiet", "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir", str(tmp_path / "w"),
            "--study", "one", *extra]


#: Every command that reads a space file, as argv for a space path (``schema`` reads none).
def _commands(tmp_path: Path) -> dict[str, object]:
    return {
        "tune": lambda s: _tune(tmp_path, s),
        "doctor": lambda s: ["doctor", "--space", str(s)],
        "audit": lambda s: ["audit", "--space", str(s), "--engine", "sim", "--workdir", str(tmp_path / "a")],
    }


def _run(argv: list[str], capsys) -> tuple[ExitStatus, str, str]:
    out = io.StringIO()
    status = raw_main(argv, out=out)
    return status, out.getvalue(), capsys.readouterr().err


# -- principle 1 and 2: the space file as YAML ------------------------------------------------------------------

#: A "billion laughs" file: ten levels of ten aliases each, under a free-form section (vLLM's own arguments).
_BOMB = ("name: bomb\nworkload: {num_prompts: 8, input_len: 64, output_len: 64, concurrency: 4}\n"
         "search: {cudagraph_mode: [NONE]}\nengine: {name: sim}\nengine_args:\n  model: sim/dense-1b\n"
         "  a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
             f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(9)))


def test_a_yaml_alias_bomb_is_refused_at_once_in_every_command(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(_BOMB)
    assert len(_BOMB) < 2048  # a 2 KB file that expands to 10**10 items
    for name, argv in _commands(tmp_path).items():
        started = time.monotonic()
        status, _, err = _run(argv(path), capsys)
        assert time.monotonic() - started < 10, name
        line = _one_line(err)
        assert status == ExitStatus.BAD_INPUT, (name, line)
        assert str(path) in line and "alias" in line and "fix:" in line, line


def test_a_recursive_yaml_alias_is_one_line(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("name: &n [*n]\n")
    with pytest.raises(SpaceError, match="alias"):
        load_space(path)


def test_a_few_ordinary_aliases_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False).replace(
        "search:\n", "search:\n  capture_sizes: {tiny: &s [1, 2, 4, 8], again: *s}\n"))
    assert [s.name for s in load_space(path).sizes] == ["default", "tiny", "again"]


@pytest.mark.parametrize("kind", ["directory", "unreadable", "not-utf8", "missing"])
def test_a_space_that_is_not_a_readable_text_file_is_one_line_in_every_command(tmp_path, capsys, kind):
    path = tmp_path / "space.yaml"
    if kind == "directory":
        path.mkdir()
    elif kind == "unreadable":
        _space(tmp_path)
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("running as root: every file is readable")
    elif kind == "not-utf8":
        path.write_bytes(b"name: caf\xe9\n" + yaml.safe_dump(SPACE).encode())
    for name, argv in _commands(tmp_path).items():
        status, _, err = _run(argv(path), capsys)
        line = _one_line(err)
        assert status == ExitStatus.BAD_INPUT, (name, line)
        assert line.startswith(f"autotune: error: {path}: ") and "fix:" in line, (name, line)


# -- principle 1: a boolean is not an integer --------------------------------------------------------------------


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d["engine_args"].update(max_num_seqs=True), "engine_args.max_num_seqs"),
    (lambda d: d["engine_args"].update({"max-num-batched-tokens": False}), "engine_args.max_num_batched_tokens"),
    (lambda d: d["search"].update(engine_args={"max_num_seqs": [4, True, 16]}), "search.engine_args.max_num_seqs"),
    (lambda d: d["search"].update(engine_args={"block_size": [16, 32.5]}), "search.engine_args.block_size"),
    (lambda d: d["search"].update(engine_args={"some_new_arg": [1, True]}), "search.engine_args.some_new_arg"),
    (lambda d: d["search"].update(engine_args={"max_num_seqs": {"low": 1.5, "high": 8}}),
     "search.engine_args.max_num_seqs"),
    (lambda d: d["workload"].update(num_prompts=True), "workload.num_prompts"),
    (lambda d: d["workload"].update(concurrency=[1, True]), "workload.concurrency"),
])
def test_a_boolean_or_fraction_where_an_integer_is_expected_is_refused_naming_the_field(tmp_path, edit, field):
    with pytest.raises(SpaceError) as info:
        load_space(_space(tmp_path, edit))
    message = str(info.value)
    assert "\n" not in message and f": {field}" in message and "; fix: " in message, message


def test_booleans_where_booleans_belong_still_load(tmp_path):
    space = load_space(_space(tmp_path, lambda d: (d["engine_args"].update(enforce_eager=True),
                                                   d["search"].update(engine_args={"enable_prefix_caching":
                                                                                   [True, False]}))))
    assert space.engine_args["enforce_eager"] is True

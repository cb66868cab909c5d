"""Issue 44, principle 3: every path is confined. What autotune writes stays inside ``--workdir`` and the store it
was given: a symbolic link inside a study's directory is not followed out (``core/confine.py``, and a link out is
refused before the study), a study name another tool stored is checked wherever it is read, and nothing is created
before the input that names it is accepted (docs/reliability.md, "Round five", "3. Paths")."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
import yaml

from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus
from tests._helpers.cli import one_line, run_cli, space_file, tune_argv

REPO = Path(__file__).resolve().parents[2]


# -- writes below a directory never follow a link out of it ------------------------------------------------------

def test_open_confined_refuses_a_link_anywhere_on_the_way(tmp_path):
    from autotune.core.confine import LinkRefused, confined_dir, links_out_of, open_confined

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "logs").symlink_to(outside)
    (root / "file.log").symlink_to(outside / "f.log")
    for path in ("logs/x.log", "file.log", str(outside / "y.log"), "a/../../z.log"):
        with pytest.raises(LinkRefused):
            open_confined(root, path)
    with pytest.raises(LinkRefused):
        confined_dir(root, "logs/sub")
    assert list(outside.iterdir()) == []
    with open_confined(root, "a/b/c.log") as fh:  # an ordinary path is made and written
        fh.write("ok")
    assert (root / "a" / "b" / "c.log").read_text() == "ok"
    assert sorted(p.name for p, _ in links_out_of(root)) == ["file.log", "logs"]


def _cmd_space(tmp: Path, command: list[str]) -> Path:
    path = tmp / "space.yaml"
    path.write_text(yaml.safe_dump({
        "name": "confined", "engine": {"name": "cmd", "cmd": {"command": command}},
        "engine_args": {"model": "sim/dense-1b", "max_model_len": 4096},
        "workload": {"num_prompts": 8, "input_len": 64, "output_len": 64, "concurrency": 4, "timed_passes": 2},
        "search": {"cudagraph_mode": ["NONE", "FULL_AND_PIECEWISE"]},
    }, sort_keys=False))
    return path


def _cmd_tune(tmp: Path, space: Path) -> list[str]:
    return ["tune", "--space", str(space), "--trials", "2", "--no-verify", "--no-mlflow", "--quiet", "--storage",
            f"sqlite:///{tmp}/optuna.db", "--workdir", str(tmp / "w"), "--study", "one"]


def test_a_link_out_of_the_study_directory_is_refused_before_the_study_writes_anything(tmp_path, capsys):
    """``<workdir>/<study>/logs -> /elsewhere`` (the issue's case): before, the restarts' logs were written there.
    Now one line naming the link, exit 2, nothing written outside, no store created, in tune, worker and recheck."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    study = tmp_path / "w" / "one"
    study.mkdir(parents=True)
    (study / ".autotune-study").write_text('{"study": "one", "created_by": "autotune"}\n')
    (study / "logs").symlink_to(elsewhere)
    space = _cmd_space(tmp_path, [sys.executable, str(REPO / "examples" / "cmd_engine_example.py")])
    status, _, err = run_cli(_cmd_tune(tmp_path, space), capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT, line
    assert str(study / "logs") in line and "symbolic link" in line and "remove the link" in line, line
    assert list(elsewhere.iterdir()) == []
    assert not (tmp_path / "optuna.db").exists(), "the store was created for a study that was refused"


def test_a_link_planted_while_the_study_runs_is_not_followed(tmp_path, capsys):
    """A wrapper that, at its first restart, replaces the study's ``logs`` directory with a link out of it: every
    later log is refused at the link (``O_NOFOLLOW`` below the study's directory), nothing lands outside, and the
    study still runs to its end (a log that cannot be written never fails a restart)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f"#!/bin/sh\nif [ ! -L \"$AUTOTUNE_CACHE_DIR/logs\" ]; then rm -rf \"$AUTOTUNE_CACHE_DIR/logs\"; "
                       f"ln -s {elsewhere} \"$AUTOTUNE_CACHE_DIR/logs\"; fi\n"
                       f"exec {sys.executable} {REPO / 'examples' / 'cmd_engine_example.py'} --profile h200\n")
    wrapper.chmod(0o755)
    status, _, err = run_cli(_cmd_tune(tmp_path, _cmd_space(tmp_path, [str(wrapper)])), capsys)
    assert status in (ExitStatus.SUCCESS, ExitStatus.NO_RESULT), err[-2000:]
    assert (tmp_path / "w" / "one" / "logs").is_symlink(), "the wrapper did plant its link"
    assert list(elsewhere.iterdir()) == [], "a log was written through the link, outside the workdir"


def test_the_sim_compile_cache_is_not_written_through_a_link(tmp_path):
    from autotune.core.records import EngineConfig, Workload
    from autotune.engines.sim import SimEngine

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "sim-compile-cache").symlink_to(elsewhere)
    engine = SimEngine(cache_dir=str(tmp_path / "study"))
    result = engine.run_restart(EngineConfig(engine_args={"model": "sim/dense-1b"}), Workload(num_prompts=4),
                                restart=0, seed=0)
    assert result.ok and result.cold
    assert list(elsewhere.iterdir()) == []


# -- study names read from the store are checked ------------------------------------------------------------------

def _renamed(src: Path, dst: Path, name: str) -> str:
    shutil.copy(src / "optuna.db", dst / "optuna.db")
    con = sqlite3.connect(dst / "optuna.db")
    with con:
        con.execute("UPDATE studies SET study_name = ? WHERE study_name = 'one'", (name,))
    con.close()
    return f"sqlite:///{dst}/optuna.db"


@pytest.mark.parametrize("name", ["../../x", "/etc/x", "one\x1b[2Jforged", ".."])
@pytest.mark.parametrize("command", ["report", "export", "recheck", "worker", "track", "report-latest"])
def test_a_study_name_another_tool_stored_is_one_line_in_every_command(tmp_path, capsys, monkeypatch, stored_study,
                                                                        name, command):
    """A stored study named ``../../x`` made ``recheck`` and ``worker`` traceback (ValueError from the study's
    directory); ``report`` printed an escape sequence in the name raw. Every command that reads a study refuses the
    name in one line (shown escaped), exit 2, and writes nothing."""
    monkeypatch.chdir(tmp_path)
    url = _renamed(stored_study, tmp_path, name)
    argv = {"report": ["report", "--storage", url, "--study", name],
            "report-latest": ["report", "--storage", url],
            "export": ["export", "--storage", url, "--study", name],
            "recheck": ["recheck", "--storage", url, "--study", name, "--workdir", str(tmp_path / "w"), "--no-mlflow"],
            "worker": ["worker", "--storage", url, "--study", name, "--workdir", str(tmp_path / "w"), "--no-mlflow"],
            "track": ["track", "--storage", url, "--study", name, "--tracking-uri", f"sqlite:///{tmp_path}/m.db"],
            }[command]
    status, out, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT, line
    assert "stored study name" in line and "\x1b" not in line + out, line
    assert not (tmp_path / "w").exists() and not (tmp_path / "m.db").exists()


# -- nothing is created before the input that names it is accepted ------------------------------------------------

@pytest.mark.parametrize("command", ["recheck", "worker", "report", "export", "track", "warm-start", "sub-recheck"])
def test_a_storage_path_that_does_not_exist_leaves_no_database_behind(tmp_path, capsys, monkeypatch, command):
    """``--storage sqlite:///typo.db`` for a command that must read an existing study: before, ``recheck`` and
    ``worker`` (and ``tune --warm-start``, which reads its sources from the store) left a new 114 KB database
    behind. Now one line, exit 2, and no file (nor directory) is made."""
    monkeypatch.chdir(tmp_path)
    url = "sqlite:///sub/typo.db" if command == "sub-recheck" else "sqlite:///typo.db"
    argv = {"recheck": ["recheck", "--storage", url, "--study", "one", "--no-mlflow", "--workdir", "w"],
            "sub-recheck": ["recheck", "--storage", url, "--study", "one", "--no-mlflow", "--workdir", "w"],
            "worker": ["worker", "--storage", url, "--study", "one", "--no-mlflow", "--workdir", "w"],
            "report": ["report", "--storage", url],
            "export": ["export", "--storage", url],
            "track": ["track", "--storage", url, "--study", "one", "--tracking-uri", "sqlite:///m.db"],
            "warm-start": [*tune_argv(tmp_path, space_file(tmp_path)), "--warm-start", "earlier"]}[command]
    if command == "warm-start":
        argv[argv.index("--storage") + 1] = url
    status, _, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT, line
    assert "typo.db" in line, line
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.name != "space.yaml")
    assert left == [], f"{command} left {left} behind"


@pytest.mark.parametrize("where", ["engine-opt", "space"])
def test_recheck_makes_nothing_for_inputs_it_refuses(tmp_path, capsys, stored_study, where):
    """``recheck --engine-opt noise=abc`` (or a missing ``--space``) refused the input only after making the study's
    directory (and said "error", exit 1, for a bad option): now exit 2 and no directory."""
    url = f"sqlite:///{tmp_path}/optuna.db"
    shutil.copy(stored_study / "optuna.db", tmp_path / "optuna.db")
    extra = ["--engine-opt", "noise=abc"] if where == "engine-opt" else ["--space", str(tmp_path / "nope.yaml")]
    status, _, err = run_cli(["recheck", "--storage", url, "--study", "one", "--workdir", str(tmp_path / "w"),
                           "--no-mlflow", *extra], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT, line
    assert not (tmp_path / "w").exists()


def test_tune_makes_no_store_for_a_bad_engine_option(tmp_path, capsys):
    """``tune --engine-opt noise=abc`` created the store (and its directory) before the engine refused the option,
    then exited 1: the option is bad input (exit 2), and nothing is made."""
    argv = tune_argv(tmp_path, space_file(tmp_path), "--engine-opt", "noise=abc")
    argv[argv.index("--storage") + 1] = f"sqlite:///{tmp_path}/new/optuna.db"
    status, _, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and "engine.sim.noise" in line, line
    assert not (tmp_path / "new").exists() and not (tmp_path / "w").exists()


def test_a_new_store_is_still_made_by_a_study_that_runs(tmp_path, capsys):
    argv = tune_argv(tmp_path, space_file(tmp_path))
    argv[argv.index("--storage") + 1] = f"sqlite:///{tmp_path}/new/dir/optuna.db"
    status, _, err = run_cli(argv, capsys)
    assert status in (ExitStatus.SUCCESS, ExitStatus.NO_RESULT), err[-1000:]
    assert (tmp_path / "new" / "dir" / "optuna.db").is_file()
    assert os.path.isdir(tmp_path / "w" / "one")


def test_a_relative_cache_directory_keeps_its_compile_markers_so_the_second_start_is_warm(tmp_path, monkeypatch):
    # A study's workdir given relative (the default mlruns/autotune): a confined write of root/name must land at
    # root/name, not root/root/name, or every start stays cold (the --gpus workers test caught it after the merge).
    from autotune.config.space import parse_space
    from autotune.engines.sim import SimEngine
    from tests.conftest import SMALL_SPACE

    monkeypatch.chdir(tmp_path)
    space = parse_space(SMALL_SPACE)
    engine = SimEngine(cache_dir="work/study")
    first = engine.run_restart(space.baseline(), space.workload, restart=0, seed=1)
    second = engine.run_restart(space.baseline(), space.workload, restart=1, seed=2)
    assert first.cold and not second.cold
    assert not (tmp_path / "work" / "study" / "work").exists()


# -- output flags: never through a link out of the directory they were named in ---------------------------------

_RECHECK_DB = Path(__file__).parents[1] / "data" / "study-recheck-h200-sim.db"


def _output_commands(root: Path) -> dict[str, tuple[list[str], str]]:
    """Every output flag of every command, as argv taking the output path last, and the flag."""
    store = ["--storage", f"sqlite:///{root}/study.db"]
    named = [*store, "--study", "h200-sim"]
    space = str(root / "space.yaml")
    return {
        "tune --json": (["tune", "--space", space, "--engine", "sim", "--trials", "2", "--no-verify", "--no-mlflow",
                         "--quiet", "--storage", f"sqlite:///{root}/new.db", "--workdir", str(root / "w"),
                         "--study", "one", "--json"], "--json"),
        "worker --json": (["worker", *named, "--workdir", str(root / "w"), "--no-mlflow", "--json"], "--json"),
        "report --json": (["report", *named, "--json"], "--json"),
        "recheck --json": (["recheck", *named, "--workdir", str(root / "w"), "--no-mlflow", "--json"], "--json"),
        "audit --json": (["audit", "--space", space, "--engine", "sim", "--workdir", str(root / "a"), "--json"],
                         "--json"),
        "export --out": (["export", *named, "--out"], "--out"),
        "bench --out": (["bench", "--seeds", "1", "--budgets", "4", "--no-mlflow", "--out"], "--out"),
        "bench-scaling --json": (["bench-scaling", "--seeds", "1", "--json"], "--json"),
    }


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A working directory holding a study and a space, with ``out -> ../elsewhere`` (a link out of it) and
    ``inside -> sub`` (a link that stays in it)."""
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copyfile(_RECHECK_DB, root / "study.db")
    shutil.copyfile(space_file(tmp_path), root / "space.yaml")
    (tmp_path / "elsewhere").mkdir()
    (root / "out").symlink_to("../elsewhere")
    (root / "sub").mkdir()
    (root / "inside").symlink_to("sub")
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("command", list(_output_commands(Path("/x"))))
def test_no_output_flag_writes_through_a_link_out_of_the_directory_it_was_named_in(project, capsys, command):
    """``report --json out/r.json`` with ``out -> ../elsewhere`` wrote outside the directory the user named it in
    (every output flag of every command did). Now each is one line naming the flag and the link, exit 2, before the
    command runs, and nothing is written through the link."""
    argv, flag = _output_commands(project)[command]
    target = "out/r.json" if flag == "--json" else ("out/bench" if command == "bench --out" else "out/w.yaml")
    before = {p.name for p in project.iterdir()}
    status, out, err = run_cli([*argv, target], capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and line.startswith(f"autotune: error: {flag} {target}:"), line
    assert "is a symbolic link (to ../elsewhere) leading out of" in line, line
    assert list((project.parent / "elsewhere").iterdir()) == []
    assert {p.name for p in project.iterdir()} == before  # no store, no workdir: refused before anything ran


def test_an_output_through_a_link_that_stays_inside_or_named_elsewhere_is_written(project, capsys, tmp_path):
    """The rule refuses only what leads out: a link inside the directory is followed, and a path named outside it
    (its directory given in full) is written where it says."""
    store = ["--storage", f"sqlite:///{project}/study.db", "--study", "h200-sim"]
    status, _, err = run_cli(["report", *store, "--json", "inside/r.json"], capsys)
    assert status == ExitStatus.SUCCESS, err
    assert (project / "sub" / "r.json").is_file()
    status, _, err = run_cli(["export", *store, "--out", str(tmp_path / "elsewhere" / "w.yaml")], capsys)
    assert status == ExitStatus.SUCCESS, err
    assert (tmp_path / "elsewhere" / "w.yaml").is_file()
    status, _, err = run_cli(["audit", "--space", "space.yaml", "--engine", "sim", "--workdir", "a", "--json",
                           "inside/a.json"], capsys)
    assert status == ExitStatus.SUCCESS, err
    assert (project / "sub" / "a.json").is_file()


def test_a_link_swapped_in_after_the_check_is_not_followed_by_the_write(project):
    """The write opens every directory below the root without following links (``open_confined``): a link put in
    place of a checked directory between the check and the write is refused, not followed."""
    from autotune.cli._common import UsageError, open_output

    (project / "later").mkdir()
    with open_output("later/r.json", "--json") as fh:  # checked and written: a real directory
        fh.write("{}")
    shutil.rmtree(project / "later")
    (project / "later").symlink_to(project.parent / "elsewhere")
    with pytest.raises(UsageError, match="--json later/r.json: .*later is a symbolic link"):
        open_output("later/r.json", "--json")
    assert list((project.parent / "elsewhere").iterdir()) == []

"""Issue 32's boundary, probed by a held-out checker: flags and files a new user might give, in every command.

Each case is one line naming the flag (or file) and the fix, exit 2, before any engine starts or any store is made,
and within seconds (a case that hung or ran out of memory before its fix is run with a deadline).
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import optuna
import pytest

from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus

SIM = ["--space", "search_spaces/gb10.yaml", "--engine", "sim", "--no-mlflow", "--quiet"]
#: Every case here is refused before any work: well under this, where the unbounded ones took minutes or all memory.
DEADLINE_S = 30


def _run(argv: list[str], capsys) -> tuple[ExitStatus, str, str]:
    out = io.StringIO()
    start = time.monotonic()
    status = raw_main(argv, out=out)
    assert time.monotonic() - start < DEADLINE_S
    return status, out.getvalue(), capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _tune(tmp_path: Path, capsys, *extra: str) -> tuple[ExitStatus, str, str]:
    argv = ["tune", *SIM, "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir", str(tmp_path / "w"),
            "--study", "s", "--trials", "2", *extra]
    return _run(argv, capsys)


def _no_study(tmp_path: Path) -> bool:
    db = tmp_path / "optuna.db"
    return not db.exists() or not optuna.get_all_study_summaries(f"sqlite:///{db}")


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> str:
    """A finished sim study's storage URL, for the commands that read one."""
    root = tmp_path_factory.mktemp("stored")
    url = f"sqlite:///{root}/optuna.db"
    status = raw_main(["tune", *SIM, "--storage", url, "--workdir", str(root / "w"), "--study", "base",
                       "--trials", "2", "--no-verify"], out=io.StringIO())
    assert status == ExitStatus.SUCCESS
    return url


# -- principle 2: every count a flag gives is finite and plausible, and 0 is a value ------------------------


@pytest.mark.parametrize("flags, words", [
    # Before: planned 3 x 10**9 verification starts in a list before anything ran (busy until killed).
    (["--top-k", "1000000000"], "--top-k must be between 1 and 100"),
    # Before: ran a million verification restarts a configuration.
    (["--verify-restarts", "1000000"], "--verify-restarts must be between 1 and 1000"),
    (["--trials", "1000000000000"], "--trials must be between 1 and 100000"),
    (["--restarts", "1000000", "--max-restarts", "1000000"], "--restarts must be between 1 and 1000"),
    (["--verify-rounds", "1000000000"], "--verify-rounds must be between 0 and 1000"),
    (["--budget-restarts", "100000000000000"], "--budget-restarts must be between 1 and 1000000"),
    (["--budget-minutes", "1e300"], "at most 525600 (a year)"),
    (["--heartbeat", "1000000000"], "--heartbeat must be between 1 and 86400"),
    # Before: 0 was read as "unset" and the default taken, exit 0.
    (["--verify-restarts", "0"], "--verify-restarts must be >= 1, got 0"),
    (["--min-effect", "0"], "--min-effect must be a speedup above 1"),
    (["--power", "0"], "--power must be at least 0.5"),
    # Before: --gpus-per-trial without --gpus was dropped in silence; -1 or a typo hid every GPU from the worker.
    (["--gpus-per-trial", "0"], "--gpus-per-trial must be >= 1"),
    (["--gpus-per-trial", "2"], "--gpus-per-trial 2 splits the GPUs --gpus lists: add --gpus LIST"),
    (["--gpus", "-1"], "'-1' is not a GPU index or UUID"),
    (["--gpus", "0,gpu1"], "'gpu1' is not a GPU index or UUID"),
], ids=["top-k-huge", "verify-restarts-huge", "trials-huge", "restarts-huge", "verify-rounds-huge",
        "budget-restarts-huge", "budget-minutes-huge", "heartbeat-huge", "verify-restarts-0", "min-effect-0", "power-0",
        "gpus-per-trial-0", "gpus-per-trial-without-gpus", "gpus-minus-1", "gpus-typo"])
def test_a_count_flag_out_of_its_range_is_one_line_before_anything_runs(tmp_path, capsys, flags, words):
    status, _, err = _tune(tmp_path, capsys, *flags)
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err)
    assert _no_study(tmp_path)


@pytest.mark.parametrize("argv, words", [
    # Before: a million restarts a side (busy until killed); inf minutes accepted.
    (["--restarts", "1000000"], "--restarts must be between 2 and 1000"),
    (["--budget-minutes", "inf"], "--budget-minutes must be a positive number of minutes"),
], ids=["restarts-huge", "budget-minutes-inf"])
def test_recheck_counts_follow_the_same_rule(tmp_path, capsys, stored, argv, words):
    status, _, err = _run(["recheck", "--study", "base", "--storage", stored, "--no-mlflow",
                           "--workdir", str(tmp_path / "w"), *argv], capsys)
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err)


def test_worker_takes_the_same_gpu_and_heartbeat_rules(tmp_path, capsys, stored):
    for argv, words in ((["--gpus-per-trial", "0"], "--gpus-per-trial must be >= 1"),
                        (["--heartbeat", "1000000000"], "--heartbeat must be between 1 and 86400")):
        status, _, err = _run(["worker", "--study", "base", "--storage", stored, "--no-mlflow",
                               "--workdir", str(tmp_path / "w"), *argv], capsys)
        assert status == ExitStatus.BAD_INPUT and words in _one_line(err)


def test_a_huge_schema_indent_is_refused(capsys):
    # Before: gigabytes of spaces, killed for memory.
    status, out, err = _run(["schema", "--indent", "1000000000"], capsys)
    assert status == ExitStatus.BAD_INPUT and "--indent must be between 0 and 16" in _one_line(err) and not out


def test_plausible_counts_still_run(tmp_path, capsys):
    status, _, err = _tune(tmp_path, capsys, "--top-k", "1", "--verify-restarts", "2", "--verify-rounds", "0",
                           "--min-effect", "1.1", "--power", "0.9", "--heartbeat", "60")
    assert status == ExitStatus.SUCCESS, err


# -- principle 7: every command's --workdir, --json and --out are checked before it runs -------------------


def _audit(tmp_path: Path, *extra: str) -> list[str]:
    return ["audit", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--workdir", str(tmp_path / "w"),
            *extra]


@pytest.mark.parametrize("command", ["tune", "audit", "recheck", "worker"])
def test_a_workdir_that_is_a_file_is_one_line_in_every_command(tmp_path, capsys, stored, command):
    # Before: tune and worker ended in a NotADirectoryError traceback; the file was left as it was.
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    argv = {"tune": ["tune", *SIM, "--storage", f"sqlite:///{tmp_path}/optuna.db", "--study", "s"],
            "audit": _audit(tmp_path),
            "recheck": ["recheck", "--study", "base", "--storage", stored, "--no-mlflow"],
            "worker": ["worker", "--study", "base", "--storage", stored, "--no-mlflow"]}[command]
    for workdir, words in ((afile, "is a file, not a directory"), (afile / "sub", f"is inside {afile}, which is a file")):
        status, _, err = _run([*argv, "--workdir", str(workdir)], capsys)
        assert status == ExitStatus.BAD_INPUT and words in _one_line(err) and "--workdir" in err
    assert afile.read_text() == "mine\n"


@pytest.mark.parametrize("command", ["audit", "recheck", "bench-scaling"])
def test_a_json_path_in_a_missing_directory_is_refused_before_the_engine_starts(tmp_path, capsys, stored, command):
    # Before: audit started the engine, then failed on the write with a FileNotFoundError traceback; recheck and
    # bench-scaling ran their whole measurement first.
    target = tmp_path / "missing" / "out.json"
    argv = {"audit": _audit(tmp_path),
            "recheck": ["recheck", "--study", "base", "--storage", stored, "--no-mlflow", "--workdir",
                        str(tmp_path / "w")],
            "bench-scaling": ["bench-scaling", "--seeds", "1"]}[command]
    status, out, err = _run([*argv, "--json", str(target)], capsys)
    assert status == ExitStatus.BAD_INPUT and "directory" in _one_line(err) and "does not exist" in err
    assert not out and not (tmp_path / "w").exists()


# -- principles 1 and 3: every input file is a regular file, read to a bound -------------------------------


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", ["tune", "doctor", "audit"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
def test_a_space_that_is_a_fifo_a_device_or_huge_is_one_line_at_once(tmp_path, capsys, command, kind):
    # Before: a FIFO held every command in open() until killed; /dev/zero was read until the machine ran out of
    # memory (killed); a 20 MB file was parsed for 20 s, then called a space without an engine_args section.
    if kind == "huge":
        space = tmp_path / "huge.yaml"
        space.write_text("name: " + "x" * (17 * 1024 * 1024) + "\n")
    else:
        space = _fifo(tmp_path) if kind == "fifo" else Path("/dev/zero")
    argv = {"tune": ["tune", *SIM[2:], "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir",
                     str(tmp_path / "w")],
            "doctor": ["doctor"], "audit": ["audit", "--engine", "sim", "--workdir", str(tmp_path / "w")]}[command]
    status, _, err = _run([*argv, "--space", str(space)], capsys)
    words = {"fifo": "is a FIFO (named pipe), not a file", "dev-zero": "is a character device, not a file",
             "huge": "more than the 16 MiB such a file may have"}[kind]
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err) and str(space) in err
    assert _no_study(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_report_from_json_of_a_fifo_or_a_device_is_one_line(tmp_path, capsys, kind):
    # Before: /dev/zero read until killed for memory; a FIFO waited in open() for ever.
    path = _fifo(tmp_path) if kind == "fifo" else Path("/dev/zero")
    status, _, err = _run(["report", "--from-json", str(path)], capsys)
    assert status == ExitStatus.BAD_INPUT and "not a file" in _one_line(err) and str(path) in err


@pytest.mark.parametrize("fmt", ["jsonl", "sharegpt"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_dataset_that_is_a_fifo_or_a_device_is_named_as_such(tmp_path, capsys, fmt, kind):
    # Before: "file '/dev/zero' does not exist" (it does: it is no regular file).
    path = _fifo(tmp_path) if kind == "fifo" else Path("/dev/zero")
    space = tmp_path / "space.yaml"
    space.write_text(Path("search_spaces/gb10.yaml").read_text().replace(
        "workload:\n", f"workload:\n  dataset: {{path: {path}, format: {fmt}}}\n", 1))
    status, _, err = _tune(tmp_path, capsys, "--space", str(space), "--no-verify")
    assert status == ExitStatus.BAD_INPUT and "workload.dataset.path" in _one_line(err) and "not a file" in err


def test_a_dataset_row_longer_than_any_context_is_one_line(tmp_path, capsys):
    # Before: the 70 MB row was read whole and taken as a prompt.
    data = tmp_path / "giant.jsonl"
    data.write_text('{"prompt": "' + "x" * (65 * 1024 * 1024) + '"}\n')
    space = tmp_path / "space.yaml"
    space.write_text(Path("search_spaces/gb10.yaml").read_text().replace(
        "workload:\n", f"workload:\n  dataset: {{path: {data}, format: jsonl}}\n", 1))
    status, _, err = _tune(tmp_path, capsys, "--space", str(space), "--no-verify")
    assert status == ExitStatus.BAD_INPUT and f"{data}:1: the row is longer than" in _one_line(err)


@pytest.mark.parametrize("item, words", [
    ("num_speculative_tokens=1e300", "num_speculative_tokens='1e300': must be a whole number from 0 to 16"),
    ("K=99", "num_speculative_tokens=99: must be a whole number from 0 to 16"),
    ("K=-1", "num_speculative_tokens=-1: must be a whole number"),
    ("capture_sizes=[1,a]", "list whole numbers >= 1"),
], ids=["k-text", "k-99", "k-negative", "sizes-text"])
def test_audit_params_take_the_values_vllm_takes(tmp_path, capsys, item, words):
    # Before: a ValueError traceback from int() (k-text, sizes-text); K=99 and K=-1 ran the engine, exit 0.
    status, out, err = _run(_audit(tmp_path, "--params", item), capsys)
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err) and "--params" in err and not out


def test_a_flag_argparse_refuses_is_one_line_in_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: argparse printed the whole usage block (17 lines for `tune --heartbeat nan`) above its error line.
    from autotune.cli._main import SUBCOMMANDS, build_parser

    cases = [["tune", "--heartbeat", "nan"], ["tune", "--trials", "abc"], ["nosuch"], []]
    cases += [[command.name, "--no-such-flag"] for command in SUBCOMMANDS]
    for argv in cases:
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2, argv
        assert err.count("\n") == 1 and "error:" in err and "--help" in err, (argv, err)


_SPACE = """name: probe
engine_args: {model: m}
search:
  cudagraph_mode: [NONE, PIECEWISE]
workload: {num_prompts: 4, input_len: 8, output_len: 8, concurrency: 2}
"""


@pytest.mark.parametrize("command", ["tune", "doctor", "audit"])
@pytest.mark.parametrize(("old", "new", "words"), [
    # A misspelled section beside the missing one: before, "workload: section is missing" (the typo unnamed), and a
    # capitalised key was taken for a pydantic union tag ("top level: unknown key; fix: remove it").
    ("workload:", "Workload:",
     "Workload: unknown key; fix: use one of: name, description, engine, engine_args, workload"),
    ("workload:", "wörkload:", "wörkload: unknown key; fix: use one of: name, description, engine, engine_args"),
    ("search:\n", "search:\n  Drafts: {}\n",
     "search.Drafts: unknown key; fix: use one of: cudagraph_mode, capture_sizes"),
    ("search:\n", "search:\n  capture_sizes: {tiny: {Pattern: pow2, max: 8}}\n",
     "search.capture_sizes.tiny.Pattern: unknown key; fix: use one of: pattern, max"),
], ids=["capitalised-section", "non-ascii-section", "capitalised-search-key", "capitalised-pattern-key"])
def test_a_misspelled_key_is_named_in_every_command(tmp_path, capsys, command, old, new, words):
    space = tmp_path / "space.yaml"
    assert old in _SPACE
    space.write_text(_SPACE.replace(old, new, 1))
    argv = {"tune": ["tune", "--engine", "sim", "--no-mlflow", "--storage", f"sqlite:///{tmp_path}/optuna.db",
                     "--workdir", str(tmp_path / "w")],
            "doctor": ["doctor"], "audit": ["audit", "--engine", "sim", "--workdir", str(tmp_path / "w")]}[command]
    status, _, err = _run([*argv, "--space", str(space)], capsys)
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err), err
    assert _no_study(tmp_path)


@pytest.mark.parametrize(("url", "words"), [
    ("mysql://u:pw-secret-1@localhost/db", "its database driver 'MySQLdb' is not installed; install it"),
    # SQLAlchemy 2.1 reads postgresql:// as psycopg 3; autotune ships psycopg2.
    ("postgresql://u:pw-secret-1@localhost:5432/db",
     "its database driver 'psycopg' is not installed; psycopg2 is installed here: name it in the URL, "
     "postgresql+psycopg2://"),
], ids=["mysql", "postgresql-default-driver"])
def test_a_storage_url_without_its_driver_names_the_module_and_never_the_password(capsys, url, words):
    # Before: "its database driver 'Failed to import DB access module for the specified storage URL. Please install
    # appropriate one.' is not installed" - Optuna's sentence where the module's name belongs.
    import importlib.util

    pytest.importorskip("psycopg2")
    if importlib.util.find_spec("MySQLdb" if url.startswith("mysql") else "psycopg") is not None:
        pytest.skip("the driver is installed here")
    status, _, err = _run(["report", "--storage", url, "--study", "x"], capsys)
    assert status == ExitStatus.BAD_INPUT and words in _one_line(err)
    assert "pw-secret-1" not in err and "Failed to import" not in err

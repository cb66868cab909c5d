"""Secrets: a credential given to autotune is never stored or printed (MLflow, reports, exports, commands, engine
logs); it is written as a reference to the environment (``${HF_TOKEN}``), which the study stores and resolves only
when an engine starts (issue 44, principle 2)."""

from __future__ import annotations

import io
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.records import decode
from autotune.cli._main import raw_main
from autotune.core.redact import (REDACTED, forget_secrets, is_secret_key, redact, redact_command, redact_text,
                                  redact_uri)
from autotune.core.exit_status import ExitStatus
from tests.conftest import store

API_KEY = "sk-live-51Habcdefghijklmnopqrstuv"
HF_TOKEN = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234"
PASSWORD = "pw-Tr0ub4dor"


#: The variables the spaces below reference, and the environment that sets them.
SECRET_ENV = {"AT_TEST_API_KEY": API_KEY, "AT_TEST_HF_TOKEN": HF_TOKEN}


def _secret_space(tmp_path: Path) -> Path:
    space = yaml.safe_load(Path("search_spaces/gb10.yaml").read_text())
    space["engine"]["name"] = "sim"
    space["engine_args"].update({"api_key": "${AT_TEST_API_KEY}", "hf_token": "${AT_TEST_HF_TOKEN}"})
    path = tmp_path / "referencing-space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


@pytest.fixture(autouse=True)
def _fresh_memory():
    """Each test starts with no resolved value remembered (:func:`forget_secrets`): what it asserts about redaction
    holds by the rules and by its own resolutions, not by an earlier test's."""
    forget_secrets()
    yield
    forget_secrets()


def _files_containing(root: Path, *needles: str) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [f"{path}: {n[:6]}..." for n in needles if n.encode() in data]
    return hits


@pytest.fixture(scope="module")
def secret_study(tmp_path_factory):
    """One tracked study whose space holds two credentials, run through the command line."""
    tmp = tmp_path_factory.mktemp("secrets")
    uri = store(tmp)
    env = pytest.MonkeyPatch()
    for name, value in SECRET_ENV.items():
        env.setenv(name, value)
    out = io.StringIO()
    argv = ["tune", "--space", str(_secret_space(tmp)), "--trials", "4", "--top-k", "1", "--verify-restarts", "2",
            "--storage", f"sqlite:///{tmp}/optuna.db", "--workdir", str(tmp / "work"), "--study", "referenced",
            "--tracking-uri", uri, "--json", str(tmp / "report.json"), "--quiet"]
    old_argv = sys.argv
    sys.argv = ["autotune", *argv]  # what the console script sees: the command is recorded from it
    try:
        status = raw_main(argv, out=out)
    finally:
        sys.argv = old_argv
    assert status == ExitStatus.SUCCESS
    yield tmp, out.getvalue()
    env.undo()


def test_engine_arg_credentials_stay_out_of_mlflow(secret_study):
    tmp, _ = secret_study
    assert _files_containing(tmp / "mlruns", API_KEY, HF_TOKEN) == []
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp}/mlruns/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    # MLflow shows where each credential comes from, never its value.
    assert runs and all(run.data.params.get("hf_token") == "${AT_TEST_HF_TOKEN}" for run in runs
                        if "hf_token" in run.data.params)
    assert any(run.data.params.get("api_key") == "${AT_TEST_API_KEY}" for run in runs)


def test_engine_arg_credentials_stay_out_of_the_report_and_stdout(secret_study):
    tmp, stdout = secret_study
    text = (tmp / "report.json").read_text()
    assert API_KEY not in text and HF_TOKEN not in text and API_KEY not in stdout and HF_TOKEN not in stdout
    report = json.loads(text)
    assert report["winner"]["config"]["engine_args"]["api_key"] == "${AT_TEST_API_KEY}"
    status = raw_main(["report", "--storage", f"sqlite:///{tmp}/optuna.db", "--study", "referenced", "--json"],
                      out=(buf := io.StringIO()))
    assert status == ExitStatus.SUCCESS and API_KEY not in buf.getvalue() and HF_TOKEN not in buf.getvalue()


def test_export_writes_the_reference_never_the_value(secret_study, capsys, monkeypatch):
    tmp, _ = secret_study
    for fmt in ("vllm-yaml", "cli", "json"):
        out = io.StringIO()
        status = raw_main(["export", "--storage", f"sqlite:///{tmp}/optuna.db", "--study", "referenced",
                           "--format", fmt], out=out)
        err = capsys.readouterr().err
        assert status == ExitStatus.SUCCESS, err
        text = out.getvalue()
        assert API_KEY not in text and HF_TOKEN not in text and REDACTED not in text
        assert "${AT_TEST_HF_TOKEN}" in text and "${AT_TEST_API_KEY}" in text
        assert "${AT_TEST_HF_TOKEN}" in err and "fill them in" not in err
    # The command line's shell fills the reference in from its own environment (double quotes), nothing else.
    import subprocess

    cli = io.StringIO()
    raw_main(["export", "--storage", f"sqlite:///{tmp}/optuna.db", "--study", "referenced", "--format", "cli"], out=cli)
    assert '--hf-token "${AT_TEST_HF_TOKEN}"' in cli.getvalue()
    monkeypatch.setenv("AT_TEST_HF_TOKEN", "from-the-shell")
    script = cli.getvalue().replace("vllm serve", "printf '%s\\n'", 1)
    shown = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.split("\n")
    assert shown[shown.index("--hf-token") + 1] == "from-the-shell"


def test_the_recorded_command_hides_credentials(tmp_path, monkeypatch):
    from autotune.config.space import load_space
    from autotune.study import StudyOptions, run_study
    from autotune.observers.mlflow import MlflowTracker
    from tests.conftest import FakeEngine

    uri = store(tmp_path)
    command = ("autotune", "tune", "--storage", f"postgresql://bob:{PASSWORD}@db/optuna", "--tracking-uri",
               f"http://alice:{PASSWORD}@mlflow:5000", "--engine-opt", f"api_key={API_KEY}", "--hf-token", HF_TOKEN)
    options = StudyOptions(study_name="cmd", storage=f"sqlite:///{tmp_path}/o.db", workdir=str(tmp_path / "w"),
                           trials=2, verify=False, command=command)
    from autotune.report import build_report

    space, engine = load_space("search_spaces/gb10.yaml"), FakeEngine(lambda c: 100.0)
    tracker = MlflowTracker(tracking_uri=uri, stream=io.StringIO())
    ledger = run_study(space, engine, options, [tracker])
    tracker.on_report(build_report(ledger, engine=engine, space=space))  # the outcome, with its command, too
    recorded = list((tmp_path / "mlruns").rglob("command.txt"))
    assert recorded, "command.txt was not logged"
    text = recorded[0].read_text()
    assert "bob:***@db" in text and "alice:***@mlflow" in text
    assert _files_containing(tmp_path / "mlruns", PASSWORD, API_KEY, HF_TOKEN) == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tracking_uri_password_is_never_printed_or_stored(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    uri = f"http://user:{PASSWORD}@127.0.0.1:{_closed_port()}"
    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--trials", "2", "--no-verify",
            "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir", str(tmp_path / "w"), "--study", "uri",
            "--tracking-uri", uri, "--json", str(tmp_path / "r.json")]
    monkeypatch.setattr(sys, "argv", ["autotune", *argv])
    out = io.StringIO()
    status = raw_main(argv, out=out)
    err = capsys.readouterr().err
    assert status == ExitStatus.SUCCESS
    assert PASSWORD not in out.getvalue() and PASSWORD not in err and "View run" not in out.getvalue()
    assert "tracking is off" in err  # the server is down: said once, the study carries on
    assert PASSWORD not in (tmp_path / "r.json").read_text()
    assert PASSWORD.encode() not in (tmp_path / "optuna.db").read_bytes()


# -- the redaction rules themselves ----------------------------------------------------------------------


@pytest.mark.parametrize("key", ["api_key", "hf_token", "HF_TOKEN", "password", "db-password", "client_secret",
                                 "access-key", "auth", "authorization", "secret", "aws_secret_access_key"])
def test_credential_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["config_key", "num_speculative_tokens", "max_num_batched_tokens", "eos_token_id",
                                 "tokenizer", "kv_cache_dtype", "model", "key", "cache_key", "prompt_lookup_max"])
def test_ordinary_keys(key):
    assert not is_secret_key(key)


def test_redact_walks_mappings_and_keeps_unset_values_visible():
    data = {"engine_args": {"api_key": API_KEY, "hf_token": None, "model": "org/m"}, "config_key": "abc123",
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}
    out = redact(data)
    assert out["engine_args"] == {"api_key": REDACTED, "hf_token": None, "model": "org/m"}
    assert out["config_key"] == "abc123" and out["speculative_config"] == data["speculative_config"]
    assert data["engine_args"]["api_key"] == API_KEY  # a copy: the engine still gets its credential


@pytest.mark.parametrize("uri, shown", [
    (f"http://user:{PASSWORD}@127.0.0.1:5077", "http://user:***@127.0.0.1:5077"),
    (f"postgresql+psycopg2://bob:{PASSWORD}@db:5432/optuna", "postgresql+psycopg2://bob:***@db:5432/optuna"),
    ("sqlite:///mlruns/optuna.db", "sqlite:///mlruns/optuna.db"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
])
def test_uri_passwords(uri, shown):
    assert redact_uri(uri) == shown


def test_free_text_loses_pairs_flags_and_token_shapes():
    text = (f"non-default args: {{'model': 'org/m', 'hf_token': '{HF_TOKEN}', 'max_num_seqs': 4}}\n"
            f"engine_args: {{api_key: {API_KEY}}}\nHF_TOKEN={HF_TOKEN} serve --api-key {API_KEY}\n"
            f"401 for token {HF_TOKEN}\nmax_num_batched_tokens: 8192")
    out = redact_text(text)
    assert API_KEY not in out and HF_TOKEN not in out
    assert "'max_num_seqs': 4" in out and "max_num_batched_tokens: 8192" in out


def test_a_recorded_command_line():
    argv = ["autotune", "tune", "--tracking-uri", f"http://u:{PASSWORD}@h", "--hf-token", HF_TOKEN,
            f"--api-key={API_KEY}", "--engine-opt", f"hf_token={HF_TOKEN}", "--trials", "3"]
    out = redact_command(argv)
    assert out == ["autotune", "tune", "--tracking-uri", "http://u:***@h", "--hf-token", REDACTED,
                   f"--api-key={REDACTED}", "--engine-opt", f"hf_token={REDACTED}", "--trials", "3"]


def test_optuna_db_holds_no_credential_yet_every_engine_start_gets_it(secret_study):
    tmp, _ = secret_study
    data = (tmp / "optuna.db").read_bytes()
    assert API_KEY.encode() not in data and HF_TOKEN.encode() not in data


def test_verification_and_resume_run_with_the_real_credential(tmp_path, monkeypatch):
    from autotune.decisions.racing import RacingPolicy
    from autotune.config.space import load_space
    from autotune.study import StudyOptions, run_study
    from tests.conftest import FakeEngine

    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    space = load_space(_secret_space(tmp_path))
    engine = FakeEngine(lambda c: 100.0 + 10 * c.num_speculative_tokens,
                         fail=lambda c: c.engine_args.get("api_key") != API_KEY)
    options = StudyOptions(study_name="real", storage=f"sqlite:///{tmp_path}/o.db", workdir=str(tmp_path / "w"),
                           trials=4, policy=RacingPolicy(min_restarts=2, racing=False), top_k=2, verify_restarts=2)
    ledger = run_study(space, engine, options)
    verification = ledger.verification()
    assert verification is not None and all(e.summary.status == "ok" for e in verification.entries)
    assert all(r.status == "ok" for rec in ledger.trial_records() for r in rec.restarts)
    data = (tmp_path / "o.db").read_bytes()
    assert API_KEY.encode() not in data and HF_TOKEN.encode() not in data


@pytest.mark.parametrize("filler", ["x", "-a", "a.", ".-a", '"a', "a:", "http://a", "hf_"])
def test_a_ten_megabyte_line_is_redacted_whole(filler):
    # CMD07/CMD08: a cmd engine writing one long line to stderr. The run of filler defeats a pattern that retries
    # a long name at every character (that took minutes); how fast it is now lives in autotune.bench.redaction.
    run = filler * (5_000_000 // len(filler))
    line = (f"hf_token={HF_TOKEN} {run} --api-key {API_KEY} http://u:{PASSWORD}@h {run} "
            f"'password': '{PASSWORD}' {HF_TOKEN}")
    out = redact_text(line)
    assert len(line) > 10_000_000
    assert HF_TOKEN not in out and API_KEY not in out and PASSWORD not in out
    assert out.count(run) == 2 and out.count(REDACTED) == 4 and "http://u:***@h" in out
    assert out.startswith(f"hf_token={REDACTED} {run[:100]}")
    assert out.endswith(f"'password': '{REDACTED}' {REDACTED}")


# -- issue 44, principle 2: secrets are referenced, never stored ----------------------------------------------
# The cmd engine below (tests/secret_engine.py) accepts only the real credentials, and echoes what it is given in
# forms no redaction pattern knows: a run that passes a stored, redacted or unresolved value fails with 401, and
# a log that is not redacted by value shows the credential.

#: Credentials with no token shape, so that only their resolved values can hide them.
CMD_KEY = "AtKey-7f3a9c2e5b1d4a60"
CMD_LOGIN = "hub-login-Qx93kd8aZ"
CMD_ENV = {"AT_TEST_CMD_KEY": CMD_KEY, "AT_TEST_LOGIN": CMD_LOGIN,
           # what the engine itself accepts (its own configuration, as a server's)
           "SECRET_ENGINE_API_KEY": CMD_KEY, "SECRET_ENGINE_HF_TOKEN": CMD_LOGIN}


def _cmd_space(tmp: Path, command: Any = None, **engine_args: Any) -> Path:
    space = yaml.safe_load(Path("search_spaces/gb10.yaml").read_text())
    space["engine"] = {"name": "cmd", "cmd": {"command": command or [
        sys.executable, str(Path("tests/secret_engine.py").resolve()), "--api-key", "${AT_TEST_CMD_KEY}",
        "--profile", "gb10", "--model-profile", "moe"]}}
    space["engine_args"].update({"hf_token": "${AT_TEST_LOGIN}", **engine_args})
    path = tmp / "cmd-space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def _cli(argv: list[str], capsys: Any) -> tuple[ExitStatus, str, str]:
    out = io.StringIO()
    status = raw_main(argv, out=out)
    return status, out.getvalue(), capsys.readouterr().err


def _store_args(tmp: Path) -> list[str]:
    return ["--storage", f"sqlite:///{tmp}/optuna.db", "--workdir", str(tmp / "work")]


@pytest.fixture(scope="module")
def cmd_study(tmp_path_factory):
    """A tracked study on the cmd engine whose space references both credentials; the engine checks them."""
    tmp = tmp_path_factory.mktemp("cmdsecrets")
    uri = store(tmp)
    env = pytest.MonkeyPatch()
    for name, value in CMD_ENV.items():
        env.setenv(name, value)
    out = io.StringIO()
    status = raw_main(["tune", "--space", str(_cmd_space(tmp)), "--trials", "4", "--top-k", "1",
                       "--verify-restarts", "2", "--study", "keyed", *_store_args(tmp), "--tracking-uri", uri,
                       "--json", str(tmp / "report.json"), "--quiet"], out=out)
    assert status == ExitStatus.SUCCESS
    yield tmp, uri
    env.undo()


def _all_restarts_ok(ledger: Any) -> bool:
    restarts = [r for rec in ledger.trial_records() for r in rec.restarts]
    return bool(restarts) and all(r.ok for r in restarts)


def test_the_engine_runs_with_the_value_and_the_study_stores_the_reference(cmd_study):
    from autotune.store.ledger import load

    tmp, _ = cmd_study
    ledger = load("keyed", f"sqlite:///{tmp}/optuna.db")
    assert _all_restarts_ok(ledger)  # the engine refuses anything but the real credentials
    assert "${AT_TEST_LOGIN}" in ledger.space_yaml() and "${AT_TEST_CMD_KEY}" in ledger.space_yaml()
    assert "${AT_TEST_CMD_KEY}" in ledger.meta().engine_options["command"]
    assert ledger.meta().baseline.engine_args["hf_token"] == "${AT_TEST_LOGIN}"


def test_no_file_autotune_wrote_holds_a_credential(cmd_study):
    tmp, _ = cmd_study
    logs = list((tmp / "work").rglob("*.log"))
    assert logs, "the cmd engine kept no restart log"
    # The engine echoed both values on stdout and stderr: the logs show where they come from instead.
    text = logs[0].read_text()
    assert "key in use ${AT_TEST_CMD_KEY}" in text and "serving with ${AT_TEST_CMD_KEY} ${AT_TEST_LOGIN}" in text
    assert text.startswith("$ ") and "--api-key '${AT_TEST_CMD_KEY}'" in text.splitlines()[0]
    # Every file under the study's directory, the store, MLflow (params, artifacts) and the report.
    assert _files_containing(tmp, CMD_KEY, CMD_LOGIN) == []


def test_recheck_rebuilds_the_engine_from_the_stored_space_with_the_real_credential(cmd_study, capsys,
                                                                                     monkeypatch):
    from autotune.store.ledger import load

    tmp, uri = cmd_study
    for name, value in CMD_ENV.items():
        monkeypatch.setenv(name, value)
    status, out, err = _cli(["recheck", "--study", "keyed", *_store_args(tmp), "--restarts", "2",
                             "--tracking-uri", uri, "--json", str(tmp / "recheck.json")], capsys)
    assert status not in (ExitStatus.ERROR, ExitStatus.BAD_INPUT), err
    from autotune.decisions.recheck import RecheckRecord

    record = decode(RecheckRecord, load("keyed", f"sqlite:///{tmp}/optuna.db").rechecks()[-1])
    restarts = [r for e in record.verification.entries for r in e.restarts]
    assert restarts and all(r.ok for r in restarts), [r.error for r in restarts if not r.ok]
    assert CMD_KEY not in out + err and CMD_LOGIN not in out + err
    assert _files_containing(tmp, CMD_KEY, CMD_LOGIN) == []


def test_a_worker_runs_a_study_from_the_stored_space_with_the_real_credential(tmp_path, capsys, monkeypatch):
    from autotune.config.space import load_space
    from autotune.engines import make_engine
    from autotune.store.ledger import load
    from autotune.study import StudyOptions, prepare_study

    for name, value in CMD_ENV.items():
        monkeypatch.setenv(name, value)
    space = load_space(_cmd_space(tmp_path))
    # What `tune --gpus` does before its workers start: the study exists, nothing has run.
    options = StudyOptions(study_name="joined", storage=f"sqlite:///{tmp_path}/optuna.db",
                           workdir=str(tmp_path / "work"), trials=3, top_k=1, verify_restarts=2)
    engine = make_engine("cmd", **space.engine.options("cmd"))
    prepare_study(space, engine, options)
    engine.close()
    (tmp_path / "cmd-space.yaml").unlink()  # the worker has the study only
    status, out, err = _cli(["worker", "--study", "joined", *_store_args(tmp_path), "--no-mlflow", "--quiet"], capsys)
    assert status == ExitStatus.SUCCESS, err
    ledger = load("joined", f"sqlite:///{tmp_path}/optuna.db")
    assert ledger.has_verification() and _all_restarts_ok(ledger)
    assert CMD_KEY not in out + err and _files_containing(tmp_path, CMD_KEY, CMD_LOGIN) == []


@pytest.mark.parametrize("command", ["recheck", "worker"])
def test_a_variable_missing_when_the_engine_is_rebuilt_is_one_line(cmd_study, command, capsys, monkeypatch):
    tmp, _ = cmd_study
    for name, value in CMD_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AT_TEST_CMD_KEY")
    status, _, err = _cli([command, "--study", "keyed", *_store_args(tmp), "--no-mlflow"], capsys)
    assert status == ExitStatus.BAD_INPUT
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "${AT_TEST_CMD_KEY} is not set" in line and "engine.cmd.command[3]" in line
    assert "export AT_TEST_CMD_KEY" in line


def test_a_variable_missing_at_tune_is_one_line_before_anything_is_created(tmp_path, capsys, monkeypatch):
    for name, value in CMD_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AT_TEST_LOGIN")
    status, _, err = _cli(["tune", "--space", str(_cmd_space(tmp_path)), "--study", "x", *_store_args(tmp_path),
                           "--no-mlflow"], capsys)
    assert status == ExitStatus.BAD_INPUT
    assert err.count("\n") == 1 and "engine_args.hf_token: ${AT_TEST_LOGIN} is not set" in err
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "work").exists()


_LITERAL_CASES = {
    "engine_args": ({"hf_token": CMD_LOGIN}, None, "engine_args.hf_token", "${HF_TOKEN}"),
    "token shape": ({"tokenizer": HF_TOKEN}, None, "engine_args.tokenizer", "${TOKENIZER}"),
    "cmd flag": ({}, [sys.executable, "w.py", "--api-key", CMD_KEY], "engine.cmd.command[3]", "--api-key ${API_KEY}"),
    "cmd flag=": ({}, [sys.executable, "w.py", f"--api-key={CMD_KEY}"], "engine.cmd.command[2]",
                  "--api-key ${API_KEY}"),
    "cmd string": ({}, f"{sys.executable} w.py --api-key {CMD_KEY}", "engine.cmd.command", "--api-key ${API_KEY}"),
    "URI password": ({"served_url": f"http://bob:{CMD_KEY}@host:8000"}, None, "engine_args.served_url",
                     "user:${PASSWORD}@host"),
}


@pytest.mark.parametrize("case", list(_LITERAL_CASES))
def test_a_literal_credential_is_refused_in_one_line_before_anything_is_created(case, tmp_path, capsys,
                                                                                monkeypatch):
    for name, value in CMD_ENV.items():
        monkeypatch.setenv(name, value)
    engine_args, command, field, fix = _LITERAL_CASES[case]
    space = _cmd_space(tmp_path, command, **engine_args)
    status, out, err = _cli(["tune", "--space", str(space), "--study", "x", *_store_args(tmp_path), "--no-mlflow"],
                            capsys)
    assert status == ExitStatus.BAD_INPUT
    assert err.count("\n") == 1 and f": {field}: holds a literal credential" in err and fix in err
    assert CMD_KEY not in err + out and CMD_LOGIN not in err + out and HF_TOKEN not in err + out
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "work").exists()


def test_a_literal_credential_in_the_environment_of_an_engine_is_refused(tmp_path, capsys):
    space = yaml.safe_load(Path("search_spaces/gb10.yaml").read_text())
    space["engine"]["name"] = "sim"
    space["engine"]["vllm"]["env"]["HF_TOKEN"] = CMD_LOGIN
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(space))
    status, _, err = _cli(["tune", "--space", str(path), "--study", "x", *_store_args(tmp_path), "--no-mlflow"],
                          capsys)
    assert status == ExitStatus.BAD_INPUT and "engine.vllm.env.HF_TOKEN: holds a literal credential" in err
    assert "${HF_TOKEN}" in err and CMD_LOGIN not in err and not (tmp_path / "optuna.db").exists()


@pytest.mark.parametrize("command", ["tune", "worker", "recheck", "audit"])
def test_a_literal_credential_typed_as_an_engine_option_is_refused(command, tmp_path, capsys):
    argv = {"tune": ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--study", "x"],
            "worker": ["worker", "--study", "x"], "recheck": ["recheck", "--study", "x"],
            "audit": ["audit", "--space", "search_spaces/gb10.yaml", "--engine", "sim"]}[command]
    where = ["--workdir", str(tmp_path / "work")] if command == "audit" else _store_args(tmp_path)
    status, out, err = _cli([*argv, *where, "--engine-opt", f"api_key={CMD_KEY}"], capsys)
    assert status == ExitStatus.BAD_INPUT, err
    assert err.count("\n") == 1 and "--engine-opt api_key holds a literal credential" in err
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "work").exists()
    assert "${API_KEY}" in err and CMD_KEY not in err + out


def test_a_stored_redacted_credential_is_refused_before_the_engine_starts(cmd_study, tmp_path, capsys,
                                                                          monkeypatch):
    """A study an older autotune stored with ``<redacted>`` in place of a credential: recheck says so and how to
    go on, instead of starting the engine with ``<redacted>`` and reporting the 401s as a slowdown."""
    import shutil

    from autotune.store.ledger import load

    tmp, _ = cmd_study
    for name, value in CMD_ENV.items():
        monkeypatch.setenv(name, value)
    shutil.copy(tmp / "optuna.db", tmp_path / "optuna.db")
    ledger = load("keyed", f"sqlite:///{tmp_path}/optuna.db")
    ledger.study.set_user_attr("autotune:space_yaml", ledger.space_yaml().replace("${AT_TEST_LOGIN}", REDACTED))
    status, _, err = _cli(["recheck", "--study", "keyed", *_store_args(tmp_path), "--no-mlflow"], capsys)
    assert status == ExitStatus.BAD_INPUT and err.count("\n") == 1
    assert f"engine_args.hf_token is {REDACTED}" in err and "recheck --space FILE" in err


# -- the writers of engine logs -----------------------------------------------------------------------------


def test_the_vllm_launcher_writes_its_log_redacted_and_keeps_no_request_file(tmp_path, monkeypatch):
    """The vllm engine's processes write their log through autotune (``RedactedLog``): a credential the engine
    prints - vLLM prints its non-default arguments - never reaches the file, not even while it runs."""
    from autotune.core.secrets import resolve
    from autotune.engines.vllm._launcher import READY_MARKER, launch

    monkeypatch.setenv("AT_TEST_LOGIN", CMD_LOGIN)
    request = resolve({"hf_token": "${AT_TEST_LOGIN}"}, "engine_args")  # as the engine resolves it at its start
    code = ("import json, sys; req = json.load(sys.stdin); "
            "print('non-default args:', req); print('login', req['hf_token'], file=sys.stderr); "
            f"print('{READY_MARKER} {{}}', flush=True)")
    outcome = launch([sys.executable, "-c", code], log_path=tmp_path / "r.log", startup_timeout_s=60,
                     measure_timeout_s=60, stdin_text=json.dumps(request))
    assert outcome.returncode == 0 and outcome.ready == {}
    text = (tmp_path / "r.log").read_text()
    assert "login ${AT_TEST_LOGIN}" in text and "'hf_token': '${AT_TEST_LOGIN}'" in text
    assert CMD_LOGIN not in outcome.tail and [p.name for p in tmp_path.iterdir()] == ["r.log"]


def test_a_log_written_directly_is_scrubbed_once_its_process_stops(tmp_path, monkeypatch):
    """A restart forked by the forkserver host opens its log itself: supervise redacts it once the process is
    gone, before autotune reads, tails or tracks it."""
    from autotune.core.secrets import resolve
    from autotune.engines.process import EngineProcess
    from autotune.engines.vllm._launcher import supervise

    monkeypatch.setenv("AT_TEST_LOGIN", CMD_LOGIN)
    resolve("${AT_TEST_LOGIN}", "engine.vllm.env.HF_TOKEN")
    log = tmp_path / "forked.log"
    with open(log, "wb") as fh:
        proc = EngineProcess([sys.executable, "-c", f"print('token {CMD_LOGIN}')"], stdout=fh)
    outcome = supervise(proc, log, time.monotonic(), startup_timeout_s=60, measure_timeout_s=60)
    assert CMD_LOGIN not in log.read_text() and "token ${AT_TEST_LOGIN}" in log.read_text()
    assert CMD_LOGIN not in outcome.tail


# -- references and the redaction rules ---------------------------------------------------------------------


def test_every_redaction_rule_keeps_a_reference():
    assert redact({"hf_token": "${HF_TOKEN}", "auth": "Bearer ${T}", "api_key": API_KEY, "use_auth": True}) == {
        "hf_token": "${HF_TOKEN}", "auth": "Bearer ${T}", "api_key": REDACTED, "use_auth": True}
    assert redact_command(["serve", "--api-key", "${K}", "--api-key=${K}", "--hf-token", HF_TOKEN]) == [
        "serve", "--api-key", "${K}", "--api-key=${K}", "--hf-token", REDACTED]
    text = "api_key=${K} {hf_token: ${HF_TOKEN}} --api-key ${K} postgresql://bob:${DB_PW}@db/x http://u:pw@h"
    assert redact_text(text) == text.replace("u:pw@", "u:***@")


def test_a_resolved_value_is_written_as_its_reference_wherever_it_appears(monkeypatch):
    from autotune.core.secrets import MissingSecret, resolve, resolve_config
    from autotune.core.records import EngineConfig

    monkeypatch.setenv("AT_TEST_CMD_KEY", CMD_KEY)
    assert redact_text(f"echo {CMD_KEY}") == f"echo {CMD_KEY}"  # no shape, no key: nothing says it is secret
    config = EngineConfig(engine_args={"model": "m", "api_key": "${AT_TEST_CMD_KEY}"})
    started = resolve_config(config)
    assert started.engine_args["api_key"] == CMD_KEY and config.engine_args["api_key"] == "${AT_TEST_CMD_KEY}"
    assert redact_text(f"echo {CMD_KEY}!") == "echo ${AT_TEST_CMD_KEY}!"
    assert redact({"note": f"x{CMD_KEY}"}) == {"note": "x${AT_TEST_CMD_KEY}"}
    assert started.key() == config.key()  # the engine's copy and the stored one are one configuration
    with pytest.raises(MissingSecret, match=r"^engine_args\.hf_token: \$\{AT_TEST_UNSET\} is not set"):
        resolve({"hf_token": "${AT_TEST_UNSET}"}, "engine_args", env={})


def test_a_gated_datasets_token_is_a_reference_resolved_for_the_engine(tmp_path, capsys, monkeypatch):
    """``workload.dataset.args`` go to vLLM's dataset loaders, which may need a hub token: the same rules."""
    from autotune.core.records import Workload
    from autotune.core.secrets import resolve_workload

    space = yaml.safe_load(Path("search_spaces/gb10.yaml").read_text())
    space["engine"]["name"] = "sim"
    space["workload"]["dataset"] = {"vllm": "hf", "args": {"dataset_path": "org/gated", "hf_token": CMD_LOGIN}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(space))
    status, _, err = _cli(["tune", "--space", str(path), "--study", "x", *_store_args(tmp_path), "--no-mlflow"],
                          capsys)
    assert status == ExitStatus.BAD_INPUT and "workload.dataset.args.hf_token: holds a literal credential" in err
    space["workload"]["dataset"]["args"]["hf_token"] = "${AT_TEST_LOGIN}"
    path.write_text(yaml.safe_dump(space))
    monkeypatch.delenv("AT_TEST_LOGIN", raising=False)  # (a module fixture may hold it set)
    status, _, err = _cli(["tune", "--space", str(path), "--study", "x", *_store_args(tmp_path), "--no-mlflow"],
                          capsys)
    assert status == ExitStatus.BAD_INPUT and "workload.dataset.args.hf_token: ${AT_TEST_LOGIN} is not set" in err
    monkeypatch.setenv("AT_TEST_LOGIN", CMD_LOGIN)
    workload = decode(Workload, {"dataset": {"source": "vllm", "name": "hf",
                                               "args": {"hf_token": "${AT_TEST_LOGIN}"}}})
    assert dict(resolve_workload(workload).dataset.args) == {"hf_token": CMD_LOGIN}
    assert dict(workload.dataset.args) == {"hf_token": "${AT_TEST_LOGIN}"}


@pytest.mark.parametrize("value, field", [
    ({"hf_token": CMD_LOGIN}, "engine_args.hf_token"),
    ({"credentials": {"user": "${U}", "pass": CMD_LOGIN}}, "engine_args.credentials.pass"),  # all of it is one
    ({"api_key": ["${A}", CMD_KEY]}, "engine_args.api_key[1]"),
    ({"draft": {"model": "m", "args": ["--hf-token", CMD_LOGIN]}}, "engine_args.draft.args[1]"),
    ({"launcher": ["docker", "run", "-e", f"HF_TOKEN={CMD_LOGIN}"]}, "engine_args.launcher[3]"),
    ({"note": f"the token is {HF_TOKEN}"}, "engine_args.note"),
])
def test_what_is_a_literal_credential(value, field):
    from autotune.core.secrets import literal_secret

    found = literal_secret(value, "engine_args")
    assert found is not None and found[0] == field and CMD_LOGIN not in str(found) and CMD_KEY not in str(found)


@pytest.mark.parametrize("value", [
    {"hf_token": "${HF_TOKEN}", "api_key": "Bearer ${T}", "db": "postgresql://u:${PW}@h/d"},
    {"hf_token": True, "api_key": None, "password": "", "auth": False},  # unset, or "use the login's token"
    {"hf_token": REDACTED},  # what an older autotune stored: loads, refused only when an engine would start
    {"command": ["python", "w.py", "--api-key", "${K}", "--api-key=${K}", "api_key=${K}"]},
    {"max_num_batched_tokens": 8192, "tokenizer": "org/tok", "eos_token_id": 2},
])
def test_what_is_not_a_literal_credential(value):
    from autotune.core.secrets import literal_secret

    assert literal_secret(value, "engine_args") is None


def test_the_vllm_engine_resolves_its_env_and_launcher_only_for_the_process(tmp_path, monkeypatch):
    """``engine.vllm.env`` and ``launcher`` take references beside their ``{placeholders}``: resolved for the
    process, kept in the settings and the facts the study stores."""
    from autotune.engines import make_engine

    monkeypatch.setenv("AT_TEST_LOGIN", CMD_LOGIN)
    engine = make_engine("vllm", cache_dir=str(tmp_path), env={"HF_TOKEN": "${AT_TEST_LOGIN}", "X": "{study_dir}"},
                         launcher=["env", "API=${AT_TEST_LOGIN}", "python3"])
    try:
        assert engine.runner_env()["HF_TOKEN"] == CMD_LOGIN and engine.runner_env()["X"] == str(tmp_path.resolve())
        assert engine.interpreter() == ["env", f"API={CMD_LOGIN}", "python3"]
        assert engine.settings.env["HF_TOKEN"] == "${AT_TEST_LOGIN}"
        assert CMD_LOGIN not in engine.settings.interpreter_label()
        monkeypatch.delenv("AT_TEST_LOGIN")
        from autotune.engines import EngineError

        with pytest.raises(EngineError, match=r"engine\.vllm\.env\.HF_TOKEN: \$\{AT_TEST_LOGIN\} is not set"):
            engine.runner_env()
    finally:
        engine.close()


_FORKED_RESTART = """
import sys
from autotune.core.records import Dataset, EngineConfig, Workload
from autotune.core.secrets import resolve_config
from autotune.engines.vllm import VllmEngine

engine = VllmEngine(cache_dir=sys.argv[1], python=sys.executable, startup_timeout_s=120, env={"PYTHONPATH": sys.argv[2]})
assert engine.settings.resolved_start_method() == "forkserver"
config = resolve_config(EngineConfig(engine_args={"model": "fake/leak", "hf_token": "${AT_TEST_LOGIN}"},
                                     compilation_config={}, speculative_config={}))
engine.run_restart(config, Workload(num_prompts=2, input_len=8, output_len=4, concurrency=2, timed_passes=2,
                                    dataset=Dataset("synthetic"), pass_seconds=0.0), restart=0, seed=0)
"""


def test_a_forked_restarts_log_holds_no_credential_after_autotune_and_the_restart_are_killed(tmp_path, monkeypatch):
    """A restart forked by the forkserver host opens its log by path, and was redacted only once it stopped: a
    kill -9 of autotune mid-run left the credential the restart printed in the log for good. The restart now writes
    through a named pipe autotune redacts line by line (``RedactedLog(named=True)``): with autotune and then the
    restart SIGKILLed, no file holds the value, and the log shows its reference."""
    import os
    import signal
    import subprocess

    from tests._helpers.processes import wait_gone

    fake = Path(__file__).resolve().parents[1] / "data" / "fake-vllm"
    procs, study = tmp_path / "procs", tmp_path / "study"
    # The child's temporary directory, where its log FIFO lives: a short path of its own. Under xdist tmp_path is
    # deep enough (popen-gwN/...) that multiprocessing's forkserver socket below it passed the 108-byte AF_UNIX
    # limit, and the host never forked the restart (autotune ended at once, exit 0).
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="at-"))
    env = {**os.environ, "AT_TEST_LOGIN": CMD_LOGIN, "FAKE_VLLM_PROCS": str(procs), "TMPDIR": str(tmp),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # What the test's autotune said, for the message if it ends early (beside tmp_path: the scan below is of what
    # autotune and the restart wrote, and a terminal is not their file).
    err = tmp_path.parent / f"{tmp_path.name}-autotune.err"
    with open(err, "wb") as err_fh:
        autotune = subprocess.Popen([sys.executable, "-c", _FORKED_RESTART, str(study), str(fake)], env=env,
                                    stdin=subprocess.DEVNULL, stdout=err_fh, stderr=err_fh)

    def printed() -> list[Path]:
        return [p for p in study.rglob("*.log") if "forkserver-host" not in p.name
                and "login" in p.read_text(errors="replace")]

    restart_log: list[Path] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not restart_log and autotune.poll() is None:
            restart_log = printed()
            time.sleep(0.1)
        restart_log = restart_log or printed()  # it may have printed just before the loop's last look
        assert restart_log, (f"the forked restart never printed its arguments (autotune exit {autotune.poll()}): "
                             + redact_text(err.read_text(errors="replace"))[-3000:])
    finally:
        autotune.send_signal(signal.SIGKILL)
        autotune.wait()
    engine_pids = [json.loads(line)["pid"] for line in procs.read_text().splitlines()]
    for pid in engine_pids:  # the restart this test caused: killed as a crash would
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert wait_gone(engine_pids) == []
    text = restart_log[0].read_text()
    assert "login ${AT_TEST_LOGIN}" in text and "'hf_token': '${AT_TEST_LOGIN}'" in text, text
    try:
        for path in [*tmp_path.rglob("*"), *tmp.rglob("*")]:
            if path.is_file() and not path.is_symlink():  # a FIFO is no file, and reading one would block
                assert CMD_LOGIN.encode() not in path.read_bytes(), path
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

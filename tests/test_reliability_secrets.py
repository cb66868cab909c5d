"""Secrets: a credential given to autotune is never stored or printed (MLflow, reports, exports, commands, engine
logs); it is written as a reference to the environment (``${HF_TOKEN}``), which the study stores and resolves only
when an engine starts (issue 44, principle 2)."""

from __future__ import annotations

import io
import json
import socket
import sys
from pathlib import Path

import pytest
import yaml

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
        status = raw_main(["export", "--storage", f"sqlite:///{tmp}/optuna.db", "--study", "referenced", "--format", fmt],
                          out=out)
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
    run_study(load_space("search_spaces/gb10.yaml"), FakeEngine(lambda c: 100.0), options,
              [MlflowTracker(tracking_uri=uri, stream=io.StringIO())])
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

"""The command line, called in-process: exit statuses and one-line errors for bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path


from autotune.cli._main import main, raw_main
from autotune.core.exit_status import ExitStatus


def _run(argv, capsys):
    out = io.StringIO()
    status = raw_main(argv, out=out)
    err = capsys.readouterr().err
    return status, out.getvalue(), err


def test_bad_yaml_is_a_one_line_error_naming_the_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine_args: {model: org/m}\nworkload: {concurrency: 4}\nsearch:\n  num_speculative_tokens: "
                   "{low: 0, high: lots}\n")
    status, _, err = _run(["tune", "--space", str(bad), "--storage", f"sqlite:///{tmp_path}/o.db",
                           "--no-mlflow"], capsys)
    assert status == ExitStatus.BAD_INPUT
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "search.num_speculative_tokens.high" in lines[0] and "fix:" in lines[0]


def test_unknown_engine_is_bad_input(tmp_path, capsys):
    status, _, err = _run(["tune", "--space", "search_spaces/gb10.yaml", "--engine", "tensorrt",
                           "--storage", f"sqlite:///{tmp_path}/o.db", "--no-mlflow"], capsys)
    assert status == ExitStatus.BAD_INPUT and "--engine 'tensorrt' is not an engine" in err


def test_report_without_studies_says_what_to_run(tmp_path, capsys):
    status, _, err = _run(["report", "--storage", f"sqlite:///{tmp_path}/empty.db"], capsys)
    assert status == ExitStatus.BAD_INPUT and "make demo" in err


def test_bad_flag_is_usage_error(capsys):
    assert main(["tune", "--trials", "many"]) == ExitStatus.BAD_INPUT
    assert "invalid int value" in capsys.readouterr().err


def test_engine_opt_needs_key_value(tmp_path, capsys):
    status, _, err = _run(["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--engine-opt",
                           "profile", "--storage", f"sqlite:///{tmp_path}/o.db", "--no-mlflow"], capsys)
    assert status == ExitStatus.BAD_INPUT and "expected KEY=VALUE" in err


def test_enqueue_rejects_choices_the_space_lacks(tmp_path, capsys):
    status, _, err = _run(["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--enqueue",
                           "num_speculative_tokens=2,draft=eagle9", "--storage", f"sqlite:///{tmp_path}/o.db",
                           "--no-mlflow"], capsys)
    assert status == ExitStatus.BAD_INPUT and "drafts has no choice 'eagle9'" in err


def test_tune_prints_the_report_mlflow_logged_simulator_line_included(tmp_path, capsys):
    import mlflow

    from tests.conftest import store

    uri = store(tmp_path)
    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--study", "once", "--trials", "6",
            "--storage", f"sqlite:///{tmp_path}/o.db", "--workdir", str(tmp_path / "work"), "--tracking-uri", uri,
            "--json", str(tmp_path / "report.json"), "--quiet"]
    status, printed, _ = _run(argv, capsys)
    assert status == ExitStatus.SUCCESS and "Simulator ground truth" in printed
    client = mlflow.MlflowClient(uri)
    (parent,) = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
                 if r.data.tags.get("autotune.kind") == "study"]
    logged = Path(client.download_artifacts(parent.info.run_id, "report.txt", str(tmp_path)))
    assert logged.read_text() == printed  # one report per tune: the printed one is the logged one
    report_json = Path(client.download_artifacts(parent.info.run_id, "report.json", str(tmp_path / "dl")))
    assert json.loads(report_json.read_text()) == json.loads((tmp_path / "report.json").read_text())
    assert json.loads(report_json.read_text())["simulator_check"]["ratio_to_best"] > 0
    # The logged report.json is the versioned document: its reader gives back the printed table.
    from autotune.report import read_report

    assert read_report(report_json).render() + "\n" == printed

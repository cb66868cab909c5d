"""Impossible throughputs: non-positive, non-finite and absurd values are failed restarts with the reason."""

from __future__ import annotations

import io
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.records import decode
from autotune.cli._main import raw_main
from autotune.core.records import MAX_TOK_S, RestartResult, throughput_problem
from autotune.core.exit_status import ExitStatus

#: A cmd engine whose speculative configurations report $BAD_VALUE tok/s and the rest a sane, noisy value.
ENGINE = textwrap.dedent("""\
    import json, os, sys
    request = json.load(sys.stdin)
    k = request["config"]["params"].get("num_speculative_tokens", 0)
    seed = request["seed"]
    good = 100.0 + (seed % 7) + 5.0 * ("cudagraph_mode" in request["config"]["compilation_config"])
    value = float(os.environ["BAD_VALUE"]) if k else good
    print(json.dumps({"status": "ok", "passes_tok_s": [value, value], "resolved": {}}))
    """)


@pytest.mark.parametrize("value, words", [
    (-110.0, "non-positive"), (0.0, "non-positive"), (-0.0, "non-positive"), (math.inf, "non-finite"),
    (math.nan, "non-finite"), (1e308, "impossible"), (MAX_TOK_S * 10, "impossible"),
])
def test_an_impossible_pass_makes_a_failed_restart_with_the_reason(value, words):
    r = RestartResult(status="ok", passes_tok_s=(120.0, value), seed=3)
    assert r.status == "failed" and not r.ok and r.value is None
    assert words in r.error and "timed pass 1" in r.error


def test_ok_without_timed_passes_is_a_failure():
    assert RestartResult(status="ok").status == "failed"
    assert throughput_problem(["fast"]) is not None


def test_a_stored_restart_with_zero_throughput_reads_back_as_failed():
    # Studies recorded before this check hold zeros; reading them must not crash a report.
    r = decode(RestartResult, {"status": "ok", "passes_tok_s": [0.0, 0.0], "restart": 1, "seed": 5})
    assert r.status == "failed" and "non-positive" in r.error


def test_plausible_values_pass():
    assert RestartResult(status="ok", passes_tok_s=(0.5, 12_345.6, MAX_TOK_S)).ok


def _tune(tmp_path: Path, monkeypatch, bad: str) -> tuple[ExitStatus, str, Path]:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    monkeypatch.setenv("BAD_VALUE", bad)
    report = tmp_path / "report.json"
    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "cmd", "--engine-opt",
            f"command=[{sys.executable}, {script}]", "--trials", "5", "--top-k", "2", "--verify-restarts", "2",
            "--enqueue", "cudagraph_mode=FULL,capture_sizes=tiny,num_speculative_tokens=2,draft=ngram",
            # a sane challenger too: a verdict needs a comparison (issue 32), which the bad ones cannot give
            "--enqueue", "cudagraph_mode=FULL,capture_sizes=tiny,num_speculative_tokens=0",
            "--storage", f"sqlite:///{tmp_path}/o.db", "--workdir", str(tmp_path / "w"), "--study", "v",
            "--no-mlflow", "--quiet", "--json", str(report)]
    out = io.StringIO()
    status = raw_main(argv, out=out)
    return status, out.getvalue(), report


@pytest.mark.parametrize("bad", ["-110.0", "0", "1e308"])
def test_impossible_values_from_an_engine_never_reach_the_verdict(tmp_path, monkeypatch, capsys, bad):
    status, text, path = _tune(tmp_path, monkeypatch, bad)
    assert status == ExitStatus.SUCCESS, capsys.readouterr().err
    report = json.loads(path.read_text())
    reasons = " ".join(f["reason"] for f in report["failures"])
    assert "throughput" in reasons and ("non-positive" in reasons or "impossible" in reasons)
    winner = report["winner"]
    assert winner["config"]["speculative_config"] is None  # no speculative config "won" with a bad number
    assert winner["mean"] > 0 and math.isfinite(winner["mean"])
    assert "nanx" not in text and "infx" not in text and "-" not in text.split("winner is ")[-1][:2]
    # the report command reads the same study back without crashing
    assert raw_main(["report", "--storage", f"sqlite:///{tmp_path}/o.db", "--study", "v"],
                    out=io.StringIO()) == ExitStatus.SUCCESS

"""``autotune ui`` for real: the MLflow server on a free port, its REST API, the runs table in headless Chromium.

Set ``AUTOTUNE_UI_SCREENSHOT=docs/ui-screenshot.png`` to also save a screenshot of the study page there.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from autotune.cli._main import raw_main
from autotune.decisions.racing import RacingPolicy
from autotune.core.records import EngineConfig, EngineFacts, Resolved
from autotune.config.space import parse_space
from autotune.core.exit_status import ExitStatus
from autotune.study import StudyOptions, run_study
from autotune.cli.ui import server_command, ui_url
from autotune.report import build_report
from tests.conftest import FakeEngine, store

pytest.importorskip("mlflow")

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SERVER_START_S = 120  # a cold start on a loaded 2-core CI runner imports a lot
SPACE = {
    "name": "ui-space",
    "engine_args": {"model": "fake/ui-model", "max_num_seqs": 4},
    "workload": {"num_prompts": 4, "input_len": 16, "output_len": 16, "concurrency": 4},
    "search": {"cudagraph_mode": ["NONE", "PIECEWISE", "FULL"], "capture_sizes": {"tiny": [1, 2, 4]},
               "num_speculative_tokens": {"low": 0, "high": 2},
               "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}}},
}


def _value(config: EngineConfig, restart: int, seed: int) -> float:
    value = {None: 100.0, "NONE": 60.0, "PIECEWISE": 110.0, "FULL": 120.0}[config.cudagraph_mode]
    return value + 10.0 * config.num_speculative_tokens + (seed % 3 - 1) * 0.7


def fake_engine() -> FakeEngine:
    """Deterministic throughput per configuration, for a study worth looking at."""
    return FakeEngine(value=_value, startup_s=2.0, facts=EngineFacts(name="fake", version="1.0", gpu="Fake GPU"),
                      resolve=lambda c: Resolved(cudagraph_mode=c.cudagraph_mode or "FULL_AND_PIECEWISE"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api(url: str, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST to MLflow's REST API (the search endpoints)."""
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/{endpoint}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.load(resp)


def experiment_id(ui: dict[str, Any]) -> str:
    query = urllib.parse.urlencode({"run_id": ui["parent"]})
    with urllib.request.urlopen(f"{ui['url']}/api/2.0/mlflow/runs/get?{query}", timeout=30) as resp:
        return str(json.load(resp)["run"]["info"]["experiment_id"])


def wait_for(path: Path, text: str, proc: subprocess.Popen[Any], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    raise AssertionError(f"{text!r} not printed (exit status {proc.poll()}):\n{path.read_text()}")


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A tracked study in a fresh store, and ``autotune ui`` serving it as a user would start it."""
    from autotune.observers.mlflow import MlflowTracker

    tmp = tmp_path_factory.mktemp("ui")
    uri = store(tmp)
    options = StudyOptions(study_name="ui-study", storage=f"sqlite:///{tmp}/optuna.db", workdir=str(tmp / "work"),
                           trials=5, policy=RacingPolicy(min_restarts=2, max_restarts=2, racing=False), top_k=1,
                           verify_restarts=2)
    tracker = MlflowTracker(tracking_uri=uri, stream=io.StringIO())
    space, engine = parse_space(SPACE), fake_engine()
    study = run_study(space, engine, options, [tracker])
    tracker.on_report(build_report(study, engine=engine, space=space))
    assert tracker.problems == []
    port = free_port()
    out, err = tmp / "ui.out", tmp / "ui.err"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([sys.executable, "-m", "autotune", "ui", "--port", str(port), "--tracking-uri", uri],
                                cwd=tmp, env=env, stdout=fo, stderr=fe)
    try:
        wait_for(out, "MLflow UI ready", proc, SERVER_START_S)
        yield {"url": ui_url("127.0.0.1", port), "proc": proc, "out": out, "err": err, "tmp": tmp, "study": study,
               "port": port, "parent": tracker.parent_run_id}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


# -- without a server ------------------------------------------------------------------------------------


def test_server_command_serves_the_store_on_loopback() -> None:
    cmd = server_command("sqlite:///mlruns/mlflow.db", "127.0.0.1", 5000)
    assert cmd[:4] == [sys.executable, "-m", "mlflow", "server"]
    flags = dict(zip(cmd[4::2], cmd[5::2]))
    assert flags["--backend-store-uri"] == "sqlite:///mlruns/mlflow.db"
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "5000"
    assert flags["--default-artifact-root"] == "mlruns"
    assert "--default-artifact-root" not in server_command("postgresql://db/mlflow", "127.0.0.1", 5000)


def test_port_in_use_is_a_usage_error_naming_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert raw_main(["ui", "--port", str(port), "--tracking-uri", "sqlite:///unused/mlflow.db"]) == 2
    err = capsys.readouterr().err
    assert f"port {port}" in err and "--port" in err and "PORT=" in err


def test_remote_tracking_server_is_not_started_again(capsys: pytest.CaptureFixture[str]) -> None:
    assert raw_main(["ui", "--tracking-uri", "http://mlflow.team:5000"]) == ExitStatus.SUCCESS
    assert "http://mlflow.team:5000" in capsys.readouterr().out


# -- the real server -------------------------------------------------------------------------------------


def test_ui_prints_its_url(ui: dict[str, Any]) -> None:
    assert f"MLflow UI ready: {ui['url']}" in ui["out"].read_text()


def test_rest_api_has_the_experiment_parent_run_and_nested_trial_runs(ui: dict[str, Any]) -> None:
    experiments = api(ui["url"], "experiments/search", {"max_results": 100})["experiments"]
    exp = next(e for e in experiments if e["name"] == "autotune/fake/ui-model/Fake GPU")
    parents = api(ui["url"], "runs/search", {"experiment_ids": [exp["experiment_id"]],
                                             "filter": "tags.`autotune.kind` = 'study'"})["runs"]
    assert [p["info"]["run_id"] for p in parents] == [ui["parent"]]
    assert parents[0]["info"]["run_name"] == "ui-study" and parents[0]["info"]["status"] == "FINISHED"
    children = api(ui["url"], "runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 1000,
                                              "filter": f"tags.`mlflow.parentRunId` = '{ui['parent']}'"})["runs"]
    trials = [r for r in children if r["info"]["run_name"].startswith("trial ")]
    measured = [r for r in ui["study"].trial_records() if r.duplicate_of is None]
    assert len(trials) == len(measured) >= 3
    assert any(r["info"]["run_name"].startswith("verify winner: ") for r in children)


def _chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={user_data}"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=False)


def _study_page(ui: dict[str, Any]) -> str:
    exp_id = experiment_id(ui)
    # Sorting by name lists nested runs flat (the UI nests children only in its default date order).
    return (f"{ui['url']}/#/experiments/{exp_id}/runs?orderByKey=attributes.run_name&orderByAsc=true"
            "&workflowType=machine_learning")


def _visible_text(dom: str) -> str:
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)))


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (CI installs it: "
                    ".ci/install-chromium.sh)")
def test_runs_table_in_headless_chromium_shows_every_trial(ui: dict[str, Any]) -> None:
    runs = api(ui["url"], "runs/search", {"experiment_ids": [experiment_id(ui)], "max_results": 1000})["runs"]
    names = [r["info"]["run_name"] for r in runs]
    page = _study_page(ui)
    text = ""
    for budget in (15_000, 40_000):  # virtual milliseconds: a slow runner gets a second, longer look
        done = _chromium(f"--virtual-time-budget={budget}", "--dump-dom", page, user_data=ui["tmp"] / "chromium")
        assert done.returncode == 0, done.stderr[-2000:]
        text = _visible_text(done.stdout)
        if all(name in text for name in names):
            break
    missing = [name for name in names if name not in text]
    assert not missing, f"runs missing from the MLflow runs table: {missing}\npage text: {text[:3000]}"
    assert sum(name.startswith("trial ") for name in names) >= 3
    shot = os.environ.get("AUTOTUNE_UI_SCREENSHOT")
    if shot:
        path = Path(shot).resolve()
        done = _chromium("--window-size=1600,1000", "--virtual-time-budget=20000", f"--screenshot={path}", page,
                         user_data=ui["tmp"] / "chromium")
        assert done.returncode == 0 and path.read_bytes()[:4] == b"\x89PNG"


def test_ctrl_c_stops_the_server_and_its_workers(ui: dict[str, Any]) -> None:
    """Runs last in this file: it stops the module's server."""
    proc = ui["proc"]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    assert "MLflow UI stopped." in ui["out"].read_text()
    assert "Traceback" not in ui["err"].read_text()
    with socket.socket() as sock:  # the whole process group is gone: nothing listens on the port any more
        assert sock.connect_ex(("127.0.0.1", ui["port"])) != 0

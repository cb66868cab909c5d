"""Issue 32, principle 4: no verdict without the measurement behind it.

``--budget-minutes 1`` on the GB10 recipe ran 22.9 engine-minutes, finished no trial and printed "no configuration
beat the baseline - keep the engine defaults", exit 0. A budget that cannot pay for the smallest study is refused
before any start (before any start has been measured, at the least an engine's start can take), and a study that
compared no configuration with the baseline never advises keeping the defaults.
"""

from __future__ import annotations

import io
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.cli._main import raw_main
from autotune.config.space import parse_space
from autotune.core.exit_status import ExitStatus
from autotune.decisions.racing import RacingPolicy
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.study import StudyOptions, run_study
from tests.conftest import SMALL_SPACE, FakeEngine

REPO = Path(__file__).resolve().parents[2]


def _options(tmp_path: Path, **kw) -> StudyOptions:
    base = dict(study_name="b", storage=f"sqlite:///{tmp_path}/o.db", workdir=str(tmp_path / "w"), trials=4,
                policy=RacingPolicy(min_restarts=1, racing=False), top_k=1, verify_restarts=2, sampler="random")
    base.update(kw)
    return StudyOptions(**base)


def test_a_study_that_compared_nothing_with_the_baseline_never_says_keep_the_defaults(tmp_path):
    space = parse_space(SMALL_SPACE)
    base = space.baseline().key()
    # Every configuration but the engine defaults fails: verification can only measure the baseline.
    engine = FakeEngine(lambda c: 100.0, fail=lambda c: c.key() != base and "RuntimeError: CUDA out of memory")
    report = build_report(run_study(space, engine, _options(tmp_path)))
    text = render_report(report)
    assert "keep the engine defaults" not in text
    assert report.no_result and "compared with the baseline" in report.no_result
    assert "CUDA out of memory" in report.no_result  # the reason the challengers were not measured
    assert "Verdict: NONE" in text


def test_a_study_whose_challenger_lost_still_says_keep_the_defaults(tmp_path):
    space = parse_space(SMALL_SPACE)
    base = space.baseline().key()
    engine = FakeEngine(lambda c: 100.0 if c.key() == base else 60.0)
    report = build_report(run_study(space, engine, _options(tmp_path)))
    assert report.no_result is None and report.winner_is_baseline
    assert "keep the engine defaults" in render_report(report)


def _fake_docker(bin_dir: Path, calls: Path) -> None:
    """A ``docker`` that has the recipe's image and whose container imports vLLM; an engine start is recorded."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "docker"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        open({str(calls)!r}, "a").write(json.dumps(sys.argv[1:]) + "\\n")
        if sys.argv[1:3] == ["image", "inspect"]:
            print(json.dumps([{{"Id": "sha256:{'a' * 64}", "RepoDigests": []}}]))
        elif sys.argv[1] == "run" and "-c" in sys.argv:
            print("AUTOTUNE_RESULT " + json.dumps({{"vllm": "0.31.0", "torch": "2.9", "cuda": "13.0",
                                                   "gpu": "NVIDIA GB10"}}))
        elif sys.argv[1] == "run":
            sys.exit(1)  # an engine start: the test asserts there is none
        else:
            sys.exit(0)
    """))
    script.chmod(0o755)


def test_budget_minutes_1_on_the_gb10_recipe_is_refused_before_any_engine_start(tmp_path, monkeypatch, capsys):
    calls = tmp_path / "docker-calls.jsonl"
    _fake_docker(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    model = tmp_path / "model"  # a local model directory: nothing to download, nothing to look up
    model.mkdir()
    (model / "config.json").write_text("{}")
    argv = ["tune", "--space", str(REPO / "search_spaces" / "gb10.yaml"), "--model", str(model),
            "--budget-minutes", "1", "--storage", f"sqlite:///{tmp_path}/o.db", "--workdir", str(tmp_path / "w"),
            "--study", "spark", "--no-mlflow", "--quiet"]
    status = raw_main(argv, out=io.StringIO())
    err = capsys.readouterr().err
    assert status == ExitStatus.BAD_INPUT, err
    assert "--budget-minutes 1 is too small" in err and "use --budget-minutes" in err and "\n" not in err.strip()
    runs = [c for c in map(json.loads, calls.read_text().splitlines()) if c[0] == "run" and "-c" not in c]
    assert runs == [], "an engine started under a budget that could not pay for the smallest study"


def test_challengers_that_lost_their_race_in_the_search_are_a_comparison(tmp_path):
    # Every challenger raced out against the baseline in the search: verification measures the baseline alone, and
    # the losses on matched seeds are the comparison "keep the engine defaults" rests on.
    space = parse_space(SMALL_SPACE)
    base = space.baseline().key()
    engine = FakeEngine(lambda c: 100.0 if c.key() == base else 40.0)
    options = _options(tmp_path, policy=RacingPolicy(min_restarts=1, max_restarts=4, racing=True), trials=4)
    report = build_report(run_study(space, engine, options))
    assert report.trials.pruned >= 1 and report.winner_is_baseline, render_report(report)
    assert [r.is_baseline for r in report.verification.entries] == [True], render_report(report)
    assert report.no_result is None and "keep the engine defaults" in render_report(report)


# -- issue 44, principle 7: worker deaths and races never overrun the start budget ------------------------------


def _token_worker(url: str, budget: int, out: str) -> None:
    """One worker taking start tokens until none is left (what every engine start of a study does first)."""
    import optuna

    from autotune.store.claims import Claims, StartTokens
    from autotune.store.heartbeat import Heartbeat
    from autotune.store.ledger import make_storage, owner_id

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = make_storage(url, heartbeat_s=1)
    study = optuna.load_study(study_name="tokens", storage=store)
    tokens = StartTokens(Claims(study, Heartbeat(store), owner_id()), budget)
    got = []
    while (token := tokens.take()) is not None:
        got.append(token.job)
        token.complete()
    Path(out).write_text(json.dumps(got))


def test_workers_racing_for_the_last_starts_take_each_start_of_the_budget_once(tmp_path):
    """Four processes take start tokens as fast as they can: together exactly the budget, no token twice. (The
    stored-count check that came before a start let two workers both take the last one: 41 starts on 40.)"""
    import multiprocessing

    import optuna

    from autotune.store.ledger import make_storage

    url = f"sqlite:///{tmp_path}/t.db"
    optuna.create_study(study_name="tokens", storage=make_storage(url, heartbeat_s=1))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_token_worker, args=(url, 12, str(tmp_path / f"w{i}.json"))) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 4
    taken = [job for i in range(4) for job in json.loads((tmp_path / f"w{i}.json").read_text())]
    assert sorted(taken) == sorted(f"start-{i}" for i in range(12))


def _take_and_die(url: str) -> None:
    import optuna

    from autotune.store.claims import Claims, StartTokens
    from autotune.store.heartbeat import Heartbeat
    from autotune.store.ledger import make_storage, owner_id

    store = make_storage(url, heartbeat_s=1)
    study = optuna.load_study(study_name="tokens", storage=store)
    token = StartTokens(Claims(study, Heartbeat(store), owner_id()), 2).take()
    assert token is not None
    os._exit(0)  # as kill -9 mid-start: the token is held, the engine start never recorded


def test_a_token_whose_holder_died_mid_start_goes_to_the_next_start(tmp_path):
    import multiprocessing

    import optuna

    from autotune.store.claims import Claims, StartTokens
    from autotune.store.heartbeat import Heartbeat
    from autotune.store.ledger import make_storage, owner_id

    url = f"sqlite:///{tmp_path}/t.db"
    store = make_storage(url, heartbeat_s=1)
    study = optuna.create_study(study_name="tokens", storage=store)
    child = multiprocessing.get_context("spawn").Process(target=_take_and_die, args=(url,))
    child.start()
    child.join(120)
    tokens = StartTokens(Claims(study, Heartbeat(store), owner_id()), 2)
    first, second = tokens.take(), tokens.take()
    assert {first.job, second.job} == {"start-0", "start-1"}  # the dead holder's token is free again
    first.complete()
    second.complete()
    assert tokens.take() is None


def test_a_study_never_starts_more_engines_than_its_budget_even_when_every_check_saw_room(tmp_path, monkeypatch):
    """The race's outcome, made certain: every stored-count check of the budget says there is room (as two workers
    that both saw the last start free). The start tokens still hold the study to its budget, search and
    verification together."""
    from autotune.study import _optimize, _trial, _verification

    monkeypatch.setattr(_trial, "_search_may_start", lambda *a, **k: True)
    monkeypatch.setattr(_optimize, "_search_may_start", lambda *a, **k: True)
    monkeypatch.setattr(_verification, "_starts_fit", lambda *a, **k: True)
    monkeypatch.setattr(_verification, "_verify_may_start", lambda *a, **k: True)
    space = parse_space(SMALL_SPACE)
    engine = FakeEngine(lambda c: 100.0 + 10.0 * len(c.key()) % 7)
    budget = 16
    ledger = run_study(space, engine, _options(tmp_path, trials=30, budget_restarts=budget))
    assert len(engine.calls) <= budget and ledger.budget_used()[0] <= budget


# -- issue 44, principle 7: --budget-minutes between concurrent workers ------------------------------------------

#: A worker whose every stored-count check of the budget says there is room: the race between workers at its worst
#: (both saw the last minutes free), made certain. Only the reservations can hold the study to its budget then.
_ROOM_EVERYWHERE = """
import sys
from autotune.study import _optimize, _trial, _verification

for module, name in ((_trial, "_search_may_start"), (_optimize, "_search_may_start"), (_verification, "_starts_fit"),
                     (_verification, "_verify_may_start")):
    setattr(module, name, lambda *a, **k: True)
import pytest

from autotune.cli._main import raw_main

sys.exit(int(raw_main(sys.argv[1:])))
"""


def _reservations(url: str, study: str) -> list[tuple[float, float]]:
    """(reserved, spent) minutes of every completed reservation of the study."""
    import optuna

    claims = optuna.load_study(study_name=study + ":autotune-claims", storage=url)
    return [(float(t.user_attrs["autotune:claim"][len("minutes-"):]), float(t.value))
            for t in claims.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get("autotune:claim", "").startswith("minutes-")]


def test_two_workers_never_overrun_a_minutes_budget_by_more_than_their_starts_ran_over_their_estimates(tmp_path):
    """``--budget-minutes`` between two real worker processes on the simulator, each seeing room for every start:
    every engine start reserved its estimated minutes first (one claim each, atomic across the workers), so the
    study's recorded minutes exceed the budget by at most what its starts ran over their reservations. (Without the
    reservations the workers ran every trial: many times the budget.)"""
    import subprocess
    import time

    from autotune.store.ledger import load

    space = REPO / "search_spaces" / "h200.yaml"
    url, budget = f"sqlite:///{tmp_path}/o.db", 15.0
    common = ["--storage", url, "--workdir", str(tmp_path / "w"), "--study", "m", "--no-mlflow", "--quiet",
              "--heartbeat", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen([sys.executable, "-c", _ROOM_EVERYWHERE, "tune", "--space", str(space), "--engine",
                              "sim", "--trials", "40", "--budget-minutes", str(budget), "--verify-restarts", "2",
                              "--engine-opt", "time_scale=0.01",  # 0.6 s a start: the workers overlap
                              *common], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        try:
            if load("m", url).study.get_trials(deepcopy=False):
                break
        except Exception:  # noqa: BLE001 - the study is not there yet
            pass
        time.sleep(0.05)
    second = subprocess.Popen([sys.executable, "-c", _ROOM_EVERYWHERE, "worker", *common], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    errors = [p.communicate(timeout=600)[1].decode() for p in (first, second)]
    assert all("Traceback" not in e for e in errors), errors
    ledger = load("m", url)
    owners = {t.user_attrs.get("autotune:owner", {}).get("pid") for t in ledger.study.get_trials(deepcopy=False)
              if t.user_attrs.get("autotune:restarts")}
    assert len(owners) == 2, owners  # both workers started engines
    starts, minutes = ledger.budget_used()
    reservations = _reservations(url, "m")
    assert starts >= 2 and len(reservations) == starts  # every engine start reserved its minutes first
    assert sum(spent for _, spent in reservations) == pytest.approx(minutes)
    over = sum(max(0.0, spent - reserved) for reserved, spent in reservations)
    assert minutes <= budget + over + 1e-6, (minutes, budget, over, reservations)
    assert minutes <= budget + 2 * max(spent for _, spent in reservations)  # at most a start per worker past it

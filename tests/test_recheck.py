"""``autotune recheck`` and ``tune --warm-start`` on a stored simulated study (tests/data/study-recheck-h200-sim.db).

The stored study ran the simulator's h200/dense profile on vLLM 0.26.0; its winner is ngram K=3 at 1.52x the
baseline. The simulated 0.29.0 runs speculation with full graphs PIECEWISE on sizes rounded to 8s
(engines/_sim_model.py), which takes the winner's lead away: the recheck must say "no longer faster" and name the
changed resolved configuration.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import yaml

from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus
from autotune.decisions import recheck as rules
from autotune.decisions.recheck import RecheckRecord, recheck_verdict
from autotune.stats.intervals import Verdict
from autotune.store.ledger import load

FIXTURE = Path(__file__).parent / "data" / "study-recheck-h200-sim.db"
STUDY = "h200-sim"


@pytest.fixture
def storage(tmp_path: Path) -> str:
    db = tmp_path / "study.db"
    shutil.copyfile(FIXTURE, db)  # the fixture itself is never written
    return f"sqlite:///{db}"


def _space_at(tmp_path: Path, storage: str, version: str) -> str:
    """The study's stored space with the simulator at ``version``: today's space file after an upgrade."""
    raw = yaml.safe_load(load(STUDY, storage).space_yaml())
    raw["engine"]["sim"]["engine_version"] = version
    path = tmp_path / f"space-{version}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[ExitStatus, str, str]:
    out = io.StringIO()
    status = raw_main(argv, out=out)
    return status, out.getvalue(), capsys.readouterr().err


def _recheck(storage: str, tmp_path: Path, *extra: str) -> list[str]:
    return ["recheck", "--study", STUDY, "--storage", storage, "--workdir", str(tmp_path / "work"), "--no-mlflow",
            *extra]


def test_an_unchanged_engine_keeps_the_verdict_and_the_stored_verification(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = load(STUDY, storage).verification()
    status, out, err = _run(_recheck(storage, tmp_path), capsys)
    assert status == ExitStatus.SUCCESS, err
    assert "Verdict: STILL FASTER" in out and "WARNING" not in out
    assert "then" in out and "now" in out and "x1.52 [1.35, 1.71]" in out  # the stored speedup beside today's
    ledger = load(STUDY, storage)
    assert ledger.verification() == before  # the study's own verdict is never touched
    (stored,) = [RecheckRecord.from_dict(r) for r in ledger.rechecks()]
    assert stored.verdict == rules.STILL_FASTER and stored.kind == rules.BASELINE_KIND
    assert stored.now["verdict"] == Verdict.FASTER and stored.restarts_per_config >= 3
    assert not stored.resolved_changes and not stored.differences


def test_a_shifted_engine_is_no_longer_faster_and_the_changed_configuration_is_named(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(_recheck(storage, tmp_path, "--space", _space_at(tmp_path, storage, "0.29.0")), capsys)
    assert status == ExitStatus.NO_LONGER_FASTER, err
    assert "Verdict: NO LONGER FASTER" in out
    assert "WARNING: engine changed the configuration" in out
    assert "cudagraph_mode FULL_AND_PIECEWISE -> PIECEWISE" in out
    assert "cudagraph_capture_sizes [4, 8, 16, 24, 32] -> [8, 16, 24, 32]" in out
    assert "engine_version: 0.26.0 -> 0.29.0" in out
    (stored,) = load(STUDY, storage).rechecks()
    assert stored["verdict"] == rules.NO_LONGER_FASTER and stored["resolved_changes"]


def test_two_engines_in_the_same_rounds_give_one_answer_with_an_interval(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(_recheck(storage, tmp_path, "--engine-opt", "engine_version=0.29.0", "--restarts", "3"),
                            capsys)
    assert status == ExitStatus.NOW_SLOWER, err
    assert "(new engine)" in out and "(study's engine)" in out and "speedup of the new engine: x0." in out
    assert "WARNING: engine changed the configuration" in out
    record = RecheckRecord.from_dict(load(STUDY, storage).rechecks()[-1])
    assert record.kind == rules.ENGINES and record.restarts_per_config == 3
    # Both sides ran in the same rounds, on the same seeds.
    seeds = [sorted(r.seed for r in e.restarts if r.ok and not r.cold) for e in record.verification.entries]
    assert seeds[0] == seeds[1] and len(seeds[0]) == 3


def test_an_unchanged_second_engine_holds(storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(_recheck(storage, tmp_path, "--engine-opt", "noise=0.035", "--restarts", "3"), capsys)
    assert status == ExitStatus.SUCCESS, err
    assert rules.NEW_SAME.upper() in out or rules.NEW_FASTER.upper() in out


def test_each_verdict_has_its_exit_status() -> None:
    from autotune.cli.recheck import EXIT_FOR_VERDICT

    F, N, S = Verdict.FASTER, Verdict.NOT_SIGNIFICANT, Verdict.SLOWER
    assert recheck_verdict(F, F, False) == rules.STILL_FASTER
    assert recheck_verdict(F, N, False) == rules.NO_LONGER_FASTER
    assert recheck_verdict(F, N, True) == rules.NO_LONGER_FASTER  # the speed first; the change is a warning
    assert recheck_verdict(F, S, True) == rules.NOW_SLOWER
    assert recheck_verdict(F, F, True) == rules.CONFIG_CHANGED
    assert recheck_verdict(N, N, False) == rules.STILL_NOT_FASTER
    assert recheck_verdict(N, F, False) == rules.NOW_FASTER
    assert {v: int(s) for v, s in EXIT_FOR_VERDICT.items()} == {
        rules.STILL_FASTER: 0, rules.STILL_NOT_FASTER: 0, rules.NEW_FASTER: 0, rules.NEW_SAME: 0,
        rules.CONFIG_CHANGED: 3, rules.NO_LONGER_FASTER: 5, rules.NOW_SLOWER: 6, rules.NOW_FASTER: 7}


def test_a_study_without_verification_has_nothing_to_recheck(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    storage = f"sqlite:///{tmp_path}/nv.db"
    status, _, err = _run(["tune", "--space", "search_spaces/h200.yaml", "--engine", "sim", "--study", "nv",
                           "--trials", "3", "--no-verify", "--storage", storage, "--workdir", str(tmp_path / "w"),
                           "--no-mlflow", "--quiet"], capsys)
    assert status == ExitStatus.SUCCESS, err
    status, _, err = _run(["recheck", "--study", "nv", "--storage", storage, "--workdir", str(tmp_path / "w"),
                           "--no-mlflow"], capsys)
    assert status == ExitStatus.NO_RESULT and len(err.strip().splitlines()) == 1 and "no verification" in err


def test_recheck_records_survive_a_resume_and_report_shows_the_history(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(_recheck(storage, tmp_path, "--restarts", "3"), capsys)[0] == ExitStatus.SUCCESS
    space = _space_at(tmp_path, storage, "0.29.0")
    assert _run(_recheck(storage, tmp_path, "--restarts", "3", "--space", space), capsys)[0] != ExitStatus.SUCCESS
    # Resume the study (more trials): its rechecks stay, and its verification is its own.
    status, out, err = _run(["tune", "--space", "search_spaces/h200.yaml", "--engine", "sim", "--study", STUDY,
                             "--trials", "9", "--top-k", "1", "--verify-rounds", "0", "--storage", storage,
                             "--workdir", str(tmp_path / "work"), "--no-mlflow", "--quiet"], capsys)
    assert status == ExitStatus.SUCCESS, err
    assert len(load(STUDY, storage).rechecks()) == 2
    status, out, err = _run(["report", "--study", STUDY, "--storage", storage], capsys)
    assert status == ExitStatus.SUCCESS, err
    assert "Rechecks (2; the verdict above is the study's own, never changed):" in out
    assert rules.STILL_FASTER in out and rules.NO_LONGER_FASTER.upper() in out
    status, _, err = _run(["report", "--study", STUDY, "--storage", storage, "--json", str(tmp_path / "r.json")],
                          capsys)
    import json

    assert len(json.loads((tmp_path / "r.json").read_text())["lineage"]["rechecks"]) == 2


def test_recheck_is_a_nested_run_of_the_study_parent(storage: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    status, _, err = _run(["track", "--study", STUDY, "--storage", storage, "--tracking-uri", uri], capsys)
    assert status == ExitStatus.SUCCESS, err
    argv = [a for a in _recheck(storage, tmp_path, "--restarts", "3") if a != "--no-mlflow"]
    status, _, err = _run([*argv, "--tracking-uri", uri], capsys)
    assert status == ExitStatus.SUCCESS, err
    parent = load(STUDY, storage).mlflow_parent_run_id()
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_run(parent).info.experiment_id],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent}' and tags.`autotune.kind` = 'recheck'")
    assert len(runs) == 1 and runs[0].data.tags["verdict"] == rules.STILL_FASTER
    assert runs[0].data.metrics["now.speedup"] > 1.3 and runs[0].data.metrics["holds"] == 1.0


# -- warm start ---------------------------------------------------------------------------------------------


def _tune(storage: str, tmp_path: Path, study: str, *extra: str) -> list[str]:
    return ["tune", "--space", "search_spaces/h200.yaml", "--engine", "sim", "--study", study, "--trials", "6",
            "--top-k", "1", "--storage", storage, "--workdir", str(tmp_path / "work"), "--no-mlflow", "--quiet",
            *extra]


def test_a_warm_start_queues_the_earlier_top_configurations_and_names_its_source(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = load(STUDY, storage)
    winner = source.verification().winner.candidate.config.label()
    status, out, err = _run(_tune(storage, tmp_path, "warm", "--warm-start", STUDY), capsys)
    assert status == ExitStatus.SUCCESS, err
    ledger = load("warm", storage)
    warm = ledger.meta().warm_start
    (src,) = warm["sources"]
    assert src["study"] == STUDY and src["configs"] and warm["queued"] == len(src["configs"])
    assert src["noise"] == "carried" and src["noise_restarts"] > 0 and src["differs"] == []
    # Its start costs stand in for kinds of start the new study has not measured (same engine and machine).
    assert src["start_costs"] == "carried" and warm["start_costs"]["warm"] and warm["start_costs"]["cold"]
    # Queued right after the baselines, each measured again here (its own restarts, not copied).
    trials = sorted(ledger.study.get_trials(deepcopy=False), key=lambda t: t.number)
    baselines = 2
    queued = [ledger.label(t) for t in trials[baselines:baselines + len(src["configs"])]]
    assert queued == src["configs"] and all(ledger.restarts(t) for t in trials[baselines:baselines + len(queued)])
    # The source's winner (ngram K=3, defaults) is the space's second baseline: queued once, as a baseline.
    assert winner == ledger.label(trials[1]) and winner not in queued
    assert f"from {STUDY}:" in out and "Warm start: " in out


def test_a_warm_start_across_engine_versions_is_allowed_and_named(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(["tune", "--space", _space_at(tmp_path, storage, "0.29.0"), "--engine", "sim",
                             "--study", "warm29", "--trials", "5", "--top-k", "1", "--storage", storage,
                             "--workdir", str(tmp_path / "work"), "--no-mlflow", "--quiet", "--warm-start", STUDY],
                            capsys)
    assert status == ExitStatus.SUCCESS, err
    (src,) = load("warm29", storage).meta().warm_start["sources"]
    assert "engine_version: 0.26.0 -> 0.29.0" in src["differs"] and src["noise"].startswith("not carried")
    assert src["start_costs"] == "not carried" and "start_costs" not in load("warm29", storage).meta().warm_start
    assert "differs: engine_version: 0.26.0 -> 0.29.0" in out


def test_a_warm_start_from_a_missing_study_is_one_line(storage: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(_tune(storage, tmp_path, "warm", "--warm-start", f"{STUDY},nosuch"), capsys)
    assert status == ExitStatus.BAD_INPUT
    assert err.strip().count("\n") == 0 and "--warm-start" in err and "'nosuch'" in err
    assert "warm" not in [s for s in __import__("optuna").get_all_study_names(storage)]


# -- the benchmarks ----------------------------------------------------------------------------------------------


def test_the_recheck_benchmark_scores_draws_on_ground_truth() -> None:
    from autotune.bench.recheck import draw_rechecks

    same = draw_rechecks("h200", 6, seed=0, restarts=3)
    assert same["draws"] == 6 and same["level"] == pytest.approx(0.95) and same["coverage_true"] >= 0.5
    assert same["verdicts"] == {rules.STILL_FASTER: 6} and same["changed_resolved"] == 0
    shifted = draw_rechecks("h200", 6, seed=0, version="0.29.0", restarts=3)
    assert shifted["true_speedup"] < 1.0 and shifted["changed_resolved"] == 1.0
    assert set(shifted["verdicts"]) <= {rules.NO_LONGER_FASTER, rules.NOW_SLOWER}


def test_the_warm_start_benchmark_runs_cold_and_warm_on_both_targets() -> None:
    from autotune.bench.warmstart import paired, run_seed, summarize

    rows = run_seed(0, budgets=(20,))
    assert {(r["target"], r["start"]) for r in rows} == {(t, s) for t in ("related", "unrelated")
                                                        for s in ("cold", "warm")}
    assert all(r["queued"] == 1 for r in rows if r["start"] == "warm")  # one per 15 starts of the budget
    assert all(r["queued"] == 0 and r["starts"] <= 20 for r in rows if r["start"] == "cold")
    assert len(summarize(rows)) == 4 and [p["n"] for p in paired(rows)] == [1, 1]


def test_a_shifted_landscape_is_related_and_named_in_the_engine_facts() -> None:
    from autotune.engines import EngineError
    from autotune.engines.sim import SimEngine
    from autotune.study import warm_start_top

    base, same = SimEngine(profile="random", landscape_seed=3), SimEngine(profile="random", landscape_seed=3,
                                                                         landscape_shift=0.0)
    moved = SimEngine(profile="random", landscape_seed=3, landscape_shift=0.1)
    assert base.landscape == same.landscape and moved.landscape != base.landscape
    assert moved.landscape.mode_effect.keys() == base.landscape.mode_effect.keys()
    assert "landscape_shift" in moved.describe().extra and "landscape_shift" not in base.describe().extra
    with pytest.raises(EngineError, match="landscape_shift"):
        SimEngine(profile="random", landscape_shift="big")
    assert [warm_start_top(b) for b in (None, 5, 20, 30, 45, 120)] == [3, 1, 1, 2, 3, 3]


def test_carried_start_costs_stand_in_only_until_the_study_measures_its_own() -> None:
    from autotune.core.records import RestartResult
    from autotune.study import StartCosts

    prior = {"warm": [0.5], "cold": [2.0]}
    empty = StartCosts.from_runs([]).with_prior(prior)
    assert empty.price((None, False)) == 0.5 and empty.price((None, True)) == 2.0 and empty.known
    own = StartCosts.from_runs([("k", RestartResult(status="ok", restart=0, seed=0, passes_tok_s=(1.0,),
                                                    wall_s=60.0))]).with_prior(prior)
    assert own.price(("k", False)) == 1.0 and own.price((None, True)) == 2.0  # its own warm start; no cold yet
    assert StartCosts.from_runs([]).with_prior(None) == StartCosts.from_runs([])


def test_a_configuration_that_fails_today_is_named(storage: str) -> None:
    from autotune.config.space import parse_space
    from autotune.core.records import RestartResult, RestartStatus
    from autotune.engines.sim import SimEngine
    from autotune.study import RecheckOptions, recheck

    class NoDrafter(SimEngine):
        def run_restart(self, config, workload, *, restart, seed):  # type: ignore[no-untyped-def]
            if config.num_speculative_tokens:
                return RestartResult.failure(RestartStatus.FAILED, "ngram drafter missing", restart=restart, seed=seed)
            return super().run_restart(config, workload, restart=restart, seed=seed)

    ledger = load(STUDY, storage)
    space = parse_space(yaml.safe_load(ledger.space_yaml()))
    record = recheck(ledger, space, NoDrafter(profile="h200", model_profile="dense"), RecheckOptions(restarts=3))
    assert record.verdict == rules.NO_LONGER_FASTER
    assert any("fails now: " in c and "ngram drafter missing" in c for c in record.resolved_changes)


def test_runner_ups_and_a_minutes_budget(storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.decisions.recheck import plan_recheck_restarts

    stored = load(STUDY, storage).verification()
    n_c, n_b, why = plan_recheck_restarts(stored, 2)
    assert n_c >= 3 and n_b >= 3 and why.startswith("planned like verification:")
    assert plan_recheck_restarts(stored, 2, restarts=4) == (4, 4, "--restarts 4")
    per_start = stored.minutes_used / stored.restarts_used
    # A budget for 2 cold starts and 6 warm ones: the plan takes no more than the least a side needs.
    small = plan_recheck_restarts(stored, 2, budget_minutes=per_start * 8)
    assert small[:2] == (3, 3) and small[0] + small[1] <= n_c + n_b
    status, out, err = _run(_recheck(storage, tmp_path, "--runner-ups", "--restarts", "2"), capsys)
    assert status in (ExitStatus.SUCCESS, ExitStatus.NO_LONGER_FASTER), err
    record = RecheckRecord.from_dict(load(STUDY, storage).rechecks()[-1])
    assert len(record.now["means"]) == len(stored.entries) == 3  # the dropped runner-up measured again too

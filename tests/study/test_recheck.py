"""``autotune recheck`` and ``tune --warm-start`` on a stored simulated study (tests/data/study-recheck-h200-sim.db).

The stored study ran the simulator's h200/dense profile on vLLM 0.26.0; its winner is ngram K=3 at 1.52x the
baseline. The simulated 0.29.0 runs speculation with full graphs PIECEWISE on sizes rounded to 8s
(engines/_sim_model.py), which takes the winner's lead away: the recheck must say "changed: now slower" and name the
changed resolved configuration.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import yaml

from autotune.records import decode
from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus
from autotune.decisions import recheck as rules
from autotune.decisions.recheck import ChangeTest, RecheckRecord, change_test, recheck_verdict
from autotune.stats.intervals import Verdict
from autotune.store.ledger import load

FIXTURE = Path(__file__).parents[1] / "data" / "study-recheck-h200-sim.db"
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
    # Nothing changed: no change the data support (the fixture's 3 stored restarts a side leave it undecided).
    assert "Verdict: UNDECIDED" in out and "WARNING" not in out and "Change test (95% anytime-valid" in out
    assert "then" in out and "now" in out and "x1.52 [1.35, 1.71]" in out  # the stored speedup beside today's
    ledger = load(STUDY, storage)
    assert ledger.verification() == before  # the study's own verdict is never touched
    (stored,) = [decode(RecheckRecord, r) for r in ledger.rechecks()]
    assert stored.verdict in (rules.UNDECIDED, rules.UNCHANGED) and stored.kind == rules.BASELINE_KIND
    assert stored.change_test is not None and stored.change_test.low < 1.0 < stored.change_test.high
    assert stored.now["verdict"] == Verdict.FASTER and stored.restarts_per_config >= 3
    assert not stored.resolved_changes and not stored.differences


def test_a_shifted_engine_is_no_longer_faster_and_the_changed_configuration_is_named(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(_recheck(storage, tmp_path, "--space", _space_at(tmp_path, storage, "0.29.0")), capsys)
    assert status == ExitStatus.NO_LONGER_FASTER, err
    assert "Verdict: CHANGED: NOW SLOWER" in out and "changed: now slower by " in out
    assert "WARNING: engine changed the configuration" in out
    assert "cudagraph_mode FULL_AND_PIECEWISE -> PIECEWISE" in out
    assert "cudagraph_capture_sizes [4, 8, 16, 24, 32] -> [8, 16, 24, 32]" in out
    assert "engine_version: 0.26.0 -> 0.29.0" in out
    (stored,) = load(STUDY, storage).rechecks()
    assert stored["verdict"] == rules.CHANGED_SLOWER and stored["resolved_changes"]
    assert stored["change"]["high"] < 1 / 1.05 and stored["change"]["stopped"] == "decided"


def test_two_engines_in_the_same_rounds_give_one_answer_with_an_interval(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(_recheck(storage, tmp_path, "--engine-opt", "engine_version=0.29.0", "--restarts", "3"),
                            capsys)
    assert status == ExitStatus.NOW_SLOWER, err
    assert "(new engine)" in out and "(study's engine)" in out and "speedup of the new engine: x0." in out
    assert "WARNING: engine changed the configuration" in out
    record = decode(RecheckRecord, load(STUDY, storage).rechecks()[-1])
    assert record.kind == rules.ENGINES and record.restarts_per_config == 3
    # Both sides ran in the same rounds, on the same seeds.
    seeds = [sorted(r.seed for r in e.restarts if r.ok and not r.cold) for e in record.verification.entries]
    assert seeds[0] == seeds[1] and len(seeds[0]) == 3


def test_an_unchanged_second_engine_holds(storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(_recheck(storage, tmp_path, "--engine-opt", "noise=0.035", "--restarts", "3"), capsys)
    assert status == ExitStatus.SUCCESS, err
    assert rules.NEW_SAME.upper() in out or rules.NEW_FASTER.upper() in out


def _change(verdict: str, now_high: float = 1.2) -> ChangeTest:
    return ChangeTest(verdict, 1.0, 0.9, 1.1, 0.05, 0.05, now_low=0.8, now_high=now_high)


def test_each_verdict_has_its_exit_status() -> None:
    from autotune.cli.recheck import EXIT_FOR_VERDICT

    assert recheck_verdict(_change(rules.UNCHANGED), False) == rules.UNCHANGED
    assert recheck_verdict(_change(rules.UNDECIDED), False) == rules.UNDECIDED
    assert recheck_verdict(_change(rules.CHANGED_SLOWER), True) == rules.CHANGED_SLOWER  # the speed first
    assert recheck_verdict(_change(rules.CHANGED_SLOWER, now_high=0.9), True) == rules.SLOWER_THAN_BASELINE
    assert recheck_verdict(_change(rules.CHANGED_FASTER), False) == rules.CHANGED_FASTER
    assert recheck_verdict(_change(rules.UNCHANGED), True) == rules.CONFIG_CHANGED
    assert recheck_verdict(_change(rules.UNDECIDED), True, fails_now=True) == rules.FAILS_NOW
    assert {v: int(s) for v, s in EXIT_FOR_VERDICT.items()} == {
        rules.UNCHANGED: 0, rules.UNDECIDED: 0, rules.NEW_FASTER: 0, rules.NEW_SAME: 0, rules.CONFIG_CHANGED: 3,
        rules.CHANGED_SLOWER: 5, rules.FAILS_NOW: 5, rules.SLOWER_THAN_BASELINE: 6, rules.NOW_SLOWER: 6,
        rules.CHANGED_FASTER: 7}


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
    assert rules.UNDECIDED in out and rules.CHANGED_SLOWER.upper() in out
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
    assert len(runs) == 1 and runs[0].data.tags["verdict"] in (rules.UNDECIDED, rules.UNCHANGED)
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


def test_the_recheck_benchmark_counts_alarms_and_detections() -> None:
    from autotune.bench.recheck import REGRESSION, draw_rechecks, upper_bound

    same = draw_rechecks("h200", 4, seed=0, restarts=4)
    assert same["draws"] == 4 and same["alarms"] == 0 and same["coverage_change"] == 1.0
    assert sum(same["verdicts"].values()) == 4
    regressed = draw_rechecks("h200", 4, seed=0, restarts=6, regress=REGRESSION)
    assert regressed["true_speedup"] == pytest.approx(same["true_speedup"] * REGRESSION)
    assert regressed["slower"] == regressed["alarms"] == 4  # the h200 profile's noise is low: seen every time
    shifted = draw_rechecks("h200", 3, seed=0, version="0.29.0", restarts=4)
    assert shifted["true_speedup"] < 1.0 and shifted["slower"] == 3
    assert upper_bound(0, 200) == pytest.approx(1 - 0.05 ** (1 / 200)) and upper_bound(3, 3) == 1.0


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
    assert record.verdict == rules.FAILS_NOW
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
    assert status == ExitStatus.SUCCESS, err
    record = decode(RecheckRecord, load(STUDY, storage).rechecks()[-1])
    assert len(record.now["means"]) == len(stored.entries) == 3  # the dropped runner-up measured again too


# -- issue 44, principle 1: "did it change?" ---------------------------------------------------------------------


def _lognormal(rng, ratio: float, cv: float, n: int) -> list[float]:
    import numpy as np

    return list(np.exp(rng.normal(np.log(2000.0 * ratio), cv, n)))


def test_the_issues_unchanged_rechecks_are_no_alarm() -> None:
    """The issue's cases, as figures: a winner stored at x1.14 [1.02, 1.28] rechecked at x1.13 [1.00, 1.28] (the old
    rule: "no longer faster", exit 5), and a study whose baseline won, x0.92 then and x0.94 now (the old rule: "now
    slower", exit 6). Neither is a change the data support."""
    import numpy as np

    from autotune.cli.recheck import EXIT_FOR_VERDICT

    then_w = [2280.0, 2150.0, 2420.0, 2330.0, 2210.0]
    then_b = [2000.0, 1930.0, 2070.0, 1990.0, 2010.0]
    now_w = [2260.0, 2090.0, 2430.0]
    now_b = [2000.0, 1960.0, 2050.0]
    assert 1.1 < np.mean(then_w) / np.mean(then_b) < 1.2 and 1.1 < np.mean(now_w) / np.mean(now_b) < 1.2
    test = change_test((then_w, then_b), (now_w, now_b))
    assert test.verdict == rules.UNDECIDED and test.low < 1.0 < test.high
    assert EXIT_FOR_VERDICT[recheck_verdict(test, False)] == ExitStatus.SUCCESS
    base_won = change_test(([1840.0, 1790.0, 1880.0], [2000.0, 1990.0, 2010.0]),
                           ([1880.0, 1860.0, 1900.0], [2000.0, 1980.0, 2010.0]))
    assert EXIT_FOR_VERDICT[recheck_verdict(base_won, False)] == ExitStatus.SUCCESS


def test_a_change_beyond_the_margin_is_named_with_its_size_and_interval() -> None:
    rng = __import__("numpy").random.default_rng(7)
    then = (_lognormal(rng, 1.5, 0.03, 5), _lognormal(rng, 1.0, 0.03, 5))
    slower = change_test(then, (_lognormal(rng, 1.2, 0.03, 6), _lognormal(rng, 1.0, 0.03, 6)))
    assert slower.verdict == rules.CHANGED_SLOWER and slower.high < 1 / 1.05 and 0.7 < slower.ratio < 0.9
    assert "changed: now slower by " in slower.describe() and "[" in slower.describe()
    worse = change_test(then, (_lognormal(rng, 0.8, 0.03, 6), _lognormal(rng, 1.0, 0.03, 6)))
    assert recheck_verdict(worse, False) == rules.SLOWER_THAN_BASELINE  # today slower than the baseline too
    faster = change_test(then, (_lognormal(rng, 1.9, 0.03, 6), _lognormal(rng, 1.0, 0.03, 6)))
    assert faster.verdict == rules.CHANGED_FASTER
    # Tight restarts on both sides, nothing changed: shown unchanged within the margin.
    tight = (_lognormal(rng, 1.5, 0.005, 8), _lognormal(rng, 1.0, 0.005, 8))
    same = change_test(tight, (_lognormal(rng, 1.5, 0.005, 8), _lognormal(rng, 1.0, 0.005, 8)))
    assert same.verdict == rules.UNCHANGED and 1 / 1.05 <= same.low <= same.high <= 1.05
    # Undecided says how many more rounds would decide it (or that none would).
    open_ = change_test(then, (_lognormal(rng, 1.38, 0.03, 2), _lognormal(rng, 1.0, 0.03, 2)))
    assert open_.verdict == rules.UNDECIDED and "undecided: " in open_.describe()


def test_the_change_sequence_holds_its_level_at_every_look() -> None:
    """A/A rechecks looked at after every round, up to 16: the share whose sequence ever misses the true change (0)
    stays under alpha. A fixed-n t interval read at every look would not (that is why a sequence)."""
    import numpy as np

    from autotune.stats.anytime import change_sequence

    rng = np.random.default_rng(44)
    runs, missed, fixed_missed = 400, 0, 0
    for _ in range(runs):
        then = (_lognormal(rng, 1.2, 0.06, 4), _lognormal(rng, 1.0, 0.06, 4))
        now_w, now_b = _lognormal(rng, 1.2, 0.06, 16), _lognormal(rng, 1.0, 0.06, 16)
        seqs = [change_sequence(*then, now_w[:m], now_b[:m]) for m in range(1, 17)]
        missed += any(not (s.low <= 0.0 <= s.high) for s in seqs)
        # The same difference and standard error, read as a fixed-n 95% interval at every look.
        fixed_missed += any(abs(s.estimate) > 1.96 * s.se for s in seqs[1:])
    assert missed / runs <= 0.05
    assert fixed_missed / runs > 0.05


def test_rechecks_in_a_row_of_an_unchanged_study_never_alarm(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    statuses = [_run(_recheck(storage, tmp_path, "--restarts", "4"), capsys)[0] for _ in range(5)]
    assert statuses == [ExitStatus.SUCCESS] * 5
    records = [decode(RecheckRecord, r) for r in load(STUDY, storage).rechecks()]
    assert len(records) == 5 and len({r.seed_base for r in records}) == 5


# -- issue 44, principle 7: concurrent rechecks, --budget-minutes ------------------------------------------------


def test_two_rechecks_started_together_measure_on_distinct_seeds_and_both_are_kept(
        storage: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "autotune", *_recheck(storage, tmp_path, "--restarts", "3")]
    procs = [subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(2)]
    errors = [p.communicate(timeout=300)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    records = [decode(RecheckRecord, r) for r in load(STUDY, storage).rechecks()]
    assert len(records) == 2  # neither overwrote the other's record
    seeds = [{r.seed for e in rec.verification.entries for r in e.restarts} for rec in records]
    assert records[0].seed_base != records[1].seed_base and not seeds[0] & seeds[1]


def test_a_claimed_recheck_index_is_never_handed_out_twice(storage: str) -> None:
    from autotune.study._recheck import _claim_index

    ledger = load(STUDY, storage)
    (first, a, _), (second, b, _) = _claim_index(ledger, set()), _claim_index(ledger, set())
    assert a != b  # both held at once: two rechecks running together
    first.complete()
    second.complete()
    assert _claim_index(ledger, set())[1] not in (a, b)  # used indexes stay used


def test_a_recheck_budget_too_small_for_one_round_is_refused_before_any_start(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(_recheck(storage, tmp_path, "--budget-minutes", "0.01"), capsys)
    assert status == ExitStatus.BAD_INPUT and not out
    assert len(err.strip().splitlines()) == 1 and "--budget-minutes 0.01 is too small" in err and "or more" in err
    assert load(STUDY, storage).rechecks() == []


def test_a_recheck_stops_starting_engines_once_its_budget_is_spent(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.study import StartCosts

    ledger = load(STUDY, storage)
    costs = StartCosts.of(ledger)
    warm = max(costs.price((None, False)), max(costs.warm))
    budget = 2 * costs.price((None, True)) + 4 * warm  # a round and a bit, far less than --restarts 10
    status, out, err = _run(_recheck(storage, tmp_path, "--restarts", "10", "--budget-minutes", f"{budget:.4f}"),
                            capsys)
    assert status == ExitStatus.SUCCESS, err
    record = decode(RecheckRecord, load(STUDY, storage).rechecks()[-1])
    spent = sum(r.wall_s for e in record.verification.entries for r in e.restarts) / 60.0
    assert record.minutes_used == pytest.approx(spent, abs=1e-3)
    # tune's rule: at most the one start begun within the budget goes past it.
    assert spent <= budget + max(costs.cold + costs.warm) + 1e-9
    assert record.change_test.stopped in ("budget", "decided") and record.change_test.restarts[2] < 10
    assert "engine minutes" in out


# -- an interrupted recheck keeps what it measured ----------------------------------------------------------------


def _measured(record: RecheckRecord) -> list[tuple[str, int, bool]]:
    return [(e.candidate.config.key(), r.seed, r.cold) for e in record.verification.entries for r in e.restarts]


def test_an_interrupted_recheck_keeps_its_restarts_and_the_same_recheck_continues_from_them(
        storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C of ``recheck`` kept nothing and printed no progress; run again, it started over on new seeds. Now
    each restart is stored as it lands and printed; the same command continues on the same seeds, the restarts
    already measured kept and none run twice."""
    from autotune.engines.sim import SimEngine
    from autotune.study._recheck import RECHECK_JOB

    real = SimEngine.run_restart
    calls: list[tuple[str, int]] = []

    def interrupted(self, config, workload, *, restart, seed):
        if len(calls) == 5:
            raise KeyboardInterrupt  # Ctrl-C in the sixth engine start
        calls.append((config.key(), seed))
        return real(self, config, workload, restart=restart, seed=seed)

    monkeypatch.setattr(SimEngine, "run_restart", interrupted)
    status, _, err = _run(_recheck(storage, tmp_path, "--restarts", "4"), capsys)
    assert status == ExitStatus.INTERRUPTED, err
    assert err.count(" seed=") == 5, err  # a line per restart as it landed
    kept = load(STUDY, storage).claim_restarts(f"{RECHECK_JOB}-0")
    assert sorted((k, r["seed"]) for k, rs in kept.items() for r in rs) == sorted(calls)
    assert load(STUDY, storage).rechecks() == []

    again: list[tuple[str, int]] = []

    def counted(self, config, workload, *, restart, seed):
        again.append((config.key(), seed))
        return real(self, config, workload, restart=restart, seed=seed)

    monkeypatch.setattr(SimEngine, "run_restart", counted)
    status, out, err = _run(_recheck(storage, tmp_path, "--restarts", "4"), capsys)
    assert status == ExitStatus.SUCCESS, err
    assert "continuing from the" in err
    assert not set(again) & set(calls)  # no restart run twice
    records = load(STUDY, storage).rechecks()
    assert len(records) == 1
    record = decode(RecheckRecord, records[0])
    measured = _measured(record)
    assert sorted((k, s) for k, s, _ in measured) == sorted(calls + again)  # the first run's restarts are in it
    assert len(set(measured)) == len(measured)
    # The next recheck is a new one: its own index and seeds.
    status, _, err = _run(_recheck(storage, tmp_path, "--restarts", "2"), capsys)
    assert status == ExitStatus.SUCCESS, err
    later = decode(RecheckRecord, load(STUDY, storage).rechecks()[-1])
    assert later.seed_base != record.seed_base and not {s for _, s, _ in _measured(later)} & {s for _, s, _ in measured}


def test_a_recheck_killed_mid_run_is_continued_by_the_same_command(storage: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """kill -9 of a ``recheck`` process: its claim's holder is gone, the restarts it stored stay, and the same
    command continues from them on the same seeds."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from autotune.study._recheck import RECHECK_JOB

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    # Restarts that take real time (the simulator sleeps 0.5 s per simulated minute), so the kill lands mid-run.
    study = load(STUDY, storage).study
    meta = study.user_attrs["autotune:meta"]
    study.set_user_attr("autotune:meta", {**meta, "engine_options": {**meta["engine_options"], "time_scale": 0.008}})
    argv = [sys.executable, "-m", "autotune", *_recheck(storage, tmp_path, "--restarts", "6")]
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kept: dict = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            kept = load(STUDY, storage).claim_restarts(f"{RECHECK_JOB}-0")
            if sum(len(rs) for rs in kept.values()) >= 3:
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    if load(STUDY, storage).rechecks():
        pytest.skip("the recheck finished before the kill could land")
    kept = load(STUDY, storage).claim_restarts(f"{RECHECK_JOB}-0")
    first = {(k, r["seed"], bool(r.get("cold"))) for k, rs in kept.items() for r in rs}
    assert len(first) >= 3
    status, _, err = _run(_recheck(storage, tmp_path, "--restarts", "6"), capsys)
    assert status == ExitStatus.SUCCESS, err
    record = decode(RecheckRecord, load(STUDY, storage).rechecks()[0])
    measured = _measured(record)
    assert first <= set(measured) and len(set(measured)) == len(measured)

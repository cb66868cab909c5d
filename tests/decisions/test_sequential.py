"""Sequential verification: the spending function, the rounds it runs, when it stops, and what the report says."""

from __future__ import annotations

import io
import math

import numpy as np
import yaml
import pytest

from autotune.records import decode, encode
from autotune.cli._main import raw_main
from autotune.config.space import parse_space
from autotune.core.exit_status import ExitStatus
from autotune.decisions import sequential as seq
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate, Verification
from autotune.stats.sequential import look_levels, obrien_fleming_spent
from autotune.study import StudyOptions, run_verification
from tests.conftest import SMALL_SPACE, FakeEngine, by_params
from tests._helpers.landscape import BETTER, TRUTH


def test_the_spending_function_is_monotone_and_spends_exactly_alpha_at_the_last_look():
    ts = np.linspace(0.0, 1.0, 41)
    spent = [obrien_fleming_spent(float(t), 0.05) for t in ts]
    assert spent[0] == 0.0 and spent[-1] == 0.05
    assert all(b > a for a, b in zip(spent[1:], spent[2:]))  # strictly increasing once information comes in
    assert obrien_fleming_spent(1.4, 0.05) == 0.05  # a design past its plan spends no more
    assert obrien_fleming_spent(0.375, 0.05) < 0.002  # O'Brien-Fleming: almost nothing early
    assert look_levels([1.0], 0.05) == pytest.approx([0.05])  # one look is the fixed design


def test_the_boundaries_hold_alpha_over_every_look_together():
    # Simulated standardised statistics at the looks (Brownian motion with no drift): the chance that any look
    # crosses its boundary is the alpha spent by the last, and each look's nominal level is below alpha.
    fractions = [0.375, 0.5, 0.625, 0.75, 0.875, 1.0]
    levels = look_levels(fractions, 0.05)
    assert all(b > a for a, b in zip(levels, levels[1:])) and levels[-1] < 0.05
    from scipy import stats

    bounds = stats.norm.isf(np.asarray(levels) / 2.0)
    rng = np.random.default_rng(0)
    steps = np.diff([0.0, *fractions])
    paths = np.cumsum(rng.normal(size=(200_000, len(fractions))) * np.sqrt(steps), axis=1)
    z = paths / np.sqrt(fractions)
    crossed = float(np.mean(np.any(np.abs(z) >= bounds, axis=1)))
    assert crossed == pytest.approx(0.05, abs=3 * math.sqrt(0.05 * 0.95 / 200_000))
    # Stopping on a look's own nominal 5% instead would spend far more than 5%.
    assert float(np.mean(np.any(np.abs(z) >= 1.96, axis=1))) > 0.09


def _pair(speedup: float, cv: float) -> tuple[FakeEngine, list[Candidate], object]:
    """One challenger ``speedup`` times the baseline, lognormal noise ``cv`` drawn from each restart's seed."""
    space = parse_space(SMALL_SPACE)
    winner = space.config_from_params(BETTER)

    def value(config, restart, seed):
        side = int(config.key() == winner.key())
        truth = 1000.0 * (speedup if side else 1.0)
        # Each side its own noise on a seed (a speedup of 1 must not give the two sides equal restarts).
        rng = np.random.default_rng([seed, int(truth), side])
        return truth * math.exp(float(rng.normal(0.0, cv)))

    engine = FakeEngine(value=value)
    return engine, [Candidate(CANDIDATE, winner), Candidate(BASELINE, space.baseline())], space.workload


def _verify(speedup: float, cv: float, rounds: int, **kw) -> tuple[Verification, FakeEngine]:
    engine, candidates, workload = _pair(speedup, cv)
    v = run_verification(engine, workload, candidates, 3, seed_for=lambda r: r, sequential_rounds=rounds, **kw)
    return v, engine


def test_a_clear_winner_stops_early_with_a_verdict():
    v, engine = _verify(1.3, 0.03, rounds=5)
    look = v.sequential
    assert v.verdict == "faster" and look is not None and look.stopped == seq.DECIDED
    assert look.look < look.looks == 6 and v.restarts_used < 2 * (3 + 5)
    assert look.alpha == pytest.approx(0.05) and look.alpha_spent < 0.05
    # The interval printed is the design's: stated at 95%, computed at the look's stricter nominal level.
    assert v.winner.comparison.confidence == pytest.approx(0.95) and look.nominal_confidence > 0.95


def test_a_straddling_interval_gets_rounds_of_the_winner_and_the_baseline_while_the_plan_lasts():
    v, engine = _verify(1.0, 0.10, rounds=3)
    look = v.sequential
    assert v.verdict == "no significant difference" and not look.equivalent
    assert look.stopped == seq.PLANNED and look.look == look.looks == 4
    assert v.restarts_used == 2 * (3 + 3) and all(e.summary.n == 6 for e in v.entries)
    assert look.alpha_spent == pytest.approx(0.05)  # the plan ran to its end: all of alpha is spent
    # Interleaved on matched seeds: winner then baseline, round by round.
    assert [seed for _, seed in engine.calls[6:]] == [3, 3, 4, 4, 5, 5]


def test_an_interval_inside_the_margin_stops_on_equivalence():
    v, _ = _verify(1.0, 0.02, rounds=5)
    look = v.sequential
    assert look.stopped == seq.EQUIVALENT and look.equivalent and 1 < look.look < look.looks
    c = v.winner.comparison
    assert 1 / 1.03 <= c.ci_low and c.ci_high <= 1.03 and v.verdict == "no significant difference"
    narrower, _ = _verify(1.0, 0.02, rounds=5, margin=0.005)
    assert narrower.sequential.stopped == seq.PLANNED and not narrower.sequential.equivalent


def test_rounds_stop_when_the_budget_runs_out():
    engine, candidates, workload = _pair(1.0, 0.10)
    # The plan is made when 5 rounds seem to fit; the starts then cost more than forecast and one round fits.
    v = run_verification(engine, workload, candidates, 3, seed_for=lambda r: r, sequential_rounds=5,
                         may_start=lambda n: len(engine.calls) + 2 <= 8)
    assert v.sequential.stopped == seq.BUDGET and v.sequential.look == 2 and v.sequential.looks == 6
    assert v.restarts_used == 8 and v.sequential.alpha_spent < 0.05


def test_a_budget_with_no_room_at_the_first_look_keeps_the_fixed_design():
    # The plan reads the budget, never the data: with no round left to pay for it is the fixed design, the same
    # verdict at the same level as without sequential rounds.
    engine, candidates, workload = _pair(1.05, 0.10)
    tight = run_verification(engine, workload, candidates, 3, seed_for=lambda r: r, sequential_rounds=5,
                             may_start=lambda n: False)
    engine, candidates, workload = _pair(1.05, 0.10)
    fixed = run_verification(engine, workload, candidates, 3, seed_for=lambda r: r, sequential_rounds=0)
    assert tight.sequential is None and encode(tight) == encode(fixed)
    engine, candidates, workload = _pair(1.05, 0.10)
    some = run_verification(engine, workload, candidates, 3, seed_for=lambda r: r, sequential_rounds=5,
                            may_start=lambda n: n <= 4)
    assert some.sequential.looks == 3  # two rounds fitted at the first look


def test_verification_records_with_and_without_the_design_load():
    v, _ = _verify(1.3, 0.03, rounds=5)
    assert decode(Verification, encode(v)) == v
    old = encode(v)
    del old["sequential"]  # what autotune before the sequential design stored
    assert decode(Verification, old).sequential is None


def test_the_report_states_the_design_and_json_carries_it(tmp_path):
    from autotune.report._build import build_report
    from autotune.report._report import render_report
    from autotune.study import run_study

    space = parse_space(SMALL_SPACE)
    options = StudyOptions(study_name="seq", storage=f"sqlite:///{tmp_path / 'o.db'}", workdir=str(tmp_path),
                           trials=6, top_k=1, verify_restarts=3, seed=0)
    ledger = run_study(space, FakeEngine(by_params(TRUTH), noise=0.02), options)
    look = ledger.verification().sequential
    assert look is not None and ledger.verify_sequential() is not None
    report = build_report(ledger)
    text = render_report(report)
    assert f"sequential: look {look.look} of {look.looks}, alpha spent" in text
    assert report.to_json()["verification"]["sequential"]["looks"] == look.looks


@pytest.mark.parametrize(("flag", "value"), [("--verify-margin", "0"), ("--verify-margin", "1.5"),
                                             ("--verify-rounds", "-1")])
def test_bad_sequential_settings_are_one_line_errors_naming_the_flag(tmp_path, capsys, flag, value):
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(SMALL_SPACE))
    status = raw_main(["tune", "--space", str(space), "--engine", "sim", "--storage",
                       f"sqlite:///{tmp_path}/o.db", "--no-mlflow", flag, value], out=io.StringIO())
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == ExitStatus.BAD_INPUT and len(err) == 1 and flag in err[0]


def test_an_open_verdict_whose_budget_paid_for_no_round_says_so(tmp_path):
    # The H200 MoE study ended "no significant difference" at 31.0 of 30 engine-minutes and said nothing of the
    # sequential rounds it was set to run; only --json's "sequential": null showed that none fitted.
    from autotune.report._build import build_report
    from autotune.report._report import render_report
    from autotune.study import run_study

    space = parse_space(SMALL_SPACE)
    options = StudyOptions(study_name="tight", storage=f"sqlite:///{tmp_path / 'o.db'}", workdir=str(tmp_path),
                           trials=50, top_k=1, verify_restarts=3, seed=0, budget_minutes=14.0)
    # Every speculative configuration 2% faster under 10% restart noise: three rounds cannot settle that.
    engine = FakeEngine(lambda c: 1000.0 * (1.02 if c.num_speculative_tokens else 1.0), noise=0.10, wall_s=60.0)
    ledger = run_study(space, engine, options)
    plan = ledger.verify_sequential()
    assert plan is not None and plan.extra_rounds == 0
    report = build_report(ledger)
    assert report.verdict == "undecided" and not report.winner_is_baseline  # never a bare "no difference" (issue 41)
    text = render_report(report)
    line = next(x for x in text.splitlines() if x.startswith("No sequential round ran"))
    used = report.budget.minutes_used
    assert "the interval still straddles 1" in line and "up to 5 rounds" in line
    assert f"{ledger.budget_used()[1]:.1f} of 14 engine-minutes used" in line and "~2.0 min" in line, line
    assert report.to_json()["verification"]["no_sequential"] == line and used <= 14.0 + 2.0
    # A study whose plan had rounds, or no sequential design at all, says nothing of the kind.
    fixed = StudyOptions(study_name="fixed", storage=f"sqlite:///{tmp_path / 'o.db'}", workdir=str(tmp_path),
                         trials=6, top_k=1, verify_restarts=3, seed=0, verify_sequential_rounds=0)
    assert "No sequential round ran" not in render_report(build_report(run_study(space, engine, fixed)))

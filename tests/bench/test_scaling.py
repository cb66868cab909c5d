"""The scaling benchmark's summary: speedups and regret paired by seed, and whether N workers' regret is worse
than one worker's beyond seed noise. Runs of whole studies live in ``make bench-scaling`` (docs/scaling.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autotune.cli._main import raw_main
from autotune.bench.scaling import ScalingRun, regret_worse_p, render, summarize
from autotune.core.exit_status import ExitStatus


def _run(workers: int, seed: int, regret: float, wall_h: float = 1.0,
         candidates: tuple[float, ...] = ()) -> ScalingRun:
    return ScalingRun("p", workers, 120, seed, wall_h, 120, regret, 12, None, candidates)


def test_a_coin_flip_between_two_near_equal_configurations_is_not_called_worse():
    # 9 and 11 seeds of 20 on the worse of two configurations, on different seeds: the medians differ (0 against
    # 0.24%), the paired test sees no more than chance.
    one = [_run(1, s, 0.0024 if s < 9 else 0.0) for s in range(20)]
    many = [_run(4, s, 0.0024 if s >= 9 else 0.0) for s in range(20)]
    rows = {r["workers"]: r for r in summarize(one + many)}
    assert rows[1]["median_regret"] == 0.0 and rows[4]["median_regret"] == pytest.approx(0.0024)
    assert rows[1]["seeds_with_regret"] == 9 and rows[4]["seeds_with_regret"] == 11
    assert rows[1]["p_worse"] is None
    assert rows[4]["p_worse"] > 0.05


def test_regret_worse_on_most_seeds_is_called_worse():
    one = [_run(1, s, 0.0) for s in range(20)]
    many = [_run(8, s, 0.02 if s < 15 else 0.0) for s in range(20)]
    row = next(r for r in summarize(one + many) if r["workers"] == 8)
    assert row["p_worse"] < 0.001
    assert row["mean_regret"] == pytest.approx(0.015)


def test_regret_better_with_more_workers_is_not_called_worse():
    assert regret_worse_p([0.0] * 10, [0.01] * 10) > 0.99


def test_identical_regret_on_every_seed_gives_no_evidence_and_no_pairs_give_no_p():
    assert regret_worse_p([0.01, 0.0], [0.01, 0.0]) == 1.0
    assert regret_worse_p([], []) is None


def test_speedup_is_paired_by_seed_and_the_table_has_a_row_per_worker_count():
    runs = [_run(1, 0, 0.0, 10.0), _run(1, 1, 0.0, 20.0), _run(2, 0, 0.0, 5.0), _run(2, 1, 0.0, 5.0)]
    rows = summarize(runs)
    two = next(r for r in rows if r["workers"] == 2)
    assert two["median_speedup"] == pytest.approx(3.0) and two["min_speedup"] == pytest.approx(2.0)
    table = render(rows).splitlines()
    assert len(table) == 2 + 2
    assert table[-1].startswith("| p | 120 | 2 | 2 |") and "| 0/2 | 1.00 | - | 0/2 | 120 |" in table[-1]


def test_the_regret_splits_into_what_the_search_handed_over_and_what_verification_picked():
    runs = [_run(1, 0, 0.0, candidates=(0.0024, 0.0, 0.03)), _run(1, 1, 0.0024, candidates=(0.0024, 0.0, 0.0)),
            _run(1, 2, 0.0024, candidates=(0.0024, 0.03))]
    assert [r.picked_best_candidate for r in runs] == [True, False, True]
    row = summarize(runs)[0]
    assert row["picked_best_candidate"] == 2
    assert row["mean_best_candidate_regret"] == pytest.approx(0.0008)
    assert "| 0.08% | 2/3 |" in render([row])


def test_runs_stored_in_several_goes_are_summarised_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"runs": [dataclasses.asdict(_run(1, 0, 0.0, 4.0, (0.0,))),
                                          dataclasses.asdict(_run(2, 0, 0.0, 2.0, (0.0,)))]}))
    second.write_text(json.dumps({"runs": [dataclasses.asdict(_run(1, 1, 0.0, 4.0, (0.0,))),
                                           dataclasses.asdict(_run(2, 1, 0.01, 1.0, (0.0,)))]}))
    assert raw_main(["bench-scaling", "--summarize", str(first), str(second)]) == ExitStatus.SUCCESS
    row = capsys.readouterr().out.strip().splitlines()[-1]
    assert row.startswith("| p | 120 | 2 | 2 | 1.50 | 3.00x (2.00x) |") and "| 1/2 |" in row


def test_summarize_names_a_file_that_is_not_a_benchmark_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"trials": []}))
    assert raw_main(["bench-scaling", "--summarize", str(other)]) == ExitStatus.BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(other) in err[0] and "--json" in err[0]

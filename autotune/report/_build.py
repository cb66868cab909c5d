"""The report built from a study's ledger: :func:`build_report` reads the ledger once (counts, warnings, failures,
the budget, the verification table and its verdict, latency, load levels, machine notes, phases, output checks,
lineage) into the typed :class:`~autotune.report._report.Report` that everything else reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.core.records import speculation_plan_change
from autotune.decisions.sequential import DEFAULT_MARGIN
from autotune.report._counts import FAILED, INTERRUPTED, classify_trials, count_outcomes, listed
from autotune.report._machine import machine_notes
from autotune.report._no_result import compared_in_search, no_result_reason
from autotune.report._report import Budget, ChangedConfig, Report, SearchBest, SearchTrial
from autotune.report._rows import VerificationTable, VerifiedRow
from autotune.report._simcheck import simulator_check
from autotune.report._verdict import open_verdict_note
from autotune.report.latency import prompts_note, search_latency, slo_outcome
from autotune.report.levels import level_bests, schedule_note
from autotune.report.lineage import lineage_of
from autotune.report.outputs import output_checks
from autotune.report.phases import phase_totals
from autotune.store.ledger import Ledger

__all__ = ["build_report"]


def build_report(study: Ledger | optuna.Study, *, engine: Any = None, space: Any = None) -> Report:
    """Read the study's record into a :class:`Report`.

    Args:
        study: The study's ledger (an Optuna study is wrapped in one).
        engine, space: With the sim engine and its space, the report also says how good the winner truly is.
    """
    ledger = study if isinstance(study, Ledger) else Ledger(study)
    trials = ledger.study.get_trials(deepcopy=False)
    records = ledger.trial_records()
    meta = ledger.meta()
    # One classification for the header's counts and the lists below it (autotune.report._counts).
    outcomes = classify_trials(ledger)
    counts = count_outcomes(outcomes)
    warnings = [ChangedConfig(r.number, r.config.label(), tuple(r.summary.differences))
                for r in records if r.summary is not None and r.summary.differences and r.duplicate_of is None]
    failures = listed(outcomes, FAILED)
    restarts_used, minutes_used = ledger.budget_used()
    complete = [(t.value, t) for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    search_best = None
    if complete:
        value, best = max(complete, key=lambda vt: vt[0])
        search_best = SearchBest(best.number, ledger.label(best), float(value))
    v = ledger.verification()
    table = winner = baseline = verdict = check = None
    if v is not None:
        rows = _flag_speculation_changes(ledger, tuple(VerifiedRow.from_verified(e) for e in v.entries))
        table = VerificationTable(rows, v.restarts_per_config, v.restarts_used, round(v.minutes_used, 3),
                                  v.max_restarts, v.sequential, open_verdict_note(ledger, meta, v), v.plan,
                                  v.baseline_restarts, v.extension)
        winner = rows[v.winner_index]
        baseline = next(r for r in rows if r.is_baseline)
        verdict = v.answer(meta.verify_margin if meta.verify_margin is not None else DEFAULT_MARGIN)
        warnings += _verification_warnings(rows, warnings)
        if engine is not None and space is not None:
            check = simulator_check(engine, space, winner.config)
    budget = Budget(restarts_used, round(minutes_used, 3), meta.budget_restarts, meta.budget_minutes,
                    None if v is None else v.restarts_used)
    # Under goodput the limits judge each request, not a configuration's percentiles: nothing to meet or miss.
    gating = {} if meta.objective == "goodput" else meta.slo
    outcome = None if table is None else slo_outcome(table.entries, winner, baseline, gating)
    search_trials = tuple(SearchTrial(r) for r in records)
    if table is not None:
        levels = level_bests(meta.objective, [(e.label, e.restarts) for e in table.entries], "verification",
                             None if winner is None else winner.label, None if baseline is None else baseline.label)
    else:
        levels = level_bests(meta.objective, [(r.config.label(), r.restarts) for r in records
                                              if r.duplicate_of is None], "search")
    return Report(ledger.name, meta, counts, tuple(warnings), failures, budget, ledger.search_stopped(),
                  search_best, table, winner, baseline, verdict, check, prompts=prompts_note(meta),
                  objective=meta.objective, slo=dict(meta.slo), search_latency=search_latency(ledger),
                  slo_outcome=outcome, search_trials=search_trials,
                  no_result=no_result_reason(counts, failures, winner, baseline, table is not None,
                                             table.entries if table else (),
                                             compared_in_search(outcomes, records, baseline)), levels=levels,
                  cold_starts=_cold_starts_line(ledger),
                  machine=machine_notes([*((f"trial {r.number}", r.config, r.restarts) for r in records
                                           if r.duplicate_of is None),
                                         *(("verification", e.config, e.restarts) for e in (table.entries
                                                                                           if table else ()))],
                                        meta.workload),
                  phases=phase_totals(ledger.restarts_spent()),
                  output_checks=output_checks(ledger, records, space, None if winner is None or winner.is_baseline
                                              else winner.config.key()),
                  interrupted=listed(outcomes, INTERRUPTED), search_end=ledger.search_end(), lineage=lineage_of(ledger),
                  schedule=schedule_note(ledger, v, meta.objective, meta.workload.get("concurrency")))


def _cold_starts_line(ledger: Ledger) -> str | None:
    """The cold-start verdict as a sentence; ``None`` when the study saw no cold start with a warm restart."""
    verdict = ledger.cold_verdict()
    if not verdict.pairs:
        return None
    text = verdict.describe()
    return text[0].upper() + text[1:]


def _flag_speculation_changes(ledger: Ledger, rows: tuple[VerifiedRow, ...]) -> tuple[VerifiedRow, ...]:
    """A verified default-mode configuration with speculation whose capture mode differs from what the same
    defaults resolved to without it (see :func:`speculation_plan_change`) is flagged, the winner included."""
    base_mode = next((r.resolved_mode for r in rows if r.is_baseline), None)
    out = []
    for row in rows:
        config = row.config
        if config.cudagraph_mode is None and config.num_speculative_tokens:
            change = speculation_plan_change(config, row.resolved_mode,
                                             ledger.mode_without_speculation(config) or base_mode)
            if change is not None and not any(d.startswith(f"{change.field}:") for d in row.differences):
                row = dataclasses.replace(row, differences=(*row.differences, str(change)))
        out.append(row)
    return tuple(out)


def _verification_warnings(rows: Sequence[VerifiedRow], known: Sequence[ChangedConfig]) -> list[ChangedConfig]:
    """Silent changes seen in verification that the search's warnings do not list already."""
    out: list[ChangedConfig] = []
    for row in rows:
        for d in row.differences:
            if not any(w.label == row.label and d in w.differences for w in [*known, *out]):
                out.append(ChangedConfig(row.trial_number, row.label, (d,), "verify"))
    return out

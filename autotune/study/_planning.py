"""Verification's restarts, planned from the noise the study measured (:mod:`autotune.decisions.planning`).

The plan is made again whenever the search asks what to hold back for verification, from the search's restarts so
far, so the search stops when the budget left is what verification will need; once verification starts, the plan
is made a last time from the chosen candidates and stored, so every worker and every resume runs the same rounds.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from autotune.config.space import SearchSpace
from autotune.decisions.noise import SIDE_PRIOR_DF, NoisePrior, planning_noise, study_prior
from autotune.decisions.planning import MAX_SHARE, BudgetReach, RestartPlan, budget_reach, plan_rounds
from autotune.decisions.verification import BASELINE, Candidate
from autotune.decisions.window import WindowCosts, sized_plan
from autotune.stats.components import Components, components
from autotune.stats.intervals import shrunk_means
from autotune.store.history import MachineRecord, recorded_noise
from autotune.store.ledger import Ledger
from autotune.study.options import StudyOptions

if TYPE_CHECKING:
    import optuna

__all__ = ["UNPRICED_RESTART_MINUTES", "budget_reach_for", "machine_prior", "plan_for", "verification_counts"]


#: What earlier studies recorded, read once per (store, study, machine) in a process: the search asks for a plan
#: after every trial, and the earlier studies do not change while this one runs.
_RECORDED: dict[tuple[str, str, str], MachineRecord] = {}


def _recorded(storage: str | optuna.storages.BaseStorage, study: str, engine: Mapping[str, object]) -> MachineRecord:
    if not isinstance(storage, str):
        return recorded_noise(storage, study, engine)
    key = (storage, study, repr(sorted((k, str(v)) for k, v in engine.items())))
    if key not in _RECORDED:
        _RECORDED[key] = recorded_noise(storage, study, engine)
    return _RECORDED[key]


def machine_prior(ledger: Ledger | None, options: StudyOptions, engine: Mapping[str, object] | None = None
                  ) -> NoisePrior:
    """The machine's restart noise before this study: earlier studies on this store and machine
    (:func:`autotune.store.history.recorded_noise`), else the default (:class:`NoisePrior`)."""
    if engine is None and ledger is not None:
        stored = ledger.fingerprint()
        engine = stored.engine if stored is not None else None
    if not engine or isinstance(options.storage, str) and options.storage in ("memory", ":memory:"):
        return NoisePrior.default()
    record = _recorded(options.storage, options.study_name, engine)
    if not record.groups:
        return NoisePrior.default()
    gpu = engine.get("gpu") or engine.get("profile") or engine.get("engine")
    return NoisePrior.recorded(record.groups, f"{record.studies} earlier "
                               f"stud{'y' if record.studies == 1 else 'ies'} on {gpu}")


#: The price of a warm restart before any was measured on the machine (empirical: warm vLLM restarts with their
#: timed passes took 0.5-1.0 engine-minutes on the H100 and H200 studies, docs/measurements/).
UNPRICED_RESTART_MINUTES = 1.0


def budget_reach_for(options: StudyOptions, engine: Mapping[str, object], ledger: Ledger | None = None,
                     price: float | None = None) -> BudgetReach | None:
    """What the study's budget can prove at the machine's prior noise, before the first start (issue 41); ``None``
    without a budget or verification. A warm restart is priced at ``price`` (what a resumed study measured), else
    from earlier studies on the machine, else at :data:`UNPRICED_RESTART_MINUTES`; a resumed study (``ledger``) adds
    the noise its search measured to the prior, as its plan will."""
    if not options.verify or (options.budget_minutes is None and options.budget_restarts is None):
        return None
    prior = machine_prior(None, options, engine)
    if ledger is not None:
        prior = study_prior(list(_search_values(ledger).values()), prior)
    record = (_recorded(options.storage, options.study_name, engine)
              if isinstance(options.storage, str) and options.storage not in ("memory", ":memory:") else None)
    minutes = UNPRICED_RESTART_MINUTES
    source = prior.source
    if price:
        minutes = price
    elif record and record.warm_minutes:
        minutes = sorted(record.warm_minutes)[len(record.warm_minutes) // 2]
    elif options.budget_minutes is not None:
        source += f"; a warm restart priced at ~{minutes:g} min until one is measured"
    # The prior's own value, as the line states it ("at ~10% restart noise"); the plan made at verification reads
    # the noise then measured at an upper credible value, and says so in its own line.
    return budget_reach(prior.variance, source, budget_minutes=options.budget_minutes,
                        budget_starts=options.budget_restarts, restart_minutes=minutes,
                        min_effect=options.min_effect, target_power=options.power,
                        alpha=1.0 - options.confidence, share=MAX_SHARE, prior_df=SIDE_PRIOR_DF)


def verification_counts(plan: RestartPlan | None, options: StudyOptions) -> tuple[int, int]:
    """Counted restarts ``(per challenger, baseline)``: the plan's, or ``verify_restarts`` each without one."""
    if plan is None:
        return options.verify_restarts, options.verify_restarts
    return plan.challenger, plan.baseline


def _window_evidence(ledger: Ledger) -> tuple[Components | None, WindowCosts | None]:
    """The search's variance components (each warm restart's timed passes, by configuration) and its measured
    costs: the median timed pass, and the median warm start before its timed passes."""
    groups: dict[str, list[list[float]]] = {}
    pass_s: list[float] = []
    before: list[float] = []
    for t in ledger.measured_complete():
        key = ledger.config_key(t)
        for r in ledger.restarts(t):
            if not r.ok or r.cold or key is None:
                continue
            groups.setdefault(key, []).append([float(v) for v in r.passes_tok_s])
            pass_s.extend(float(s) for s in r.passes_s if s and s > 0)
            if r.wall_s is not None and r.passes_s:
                before.append(max(0.0, float(r.wall_s) - sum(r.passes_s)))
    parts = components(list(groups.values()))
    if not pass_s or not before:
        return parts, None
    return parts, WindowCosts(statistics.median(pass_s), statistics.median(before))


def _search_values(ledger: Ledger) -> dict[str, list[float]]:
    """Counted search restarts by configuration key (complete trials; a configuration's trials pooled)."""
    values: dict[str, list[float]] = {}
    for t in ledger.measured_complete():
        key, summary = ledger.config_key(t), ledger.summary(t)
        if key is not None and summary is not None and summary.values:
            values.setdefault(key, []).extend(float(v) for v in summary.values if v and v > 0)
    return {k: v for k, v in values.items() if v}


def plan_for(ledger: Ledger, space: SearchSpace, options: StudyOptions, challengers: int,
             candidates: Sequence[Candidate] | None = None, left_minutes: float | None = None,
             left_starts: int | None = None, price: tuple[float, float] | None = None,
             final: bool = False) -> RestartPlan | None:
    """The plan for ``challengers`` configurations against the baseline, from the search's restarts.

    Args:
        candidates: The configurations chosen for verification (their search restarts are the challengers'
            noise); ``None`` during the search: the search's best by shrunk estimate stands in for them.
        left_minutes, left_starts: What the budget has left for verification (``None``: its share only).
        price: Minutes of one warm restart of a challenger and of the baseline (``None``: one each, for a restart
            budget).
        final: Verification starts now: the plan may take all the budget has left (the search is over), not
            only its share.

    Returns:
        ``None`` when the study plans nothing (the fixed design, or no verification).
    """
    if not options.verify or not options.verify_planned:
        return None
    values = _search_values(ledger)
    prior = study_prior(list(values.values()), machine_prior(ledger, options))
    base_key = space.baseline().key()
    base_values = values.get(base_key, [])
    if candidates is not None:
        chosen = [c for c in candidates if c.role != BASELINE and not c.runner_up]
        lead = list(chosen[0].search_values) if chosen else []
        lead_mean = chosen[0].estimate if chosen and chosen[0].estimate else None
    else:
        keys = [k for k in values if k != base_key]
        lead, lead_mean = [], None
        if keys:
            estimates = shrunk_means([values[k] for k in keys] + ([base_values] if base_values else []))
            best = max(range(len(keys)), key=lambda i: estimates[i])
            lead, lead_mean = values[keys[best]], estimates[best]
    base_mean = None
    if base_values:
        base_mean = math.exp(sum(math.log(v) for v in base_values) / len(base_values))
    effect = lead_mean / base_mean if lead_mean and base_mean else None
    cost_c, cost_b = price if price is not None else (1.0, 1.0)
    if options.budget_minutes is not None:
        share = MAX_SHARE * options.budget_minutes
        left = share if left_minutes is None else max(0.0, left_minutes)
        cap = left if final else min(share, left)
    elif options.budget_restarts is not None:
        cost_c, cost_b = 1.0, 1.0
        share = float(int(MAX_SHARE * options.budget_restarts))
        left = share if left_starts is None else float(max(0, left_starts))
        cap = left if final else min(share, left)
    else:
        cap = None

    def plan_at(var_c: float, var_b: float, minutes_c: float, minutes_b: float) -> RestartPlan:
        return plan_rounds(var_c, var_b, challengers=challengers, min_effect=options.min_effect,
                           target_power=options.power, alpha=1.0 - options.confidence, search_effect=effect,
                           max_minutes=cap, challenger_minutes=max(minutes_c, 1e-6),
                           baseline_minutes=max(minutes_b, 1e-6), noise_source=prior.source,
                           prior_df=prior.df)

    # Each side's noise at an upper credible value of its moderated estimate (autotune.decisions.noise): two
    # restarts that agree by luck cannot plan a verification on no noise.
    var_c, var_b = planning_noise(lead, prior), planning_noise(base_values, prior)
    if options.budget_restarts is None and price is not None and len(space.workload.levels) == 1:
        # Engine-minutes are the cost: the timed window is sized with the rounds (autotune.decisions.window). With
        # load levels a restart's passes run at several loads, so their spread is not one pass's noise: not sized.
        parts, costs = _window_evidence(ledger)
        plan = sized_plan(plan_at, var_c, var_b, cost_c, cost_b, parts, space.workload.timed_passes, costs)
    else:
        plan = plan_at(var_c, var_b, cost_c, cost_b)
    if plan.paired:
        # The analysis's prior for a round's log-ratio variance: both sides' restart noise as the study knows it
        # before verification (the machine's prior and the search's restarts, no credit for a round's correlation),
        # worth what a side's prior is worth. Fixed and stored now, before a round is read.
        plan = dataclasses.replace(plan, pair_variance=2.0 * prior.variance, pair_prior_df=prior.df)
    # Under a restart budget the plan's cost is in starts, not minutes.
    return plan if options.budget_minutes is not None else dataclasses.replace(plan, minutes=None)

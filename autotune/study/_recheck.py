"""``autotune recheck``: a study's stored winner and baseline measured again on today's engine and machine.

The restarts are the verification phase's own (:func:`autotune.study._verification.run_verification`: fresh
processes, interleaved, matched seeds, the same conclusion), on seeds no restart of the study ran on. The rules
(sizing, the verdict then against now, what differs) are :mod:`autotune.decisions.recheck`'s. The result is a
:class:`~autotune.decisions.recheck.RecheckRecord`, stored beside the study's verification, which stays as it was.

Two kinds:

* **baseline**: the stored winner (and with ``runner_ups`` the other verified challengers) against the baseline on
  today's engine: does the verdict still hold?
* **engines**: the stored winner on today's engine beside the same configuration on a new engine (another
  interpreter, another image), in the same interleaved rounds: one speedup, new over old, with its interval.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from autotune.config.space import SearchSpace
from autotune.core.records import EngineConfig, EngineFacts, RestartResult, Workload
from autotune.decisions import recheck as rules
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate, Verification
from autotune.stats.intervals import Verdict
from autotune.store.ledger import Ledger
from autotune.study._verification import _runnable, run_verification
from autotune.study.options import SEED_STRIDE

__all__ = ["NEW_ENGINE_ARG", "RECHECK_SEED_OFFSET", "RecheckError", "RecheckOptions", "recheck"]

#: Recheck rounds use seeds no search (offset < 50 000) or verification (50 000 + round) restart ran on: recheck
#: ``i`` of a study starts at ``RECHECK_SEED_OFFSET + 1000 * i``.
RECHECK_SEED_OFFSET = 70_000
#: The engine argument that marks the new engine's side in an ``engines`` recheck (it gives that side its own
#: configuration key in the rounds); it is removed before the new engine sees the configuration.
NEW_ENGINE_ARG = "autotune_recheck_engine"


class RecheckError(ValueError):
    """The study cannot be rechecked as asked (no verification yet, a space that no longer builds its winner)."""


@dataclasses.dataclass(frozen=True)
class RecheckOptions:
    """How a recheck runs.

    Attributes:
        restarts: Counted restarts per configuration (``None``: :func:`~autotune.decisions.recheck.plan_recheck_restarts`).
        budget_minutes: Engine minutes the recheck may take (caps the planned restarts).
        runner_ups: Measure the study's other verified challengers too.
        index: Which recheck of the study this is, for its seeds (default: the number stored before it; the
            benchmark's repeated draws, which store nothing, count their own).
    """

    restarts: int | None = None
    budget_minutes: float | None = None
    runner_ups: bool = False
    index: int | None = None


class _TwoEngines:
    """The study's engine and a new one behind one ``run_restart``: a configuration marked with
    :data:`NEW_ENGINE_ARG` runs, unmarked, on the new engine."""

    def __init__(self, old: Any, new: Any) -> None:
        self.old, self.new = old, new

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        if NEW_ENGINE_ARG in config.engine_args:
            return self.new.run_restart(_unmarked(config), workload, restart=restart, seed=seed)
        return self.old.run_restart(config, workload, restart=restart, seed=seed)

    def learn_noise(self, result: RestartResult) -> None:
        for engine in (self.old, self.new):
            if hasattr(engine, "learn_noise"):
                engine.learn_noise(result)


def _marked(config: EngineConfig) -> EngineConfig:
    return dataclasses.replace(config, engine_args={**config.engine_args, NEW_ENGINE_ARG: "new"})


def _unmarked(config: EngineConfig) -> EngineConfig:
    return dataclasses.replace(config, engine_args={k: v for k, v in config.engine_args.items() if k != NEW_ENGINE_ARG})


def recheck(ledger: Ledger, space: SearchSpace, engine: Any, options: RecheckOptions = RecheckOptions(), *,
            new_engine: Any = None, on_restart: Callable[[Candidate, RestartResult], None] | None = None,
            store: bool = True) -> rules.RecheckRecord:
    """Recheck the study's stored verdict (``new_engine``: the winner on two engines) and store the record.

    Raises:
        RecheckError: no verification to recheck, or ``space`` no longer builds the stored configurations.
    """
    stored = ledger.verification()
    if stored is None:
        raise RecheckError(f"study {ledger.name!r} has no verification to recheck yet: finish it with `autotune tune`")
    meta = ledger.meta()
    index = rules.checked_entry(stored)
    checked = stored.entries[index]
    if checked.candidate.role == BASELINE:
        raise RecheckError(f"study {ledger.name!r} verified no configuration but the baseline: nothing to recheck")
    try:
        winner = _runnable(space, checked.candidate).config
        base = _runnable(space, stored.baseline.candidate).config
        others = [_runnable(space, e.candidate).config for i, e in enumerate(stored.entries)
                  if options.runner_ups and new_engine is None and i != index and e.candidate.role != BASELINE]
    except (RuntimeError, KeyError, ValueError) as exc:
        raise RecheckError(f"the space no longer builds the study's configurations ({exc}): recheck with the space "
                           "file the study ran (the stored copy is the default)") from None
    if new_engine is None:
        candidates = [Candidate(CANDIDATE, c) for c in (winner, *others)] + [Candidate(BASELINE, base)]
        runner = engine
    else:
        candidates = [Candidate(CANDIDATE, _marked(winner)), Candidate(BASELINE, winner)]
        runner = _TwoEngines(engine, new_engine)
    n, n_base, why = rules.plan_recheck_restarts(stored, len(candidates), restarts=options.restarts,
                                                 budget_minutes=options.budget_minutes)
    seed_base = int(meta.seed or 0) * SEED_STRIDE + RECHECK_SEED_OFFSET + 1000 * (
        len(ledger.rechecks()) if options.index is None else options.index)
    now = run_verification(runner, space.workload, candidates, n, lambda r: seed_base + r, on_result=on_restart,
                           confidence=meta.confidence or 0.95, interval_method=meta.interval_method or "t",
                           slo=space.slo_constraints, baseline_restarts=n_base)
    facts_old = EngineFacts.of(engine.describe())
    if new_engine is None:
        record = _baseline_record(stored, index, now, meta.engine, facts_old, n, why, seed_base)
    else:
        record = _engines_record(stored, index, now, facts_old, EngineFacts.of(new_engine.describe()), n, why,
                                 seed_base)
    if store:
        ledger.record_recheck(record.to_dict())
    return record


def _figures(v: Verification, key: str, names: dict[str, str]) -> dict[str, Any]:
    """The speedup of entry ``key`` over the baseline and every entry's mean, by label."""
    entry = next(e for e in v.entries if e.candidate.config.key() == key)
    c = entry.comparison
    out: dict[str, Any] = {"means": {}, "n": {}}
    for e in v.entries:
        label = names.get(e.candidate.config.key(), e.candidate.config.label())
        out["means"][label] = e.summary.mean if e.summary.values else None
        out["n"][label] = len(e.summary.values)
    if c is not None:
        out.update(speedup=c.speedup, ci_low=c.ci_low, ci_high=c.ci_high, confidence=c.confidence, verdict=c.verdict)
    else:
        out.update(speedup=None, ci_low=None, ci_high=None, confidence=None, verdict=Verdict.NOT_SIGNIFICANT)
    return out


def _entry(v: Verification, key: str) -> Any:
    return next(e for e in v.entries if e.candidate.config.key() == key)


def _failures(v: Verification, names: dict[str, str] | None = None) -> list[str]:
    """``label: fails now: reason`` for each configuration whose restarts failed today (it cannot hold anything)."""
    return [f"{(names or {}).get(e.candidate.config.key(), e.candidate.config.label())}: fails now: "
            f"{e.summary.failure or 'no restart succeeded'}" for e in v.entries if e.summary.status != "ok"]


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def _baseline_record(stored: Verification, index: int, now: Verification, engine_then: EngineFacts,
                     engine_now: EngineFacts, n: int, why: str, seed_base: int) -> rules.RecheckRecord:
    checked = stored.entries[index]
    key, base_key = checked.candidate.config.key(), stored.baseline.candidate.config.key()
    label = checked.candidate.config.label()
    then_fig, now_fig = _figures(stored, key, {}), _figures(now, key, {})
    changes = [*rules.resolved_changes(label, checked.restarts, _entry(now, key).restarts),
               *rules.resolved_changes(f"baseline {stored.baseline.candidate.config.label()}",
                                       stored.baseline.restarts, _entry(now, base_key).restarts)]
    changes += _failures(now)
    then_runs = [r for e in stored.entries for r in e.restarts]
    now_runs = [r for e in now.entries for r in e.restarts]
    verdict = rules.recheck_verdict(stored.verdict, now_fig["verdict"], bool(changes))
    return rules.RecheckRecord(_stamp(), rules.BASELINE_KIND, verdict, stored.verdict, label, then_fig, now_fig, now,
                               engine_then.to_dict(), engine_now.to_dict(),
                               tuple(rules.fact_differences(engine_then, engine_now, then_runs, now_runs)),
                               tuple(changes), n, why, seed_base)


def _engines_record(stored: Verification, index: int, now: Verification, old: EngineFacts, new: EngineFacts,
                    n: int, why: str, seed_base: int) -> rules.RecheckRecord:
    checked = stored.entries[index]
    label = checked.candidate.config.label()
    key = checked.candidate.config.key()
    new_key = next(e.candidate.config.key() for e in now.entries if e.candidate.role != BASELINE)
    names = {new_key: f"{label} (new engine)", key: f"{label} (study's engine)"}
    now_fig = _figures(now, new_key, names)
    then_fig = _figures(stored, key, {})
    new_runs, old_runs = _entry(now, new_key).restarts, _entry(now, key).restarts
    changes = rules.resolved_changes(f"{label} on the new engine", old_runs, new_runs) + _failures(now, names)
    verdict = rules.engines_verdict(now_fig["verdict"], bool(changes))
    return rules.RecheckRecord(_stamp(), rules.ENGINES, verdict, stored.verdict, label, then_fig, now_fig, now,
                               old.to_dict(), new.to_dict(),
                               tuple(rules.fact_differences(old, new, old_runs, new_runs)), tuple(changes), n, why,
                               seed_base)

"""``tune --warm-start STUDY[,STUDY]``: a new study that starts from what earlier ones learned.

What is carried, per source study:

* its top configurations (the verified ones by verified mean, the winner first, then the best search trials by
  value), queued right after the baselines: each is **measured again** in the new study, never copied; one the new
  space cannot build is left out and named;
* its warm-up noise prior (the timed passes of every restart it paid for) and its start costs (whole-start minutes,
  cold and warm: what a minutes budget prices starts at until this study has measured its own), only where engine
  and machine match (engine, version, GPU, driver and the engine's own facts, and the model): on another engine or
  machine they say nothing.

A different engine version, machine or model is allowed: what differs is named in the record the study stores (its
metadata's ``warm_start``), which the report prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.config.space import DEFAULT, SearchSpace
from autotune.core import params as P
from autotune.core.params import ParamValue, TrialParams
from autotune.core.records import EngineFacts, RestartResult
from autotune.decisions.recheck import fact_differences
from autotune.decisions.verification import BASELINE
from autotune.engines import EngineBackend
from autotune.store.ledger import Ledger
from autotune.study._budget import StartCosts

__all__ = ["WARM_START_TOP", "WarmStart", "carry_noise", "plan_warm_start", "warm_start_top"]

#: Configurations each source study contributes.
WARM_START_TOP = 3


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """What a warm start queues and carries.

    Attributes:
        enqueue: Trial parameters to queue after the baselines, in order (each measured again).
        record: What was carried and from where (stored in the study's metadata; the report prints it).
        noise: Restarts whose timed passes seed the warm-up noise prior (sources whose engine and machine match).
    """

    enqueue: tuple[TrialParams, ...]
    record: Mapping[str, Any]
    noise: tuple[RestartResult, ...] = ()


def warm_start_top(budget_restarts: int | None) -> int:
    """Configurations each source contributes: :data:`WARM_START_TOP`, one per 15 engine starts of a restart budget
    (each queued configuration takes a cold and a warm start a search trial would have had). One per 10 cost an
    unrelated landscape's study at 20 starts 0.04 of regret against a cold one (2.6 standard errors), one per 15
    half that, within noise, and kept the related landscape's gain (seeds 0-39, ``make bench-warmstart``)."""
    return WARM_START_TOP if budget_restarts is None else max(1, min(WARM_START_TOP, budget_restarts // 15))


def _full_params(space: SearchSpace, params: Mapping[str, ParamValue]) -> TrialParams:
    dims = {d.name: d.baseline for d in space.engine_dims}
    full: TrialParams = {P.MODE: DEFAULT, P.CAPTURE_SIZES: DEFAULT, P.K: 0, **dims}
    full.update({k: v for k, v in params.items() if k in (*full, P.DRAFT)})
    if not full[P.K]:
        full.pop(P.DRAFT, None)
    return full


def _ranked_params(ledger: Ledger) -> list[Mapping[str, ParamValue]]:
    """The source's configurations, best first: verified (the winner first, then by verified mean), then the
    search's measured trials by value."""
    out: list[Mapping[str, ParamValue]] = []
    v = ledger.verification()
    if v is not None:
        verified = [e for e in v.entries if e.candidate.role != BASELINE and e.summary.values]
        verified.sort(key=lambda e: (e is not v.winner, -e.summary.mean))
        out += [e.candidate.config.params for e in verified]
    trials = sorted(ledger.measured_complete(), key=lambda t: -float(t.value or 0.0))
    out += [t.params for t in trials]
    return out


def _matches(a: EngineFacts, b: EngineFacts) -> bool:
    return (a.name, a.version, a.gpu, a.driver, dict(a.extra)) == (b.name, b.version, b.gpu, b.driver, dict(b.extra))


def plan_warm_start(sources: Sequence[Ledger], space: SearchSpace, facts: EngineFacts,
                    top: int = WARM_START_TOP) -> WarmStart:
    """The configurations to queue and the priors to carry from ``sources`` into a study of ``space`` on an
    engine described by ``facts``."""
    seen = {space.config_from_params(p).key() for p in space.baseline_params()}  # queued anyway
    enqueue: list[TrialParams] = []
    noise: list[RestartResult] = []
    costs: dict[str, list[float]] = {}
    records = []
    model = space.engine_args.get("model")
    for ledger in sources:
        meta = ledger.meta()
        taken: list[str] = []
        skipped: list[str] = []
        for params in _ranked_params(ledger):
            if len(taken) >= top:
                break
            full = _full_params(space, params)
            problem = space.params_problem(full)
            if problem is not None:
                skipped.append(f"{dict(params)}: {problem}")
                continue
            config = space.config_from_params(full)
            if config.key() in seen:
                continue
            seen.add(config.key())
            enqueue.append(full)
            taken.append(config.label())
        source_facts = EngineFacts.of(meta.engine)
        differs = fact_differences(source_facts, facts)
        if meta.model != model:
            differs.insert(0, f"model: {meta.model} -> {model}")
        same_machine = _matches(source_facts, facts) and meta.model == model
        carried = ledger.restarts_spent() if same_machine else []
        noise += carried
        if carried:
            for kind, minutes in StartCosts.of(ledger).carried().items():
                costs.setdefault(kind, []).extend(minutes)
        records.append({"study": ledger.name, "configs": taken, "skipped": skipped[:5], "differs": differs,
                        "noise_restarts": len(carried), "start_costs": "carried" if carried else "not carried",
                        "noise": ("carried" if carried else "not carried: " + (
                            "engine, machine or model differ" if not same_machine else "no restarts"))})
    record: dict[str, Any] = {"sources": records, "queued": len(enqueue)}
    if costs:
        record["start_costs"] = costs
    return WarmStart(tuple(enqueue), record, tuple(noise))


def carry_noise(engine: EngineBackend, warm: WarmStart) -> int:
    """Seed ``engine``'s warm-up noise prior with the carried restarts; returns how many it took."""
    for result in warm.noise:
        engine.learn_noise(result)
    return len(warm.noise)

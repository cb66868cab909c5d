"""``autotune recheck``: a study's stored winner and baseline measured again on today's engine and machine.

The restarts are the verification phase's own (:class:`autotune.study._verification.VerificationLoop`: fresh
processes, interleaved, matched seeds, the same conclusion), on seeds no restart of the study (nor another recheck,
a concurrent one included) ran on. The change test looks after every round and the rounds stop once it decides, or
once ``--budget-minutes`` has no room for the next start. The rules (sizing, the change test then against now,
what differs) are :mod:`autotune.decisions.recheck`'s. The result is a
:class:`~autotune.decisions.recheck.RecheckRecord`, stored beside the study's verification, which stays as it was.

Two kinds:

* **baseline**: the stored winner (and with ``runner_ups`` the other verified challengers) against the baseline on
  today's engine: does the verdict still hold?
* **engines**: the stored winner on today's engine beside the same configuration on a new engine (another
  interpreter, another image), in the same interleaved rounds: one speedup, new over old, with its interval.

An engine of another vLLM version than the study's gets the stored configurations in its own names
(:func:`recheck_configs`: rebuilt in the study's names, then :func:`autotune.engines.vllm.vocabulary.carry`, the path
``export --vllm-version`` takes), or the recheck is refused with the reason before any engine starts.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

from autotune.records import decode, encode
from autotune.config.space import SearchSpace
from autotune.core.records import EngineConfig, EngineFacts, RestartResult, Workload
from autotune.decisions import recheck as rules
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate, Rounds, Verification, VerifiedConfig
from autotune.engines import EngineBackend, RestartEngine
from autotune.engines.vllm.vocabulary import Untranslatable, carry, vocabulary_for
from autotune.stats.intervals import Verdict
from autotune.store.ledger import Ledger, StudyMeta
from autotune.store import storage
from autotune.store.claims import Claim, Claims
from autotune.store.heartbeat import Heartbeat
from autotune.store.ledger import owner_id
from autotune.study._budget import StartCosts
from autotune.study._restart import measure_restart
from autotune.study._memory_rounds import MemoryRounds
from autotune.study._verification import VerificationLoop, _runnable
from autotune.study.options import SEED_STRIDE

__all__ = ["NEW_ENGINE_ARG", "RECHECK_SEED_OFFSET", "RecheckConfigs", "RecheckError", "RecheckOptions", "recheck",
           "recheck_configs"]

#: Recheck rounds use seeds no search (offset < 50 000) or verification (50 000 + round) restart ran on: recheck
#: ``i`` of a study starts at ``RECHECK_SEED_OFFSET + 1000 * i``.
RECHECK_SEED_OFFSET = 70_000
#: The claim that gives a recheck its index (``recheck-<i>``), and with it its seeds.
RECHECK_JOB = "recheck"
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
        index: Which recheck of the study this is, for its seeds (default: claimed, the first from the number
            stored before it that no other recheck holds; the benchmark's repeated draws, which store nothing, count
            their own).
        margin: The change test's equivalence margin on the ratio of today's speedup to the stored one.
    """

    restarts: int | None = None
    budget_minutes: float | None = None
    runner_ups: bool = False
    index: int | None = None
    margin: float = rules.DEFAULT_MARGIN


class _TwoEngines:
    """The study's engine and a new one behind one ``run_restart``: a configuration marked with
    :data:`NEW_ENGINE_ARG` runs, unmarked, on the new engine."""

    def __init__(self, old: EngineBackend, new: EngineBackend) -> None:
        self.old, self.new = old, new

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        if NEW_ENGINE_ARG in config.engine_args:
            return self.new.run_restart(_unmarked(config), workload, restart=restart, seed=seed)
        return self.old.run_restart(config, workload, restart=restart, seed=seed)

    def learn_noise(self, result: RestartResult) -> None:
        for engine in (self.old, self.new):
            engine.learn_noise(result)


@dataclasses.dataclass(frozen=True)
class RecheckConfigs:
    """The stored configurations a recheck measures, each in the names of the engine that runs it.

    Attributes:
        index: The checked entry of the stored verification (its winner, or its best challenger).
        winner, baseline, others: On the recheck's engine (``others``: the runner-ups asked for).
        new_winner: The winner on the new engine of an ``engines`` recheck (``None`` otherwise).
        translated: One line per engine whose vLLM version differs from the study's (what was translated).
    """

    index: int
    winner: EngineConfig
    baseline: EngineConfig
    others: tuple[EngineConfig, ...] = ()
    new_winner: EngineConfig | None = None
    translated: tuple[str, ...] = ()


def recheck_configs(ledger: Ledger, space: SearchSpace, engine: EngineBackend, *,
                    new_engine: EngineBackend | None = None,
                    runner_ups: bool = False) -> RecheckConfigs:
    """The study's stored winner and baseline (and runner-ups) for the engines of the recheck, before any starts.

    Each is rebuilt from ``space`` in the names of the vLLM the study ran (so it is the stored configuration), then
    carried to each engine's vLLM (:func:`~autotune.engines.vllm.vocabulary.carry`: unchanged on the same version,
    translated where the meaning is kept, as ``export --vllm-version`` writes it).

    Raises:
        RecheckError: no verification, a space that no longer builds them, or a configuration another version
            cannot run with the same meaning (one line with the reason).
    """
    stored = ledger.verification()
    if stored is None:
        raise RecheckError(f"study {ledger.name!r} has no verification to recheck yet: finish it with `autotune tune`")
    index = rules.checked_entry(stored)
    checked = stored.entries[index]
    if checked.candidate.role == BASELINE:
        raise RecheckError(f"study {ledger.name!r} verified no configuration but the baseline: nothing to recheck")
    engine_then = ledger.meta().engine
    ran = vocabulary_for(engine_then)
    try:
        built = space.in_vocabulary(ran)  # the study's own names: what it stored and measured
        winner = _runnable(built, checked.candidate).config
        base = _runnable(built, stored.baseline.candidate).config
        others = [_runnable(built, e.candidate).config for i, e in enumerate(stored.entries)
                  if runner_ups and new_engine is None and i != index and e.candidate.role != BASELINE]
    except (RuntimeError, KeyError, ValueError) as exc:
        raise RecheckError(f"the space no longer builds the study's configurations ({exc}): recheck with the space "
                           "file the study ran (the stored copy is the default)") from None
    notes: list[str] = []

    def on(target: EngineBackend, config: EngineConfig, side: str) -> EngineConfig:
        vocab = target.vocabulary()
        try:
            out = carry(config, ran, vocab)
        except Untranslatable as exc:
            raise RecheckError(f"{config.label()} was measured on vLLM {ran.version if ran else '?'} and cannot run "
                               f"with the same meaning on {side}: {exc}") from None
        if out is not config and vocab is not None:  # carry() changes nothing without a target vocabulary
            note = (f"the study ran vLLM {ran.version if ran else '?'}; its configurations run on {side} in that "
                    f"version's names, as `autotune export --vllm-version {vocab.version}` writes them")
            if note not in notes:
                notes.append(note)
        return out

    side = "today's engine" if new_engine is None else "the study's engine"
    winner_now = on(engine, winner, side)
    return RecheckConfigs(
        index, winner_now, on(engine, base, side), tuple(on(engine, c, side) for c in others),
        None if new_engine is None else on(new_engine, winner, "the new engine"), tuple(notes))


def _marked(config: EngineConfig, new_engine: EngineBackend) -> EngineConfig:
    """``config`` marked for the new engine, the mark naming the new engine's options: the side's configuration key
    differs with the new engine, so a recheck continued from an interrupted one (:func:`_claim_index`) continues
    only one on the same new engine."""
    options = sorted((str(k), repr(v)) for k, v in dict(getattr(new_engine, "options", None) or {}).items())
    mark = hashlib.sha256(repr(options).encode()).hexdigest()[:12]
    return dataclasses.replace(config, engine_args={**config.engine_args, NEW_ENGINE_ARG: f"new-{mark}"})


def _unmarked(config: EngineConfig) -> EngineConfig:
    return dataclasses.replace(config, engine_args={k: v for k, v in config.engine_args.items() if k != NEW_ENGINE_ARG})


def recheck(ledger: Ledger, space: SearchSpace, engine: EngineBackend, options: RecheckOptions = RecheckOptions(), *,
            new_engine: EngineBackend | None = None,
            on_restart: Callable[[Candidate, RestartResult], None] | None = None,
            on_start: Callable[[int, int], None] | None = None, store: bool = True) -> rules.RecheckRecord:
    """Recheck the study's stored verdict (``new_engine``: the winner on two engines) and store the record.

    The rounds run as verification's, on seeds of their own (:func:`_claim_index`: a recheck running beside this
    one gets other seeds); after each round the change test (:func:`~autotune.decisions.recheck.change_test`) looks
    and the rounds stop once it decides. No engine starts once ``budget_minutes`` cannot pay for one more at the
    study's measured price (``tune``'s rule: the recheck overruns by at most the one start it began within it).

    Every restart is stored on the recheck's claim as it lands. A recheck interrupted (Ctrl-C, SIGTERM, kill -9, an
    error) gives its index up with them, and the same recheck run again takes that index back and continues: the
    same seeds, the restarts already measured kept (and their minutes counted against ``budget_minutes``), none
    run twice. ``on_start(planned, stored)`` is told the counted restarts planned and those already stored.

    Raises:
        RecheckError: no verification to recheck, ``space`` no longer builds the stored configurations, or a
            budget too small for one round.
    """
    configs = recheck_configs(ledger, space, engine, new_engine=new_engine, runner_ups=options.runner_ups)
    stored = ledger.verification()
    assert stored is not None  # recheck_configs refuses a study without one
    meta = ledger.meta()
    index, winner, base = configs.index, configs.winner, configs.baseline
    checked = stored.entries[index]
    # The stored configurations by the key each runs under today (another version's names give another key).
    now_keys = {checked.candidate.config.key(): winner.key(), stored.baseline.candidate.config.key(): base.key()}
    if new_engine is None:
        candidates = [Candidate(CANDIDATE, c) for c in (winner, *configs.others)] + [Candidate(BASELINE, base)]
        runner: RestartEngine = engine
    else:
        assert configs.new_winner is not None
        candidates = [Candidate(CANDIDATE, _marked(configs.new_winner, new_engine)), Candidate(BASELINE, winner)]
        runner = _TwoEngines(engine, new_engine)
    alpha = 1.0 - (meta.confidence or 0.95)
    n, n_base, why = rules.plan_recheck_restarts(stored, len(candidates), restarts=options.restarts,
                                                 budget_minutes=options.budget_minutes, margin=options.margin,
                                                 alpha=alpha)
    budget = _RecheckBudget(StartCosts.of(ledger), options.budget_minutes)
    budget.check_first_round(candidates)
    keys = {c.config.key() for c in candidates}
    claim, number, done = (None, options.index, Rounds()) if options.index is not None else \
        _claim_index(ledger, keys)
    try:
        seed_base = int(meta.seed or 0) * SEED_STRIDE + RECHECK_SEED_OFFSET + 1000 * number
        then = (tuple(checked.summary.values), tuple(stored.baseline.summary.values))
        looks = _Looks(then, winner.key(), base.key(), options.margin, alpha, decide=new_engine is None)
        for key, results in done.progress().items():  # what an interrupted run of this recheck measured
            for result in results:
                budget.spend(key, result)
                looks.add(key, result)
        if on_start is not None:
            challengers = sum(1 for c in candidates if c.role != BASELINE)
            on_start(n * challengers + n_base, sum(1 for rs in done.progress().values() for r in rs
                                                   if r.ok and not r.cold))
        now = _run_rounds(runner, space, candidates, n, n_base, seed_base, meta, budget, looks, on_restart,
                          done, claim)
        facts_old = EngineFacts.of(engine.describe())
        if new_engine is None:
            record = _baseline_record(stored, index, now, meta.engine, facts_old, n, why, seed_base,
                                      looks.final(budget.stopped), now_keys)
        else:
            record = _engines_record(stored, index, now, facts_old, EngineFacts.of(new_engine.describe()), n, why,
                                     seed_base, now_keys)
        record = dataclasses.replace(record, budget_minutes=options.budget_minutes,
                                     minutes_used=round(budget.spent, 4))
        if store:
            ledger.record_recheck(encode(record), index=number)
    except BaseException:
        if claim is not None:
            # Interrupted or failed: the index goes back with the restarts stored on it, so the same recheck run
            # again continues on the same seeds instead of starting over (issue 44).
            claim.give_up()
        raise
    if claim is not None:
        claim.complete()  # the index is spent: its seeds are never handed out again
    return record


#: Most recheck indexes tried when claiming one (each a claim in the study's claims; far more than run at once).
_MOST_INDEXES = 10_000


def _claim_index(ledger: Ledger, keys: set[str]) -> tuple[Claim | None, int, Rounds]:
    """The recheck's index, claimed for this process alone: the first from the number of stored rechecks that no
    other recheck holds or used (a claim ``recheck-<i>`` in the study's claims, the lowest claimant its holder).
    Two rechecks started together read the same stored count; the claim gives them different indexes, so their
    rounds run on different seeds. An index an interrupted recheck gave up comes back with the restarts it stored,
    which this one continues from when they measured its own configurations (``keys``: the same recheck run
    again); an index whose restarts measured others (another kind of recheck, other runner-ups, another new engine)
    is closed and the next one taken. Returns the claim (completed when the recheck ends), the index and the
    restarts to continue from, by round."""
    claims = Claims(ledger.study, Heartbeat(storage(ledger.study)), owner_id())
    first = len(ledger.rechecks())
    for number in range(first, first + _MOST_INDEXES):
        job = f"{RECHECK_JOB}-{number}"
        claim = claims.try_claim(job)
        if claim is None:
            continue
        stored = ledger.claim_restarts(job)
        if set(stored) <= keys:
            done = Rounds()
            for key, runs in stored.items():
                for run in runs:
                    done.add(int(run.get("restart") or 0), key, [decode(RestartResult, run)])
            return claim, number, done
        claim.complete()  # another recheck's measurements: not ours to continue, and its seeds are spent
    raise RecheckError(f"study {ledger.name!r} has {_MOST_INDEXES} rechecks running or unfinished: wait for them")


class _RecheckBudget:
    """``--budget-minutes`` for a recheck, by ``tune``'s rule (:mod:`autotune.study._budget`): each start priced at
    what the study's own starts of its kind cost; none starts once the minutes spent and its price exceed the
    budget; a budget that cannot pay for the first round is refused before anything runs."""

    def __init__(self, costs: StartCosts, minutes: float | None) -> None:
        self.costs, self.minutes = costs, minutes
        self.spent = 0.0
        self.stopped: str | None = None
        self.started: set[str] = set()

    def _price(self, key: str, cold: bool) -> float:
        return self.costs.price((key, cold))

    def check_first_round(self, candidates: Sequence[Candidate]) -> None:
        """Refuse a budget too small for one round: a cold start (an engine's first start of a configuration may
        be) and a counted restart of each configuration."""
        if self.minutes is None:
            return
        starts = [(c.config.key(), cold) for c in candidates for cold in (True, False)]
        need = self.costs.forecast(starts)
        if need > self.minutes:
            cold = self._price(candidates[0].config.key(), True) * 60.0
            warm = self._price(candidates[0].config.key(), False) * 60.0
            raise RecheckError(f"--budget-minutes {self.minutes:g} is too small for a recheck's first round "
                               f"({len(starts)} engine starts at the study's measured {cold:.0f} s per cold start and "
                               f"{warm:.0f} s per warm one): use --budget-minutes {math.ceil(need * 100) / 100:g} "
                               "or more")

    def fits(self, key: str) -> bool:
        """Whether the next start of ``key`` fits (its first start here priced cold: the engine may start it so)."""
        if self.minutes is None:
            return True
        if self.spent + self._price(key, key not in self.started) > self.minutes:
            self.stopped = "budget"
            return False
        return True

    def spend(self, key: str, result: RestartResult) -> None:
        self.started.add(key)
        self.spent += float(result.wall_s or 0.0) / 60.0


class _Looks:
    """The change test after every round: the restarts so far by configuration, and whether it has decided."""

    def __init__(self, then: tuple[Sequence[float], Sequence[float]], key: str, base_key: str, margin: float,
                 alpha: float, decide: bool) -> None:
        self.then, self.key, self.base_key = then, key, base_key
        self.margin, self.alpha, self.decide = margin, alpha, decide
        self.values: dict[str, list[float]] = {}
        self.looked = 0
        self.looks = 0
        self.decided = False

    def add(self, key: str, result: RestartResult) -> None:
        if result.ok and not result.cold and result.value is not None:
            self.values.setdefault(key, []).append(float(result.value))

    def test(self, stopped: str = "planned") -> rules.ChangeTest:
        now = (self.values.get(self.key, []), self.values.get(self.base_key, []))
        return rules.change_test(self.then, now, self.margin, self.alpha, looks=self.looks, stopped=stopped)

    def before_round(self, rnd: int) -> bool:
        """Look once at the start of each round after the first; ``True`` once the test has decided."""
        if self.decide and not self.decided and rnd > self.looked:
            self.looked = rnd
            if self.values.get(self.key) and self.values.get(self.base_key):
                self.looks += 1
                self.decided = self.test().decided
        return self.decided

    def final(self, budget_stop: str | None) -> rules.ChangeTest:
        if not self.decided:
            self.looks += 1  # the look after the last round
        test = self.test()
        stopped = "decided" if test.decided else (budget_stop or "planned")
        return dataclasses.replace(test, stopped=stopped)


def _run_rounds(runner: RestartEngine, space: SearchSpace, candidates: Sequence[Candidate], n: int, n_base: int,
                seed_base: int, meta: StudyMeta, budget: _RecheckBudget, looks: _Looks,
                on_restart: Callable[[Candidate, RestartResult], None] | None, done: Rounds,
                claim: Claim | None) -> Verification:
    """Verification's loop over the recheck's rounds, in memory, from the restarts ``done`` (an interrupted run's:
    a restart measured in a round is not run again); a round the change test decided before, or the budget has no
    room for, starts nothing (it concludes on what ran, as a budget-cut verification does). Each restart is stored
    on ``claim`` as it lands (with the earlier holders', the claim's job holds every restart of the recheck)."""
    mine: dict[str, list[RestartResult]] = {}

    def run(candidate: Candidate, rnd: int, on_result: Callable[[RestartResult], None]) -> object:
        key = candidate.config.key()
        if looks.before_round(rnd) or budget.stopped or not budget.fits(key):
            return None
        return measure_restart(runner, candidate.config, space.workload, restart=rnd, seed=seed_base + rnd,
                               on_result=on_result, rerun_cold=lambda _cold: budget.fits(key),
                               run_again=lambda _failed: budget.fits(key))

    def landed(candidate: Candidate, result: RestartResult) -> None:
        if claim is not None:
            mine.setdefault(candidate.config.key(), []).append(result)
            claim.record_restarts(mine)
        budget.spend(candidate.config.key(), result)
        looks.add(candidate.config.key(), result)
        if on_restart is not None:
            on_restart(candidate, result)

    loop = VerificationLoop(candidates, MemoryRounds(done), run, n, n, confidence=meta.confidence or 0.95,
                            interval_method=meta.interval_method or "t", slo=space.slo_constraints,
                            unit=space.workload.unit, on_restart=landed, baseline_restarts=n_base)
    verification = loop.run()
    assert verification is not None  # one process concludes what it runs
    return verification


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


def _entry(v: Verification, key: str) -> VerifiedConfig:
    return next(e for e in v.entries if e.candidate.config.key() == key)


def _failures(v: Verification, names: dict[str, str] | None = None) -> list[str]:
    """``label: fails now: reason`` for each configuration whose restarts failed today (it cannot hold anything)."""
    return [f"{(names or {}).get(e.candidate.config.key(), e.candidate.config.label())}: fails now: "
            f"{e.summary.failure or 'no restart succeeded'}" for e in v.entries if e.summary.status != "ok"]


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def _baseline_record(stored: Verification, index: int, now: Verification, engine_then: EngineFacts,
                     engine_now: EngineFacts, n: int, why: str, seed_base: int,
                     change: rules.ChangeTest, now_keys: dict[str, str]) -> rules.RecheckRecord:
    checked = stored.entries[index]
    key, base_key = checked.candidate.config.key(), stored.baseline.candidate.config.key()
    label = checked.candidate.config.label()
    then_fig = _figures(stored, key, {})
    key, base_key = now_keys.get(key, key), now_keys.get(base_key, base_key)  # today's entries
    now_fig = _figures(now, key, {})
    changes = [*rules.resolved_changes(label, checked.restarts, _entry(now, key).restarts),
               *rules.resolved_changes(f"baseline {stored.baseline.candidate.config.label()}",
                                       stored.baseline.restarts, _entry(now, base_key).restarts)]
    changes += _failures(now)
    then_runs = [r for e in stored.entries for r in e.restarts]
    now_runs = [r for e in now.entries for r in e.restarts]
    fails_now = any(_entry(now, k).summary.status != "ok" for k in (key, base_key))
    verdict = rules.recheck_verdict(change, bool(changes), fails_now)
    return rules.RecheckRecord(_stamp(), rules.BASELINE_KIND, verdict, stored.verdict, label, then_fig, now_fig, now,
                               encode(engine_then), encode(engine_now),
                               tuple(rules.fact_differences(engine_then, engine_now, then_runs, now_runs)),
                               tuple(changes), n, why, seed_base, encode(change))


def _engines_record(stored: Verification, index: int, now: Verification, old: EngineFacts, new: EngineFacts,
                    n: int, why: str, seed_base: int, now_keys: dict[str, str]) -> rules.RecheckRecord:
    checked = stored.entries[index]
    label = checked.candidate.config.label()
    then_fig = _figures(stored, checked.candidate.config.key(), {})
    key = now_keys.get(checked.candidate.config.key(), checked.candidate.config.key())  # the study's engine's today
    new_key = next(e.candidate.config.key() for e in now.entries if e.candidate.role != BASELINE)
    names = {new_key: f"{label} (new engine)", key: f"{label} (study's engine)"}
    now_fig = _figures(now, new_key, names)
    new_runs, old_runs = _entry(now, new_key).restarts, _entry(now, key).restarts
    changes = rules.resolved_changes(f"{label} on the new engine", old_runs, new_runs) + _failures(now, names)
    verdict = rules.engines_verdict(now_fig["verdict"], bool(changes))
    return rules.RecheckRecord(_stamp(), rules.ENGINES, verdict, stored.verdict, label, then_fig, now_fig, now,
                               encode(old), encode(new),
                               tuple(rules.fact_differences(old, new, old_runs, new_runs)), tuple(changes), n, why,
                               seed_base)

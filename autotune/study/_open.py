"""Opening a study: create or load it in the storage, check a resume against what it measured, queue the
baselines, record what a joining worker needs (the metadata, the space)."""

from __future__ import annotations

import json
import os
import time
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import optuna

from autotune.records import encode
from autotune.config.space import SearchSpace
from autotune.core.records import EngineFacts
from autotune.decisions.racing import RacingPruner
from autotune.engines import EngineBackend
from autotune.engines.process import set_scope, stop_orphans
from autotune.store import ledger as _ledger
from autotune.store import storage
from autotune.store.claims import Claims, StartTokens
from autotune.store.fingerprint import check_resume, fingerprint
from autotune.store.heartbeat import Heartbeat
from autotune.store.ledger import Ledger, StudyMeta
from autotune.store.studydir import check_owned, prepare_study_dir
from autotune.study._budget import StartCosts, check_budget
from autotune.study.events import StudyContext
from autotune.study.options import StudyOptions

__all__ = ["DEFAULT_POLL_S", "make_sampler", "open_study", "prepare_study"]

#: Seconds between looks at the study while a worker waits for others (their trials, verification rounds).
DEFAULT_POLL_S = 2.0

optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_sampler(name: str, seed: int) -> tuple[optuna.samplers.BaseSampler, str]:
    """The sampler and a sentence saying why, recorded in the study's metadata.

    Under latency limits each trial carries Optuna's constraints (``Trial.set_constraint``, one per limit), which
    TPE and GP read to model feasibility; Optuna 5 deprecates ``constraints_func`` in its favour.
    """
    sampler: optuna.samplers.BaseSampler
    if name == "tpe":
        with warnings.catch_warnings():  # group= is "experimental" but is what makes TPE handle the conditional space
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # constant_liar: trials other workers are running count as bad guesses, so parallel suggestions
            # spread out instead of piling onto the current best region (a no-op for one worker).
            # n_startup_trials=10 is Optuna's default; 6 (two baselines and four random draws) let TPE settle on a
            # plateau early (docs/benchmarks.md: gb10 mean regret at 60 starts 2.4% with 6, 0.6% with 10).
            sampler = optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed, n_startup_trials=10,
                                                 constant_liar=True)
        why = ("TPE (multivariate, group, constant liar): handles the conditional space (draft only when K > 0) "
               "natively; it is told the mean over matched restarts of each trial")
        return sampler, why
    if name == "gp":
        # The objective is a noisy mean over restarts: the GP must model observation noise.
        sampler = optuna.samplers.GPSampler(seed=seed, deterministic_objective=False, n_startup_trials=6)
        why = ("GP (deterministic_objective=False): a noisy objective; it fits a noise term rather than "
               "interpolating lucky restarts")
        return sampler, why
    if name == "random":
        # The benchmark's control: the same racing and verification with no model of the space at all.
        why = "random: uniform over the space, no model; a control for what the model-based samplers add"
        return optuna.samplers.RandomSampler(seed=seed), why
    raise ValueError(f"unknown sampler {name!r}: use 'tpe', 'gp' or 'random'")


def sampler_seed(seed: int, worker: int | None) -> int:
    """The sampler's seed: the study's for a lone process, one per worker otherwise (host and index), so the
    workers' random first suggestions differ instead of repeating each other."""
    if worker is None:
        return seed
    import socket

    return zlib.crc32(f"{seed}/{socket.gethostname()}/{worker}".encode())


def open_study(options: StudyOptions, worker: int | None = None) -> tuple[Ledger, bool]:
    """Create or load the study. Returns ``(ledger, resumed)``."""
    sampler, _ = make_sampler(options.sampler, sampler_seed(options.seed, worker))
    pruner = RacingPruner(options.policy) if options.policy.racing else optuna.pruners.NopPruner()
    return _ledger.create_or_load(options.study_name, options.storage, sampler=sampler, pruner=pruner,
                                  fresh=options.fresh, heartbeat_s=options.heartbeat_s)


def prepare_study(space: SearchSpace, engine: EngineBackend, options: StudyOptions) -> Ledger:
    """Create (or open) the study and record everything a worker needs to join it, without running anything:
    ``autotune tune --gpus`` does this before it starts its workers."""
    ctx = _open(space, engine, options, None, None, time.sleep, DEFAULT_POLL_S)
    ctx.claims.heartbeat.close()
    return ctx.ledger


def _open(space: SearchSpace, engine: EngineBackend, options: StudyOptions, worker: int | None, gpus: str | None,
          sleep: Callable[[float], None], poll_s: float) -> StudyContext:
    # Before anything is deleted: the study's directory must be one autotune created (or none yet).
    check_owned(options.workdir, options.study_name)
    # An autotune killed with SIGKILL could not stop its engines: they would hold the GPU and skew every restart.
    # The engines this study starts are tagged with its workdir, and only a killed autotune's engines of the same
    # workdir are stopped: another workdir's are another run's, which this one did not start (they are reported).
    set_scope(options.workdir)
    stop_orphans()
    ledger, resumed = open_study(options, worker)
    # Starting over means cold caches too: a study-local compile cache left by the deleted study would make its
    # first starts look warm. Only a directory autotune created for this study is emptied.
    cache_dir = str(prepare_study_dir(options.workdir, options.study_name, fresh=options.fresh))
    facts = EngineFacts.of(engine.describe())
    measures = fingerprint(space, facts)
    stored = ledger.fingerprint()
    if resumed:
        check_resume(stored, measures, options.study_name)
    if stored is None:
        ledger.record_fingerprint(measures)
    engine.cache_dir = engine.cache_dir or cache_dir
    if resumed and hasattr(engine, "learn_noise"):
        for result in ledger.restarts_spent():  # the warm-up noise prior picks up where the study left it
            engine.learn_noise(result)
    heartbeat = Heartbeat(storage(ledger.study))
    owner = _ledger.owner_id(worker, gpus, cache_dir)
    claims = Claims(ledger.study, heartbeat, owner)
    # Every engine start takes a token and reserves its minutes first: no race between workers (or death of one)
    # overruns the start budget, nor the minutes budget by more than what starts run over their estimates.
    tokens = None
    if options.budget_restarts is not None or options.budget_minutes is not None:
        used, minutes = ledger.budget_used()
        tokens = StartTokens(claims, options.budget_restarts, used, minutes=options.budget_minutes,
                             recorded_minutes=minutes, price=_start_price(ledger, engine))
    ctx = StudyContext(options, space, engine, facts, ledger, resumed, claims=claims, owner=owner, poll_s=poll_s,
                       sleep=sleep, start_tokens=tokens)
    if not resumed or not ledger.baselines_enqueued():
        # The process that created the study queues its first trials (a worker that joins finds them queued).
        for params in [*space.baseline_params(), *options.enqueue]:
            ledger.study.enqueue_trial(space.complete_params(params))
        ledger.record_baselines_enqueued()
    # Before any engine starts (a minutes budget: at the engine's least start until starts are on record).
    check_budget(ledger, space, options, engine.least_start_s())
    _record_metadata(ctx)
    return ctx


def _record_metadata(ctx: StudyContext) -> None:
    options, ledger = ctx.options, ctx.ledger
    _, why = make_sampler(options.sampler, options.seed)
    ledger.record_meta(StudyMeta(
        space_name=ctx.space.name,
        space_file=ctx.space.source,
        engine=ctx.engine_info,
        model=ctx.space.engine_args.get("model"),
        workload=encode(ctx.space.workload),
        sampler_why=why,
        baseline=ctx.space.baseline(),
        engine_options={k: _ledger.redact(v) if isinstance(v, str) else v for k, v in ctx.engine.options.items()},
        objective=ctx.space.objective,
        slo=ctx.space.slo,
        **options.stored_settings(),  # the settings a joining worker reads back (StudyOptions.from_meta)
    ))
    if ledger.space_yaml() is None:
        ledger.record_space_yaml(Path(ctx.space.source).read_text() if os.path.exists(ctx.space.source)
                                 else json.dumps(dict(ctx.space.raw)))



def _start_price(ledger: Ledger, engine: EngineBackend) -> Callable[[str | None], float]:
    """The minutes a start of a configuration is reserved under ``--budget-minutes``: the study's measured price
    (:class:`~autotune.study._budget.StartCosts`), a configuration with no warm start measured yet priced as a cold
    start (the engine may start it so), never less than the least start the engine can take."""
    least = float(getattr(engine, "least_start_s", lambda: 0.0)() or 0.0) / 60.0

    def price(key: str | None) -> float:
        costs = StartCosts.of(ledger)
        cold = key is None or key not in costs.warm_by_key
        return max(least, costs.price((key, cold)))

    return price

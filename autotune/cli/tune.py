"""``autotune tune``: run or resume a study here (``--gpus``: one worker per GPU group of this machine)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, cast

from autotune.records import encode
from autotune.cli import worker
from autotune.cli._common import (
    EngineChoice,
    StudyOutput,
    UsageError,
    add_output_args,
    add_store_args,
    add_workdir_arg,
    check_engine_name,
    command_line,
    default_study_name,
    load_space_for,
    parse_params,
)
from autotune.core.exit_status import ExitStatus

if TYPE_CHECKING:
    from autotune.config.space import SearchSpace
    from autotune.core.params import ParamValue, TrialParams
    from autotune.core.urls import StorageUrl
    from autotune.engines import EngineBackend
    from autotune.store.ledger import Ledger
    from autotune.study import StudyOptions

__all__ = ["DEFAULT_SPACE", "HELP", "configure_parser", "enqueue_params", "run"]

HELP = "Run or resume a tuning study (--gpus: one worker per GPU)."
DEFAULT_SPACE = "search_spaces/default.yaml"


def configure_parser(p: argparse.ArgumentParser) -> None:
    # Every default is read from the option classes' fields (a flag left unset there takes it), never restated.
    from autotune.decisions.racing import RacingPolicy
    from autotune.study.options import DEFAULT_TOP_K, NO_RACING_RESTARTS, STARTS_PER_VERIFIED, StudyOptions

    margin = StudyOptions.verify_margin
    p.add_argument("--space", default=DEFAULT_SPACE, help="search space YAML (default: %(default)s)")
    p.add_argument("--model", help="model path or hub id; overrides engine_args.model")
    p.add_argument("--engine", help="sim, cmd or vllm (default: the space's engine.name, else vllm)")
    p.add_argument("--engine-opt", action="append", metavar="KEY=VALUE", help="engine option, repeatable")
    p.add_argument("--study", help="study name (default: <space>-<engine>-<model>)")
    add_store_args(p)
    add_workdir_arg(p)
    p.add_argument("--trials", type=int, default=None,
                   help="search trials: configurations measured, a repeated suggestion does not count "
                        f"(default: {StudyOptions.trials}; with --budget-restarts, as many as the budget allows)")
    p.add_argument("--restarts", type=int, default=None,
                   help="restarts per trial: the starting number with racing "
                        f"(default {RacingPolicy.min_restarts}), fixed without (default {NO_RACING_RESTARTS})")
    p.add_argument("--max-restarts", type=int, default=RacingPolicy.max_restarts,
                   help="racing cap per trial (default: %(default)s)")
    p.add_argument("--no-racing", action="store_true", help="give every trial exactly --restarts restarts")
    p.add_argument("--top-k", type=int, default=None,
                   help=f"configurations verified at the end (default: {DEFAULT_TOP_K}; with --budget-restarts, 1 per "
                        f"{STARTS_PER_VERIFIED} starts)")
    p.add_argument("--verify-restarts", type=int, default=None,
                   help="fixed restarts per verified configuration (default: planned from the noise the search "
                        "measured, to resolve --min-effect at --power within the budget)")
    p.add_argument("--min-effect", type=float, default=None,
                   help="smallest speedup worth detecting, which verification's restarts are planned for "
                        f"(default: {StudyOptions.min_effect:g})")
    p.add_argument("--power", type=float, default=None,
                   help="chance the plan aims to give a real --min-effect speedup of being found "
                        f"(default: {StudyOptions.power:g})")
    p.add_argument("--verify-rounds", type=int, default=StudyOptions.verify_sequential_rounds,
                   help="most extra rounds of the winner and the baseline while its speedup interval straddles 1 "
                        "and the budget pays (a group-sequential design; 0: fixed verification; default: %(default)s)")
    p.add_argument("--verify-margin", type=float, default=margin,
                   help=f"equivalence margin that also ends those rounds: {margin:g} = the speedup interval inside "
                        f"[1/{1 + margin:g}, {1 + margin:g}] (default: %(default)s)")
    p.add_argument("--no-verify", action="store_true", help="skip the verification phase")
    p.add_argument("--budget-restarts", type=int, help="engine starts for the whole study, verification included")
    p.add_argument("--budget-minutes", type=float, help="engine wall minutes for the whole study")
    p.add_argument("--sampler", choices=("tpe", "gp"), default=StudyOptions.sampler)
    p.add_argument("--seed", type=int, default=StudyOptions.seed)
    p.add_argument("--ci-method", choices=("t", "bca"), default=StudyOptions.interval_method,
                   help="interval for a trial's mean")
    p.add_argument("--fresh", action="store_true", help="delete a study of the same name and start over")
    p.add_argument("--enqueue", action="append", metavar="K=V,K=V",
                   help="a configuration to try early, e.g. num_speculative_tokens=3,draft=ngram (short names as "
                        "for audit --params: K, sizes, mode; repeatable)")
    p.add_argument("--warm-start", metavar="STUDY[,STUDY]",
                   help="start from earlier studies (in --storage): their top configurations are queued first, each "
                        "measured again, and their warm-up noise prior is carried where engine and machine match")
    add_output_args(p)
    worker.add_worker_args(p)


def enqueue_params(space: SearchSpace, item: str) -> TrialParams:
    """``--enqueue cudagraph_mode=FULL,num_speculative_tokens=3,draft=ngram`` -> validated trial parameters.

    Searched engine arguments (``max_num_seqs=16``) may be given too; those left out take their baseline value.
    """
    from autotune.config.space import DEFAULT, SCHEDULE_PARAM

    params = parse_params([p for p in item.split(",") if p.strip()], "--enqueue")
    dims = {d.name: d.baseline for d in space.engine_dims}
    # A space that names K schedules searches their choice too (k_schedule=taper): its K is the schedule's largest.
    chosen = params.get(SCHEDULE_PARAM)  # a schedule's name; anything else is params_problem's to refuse below
    named = dict(space.schedules).get(chosen) if space.schedules and isinstance(chosen, str) else None
    k = named.max_k if named is not None else 0
    full = {"cudagraph_mode": DEFAULT, "capture_sizes": DEFAULT, "num_speculative_tokens": k, **dims, **params}
    allowed = ["cudagraph_mode", "capture_sizes", "num_speculative_tokens", "draft",
               *([SCHEDULE_PARAM] if space.schedules else []), *dims]
    unknown = set(full) - set(allowed)
    if unknown:
        raise UsageError(f"--enqueue {item!r}: unknown parameter(s) {', '.join(sorted(unknown))}; use "
                         f"{', '.join(allowed)}")
    if full["num_speculative_tokens"] and "draft" not in full and space.drafts:
        full["draft"] = space.drafts[0].name
    problem = space.params_problem(full)
    if problem is not None:
        raise UsageError(f"--enqueue {item!r}: {problem} (choices declared in {space.source})")
    # Every value is now one the space declared (params_problem): the space's own parameter values.
    return space.complete_params(cast("dict[str, ParamValue]", full))


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    from autotune.cli import preflight
    from autotune.cli._tune_settings import TuneSettings
    from autotune.store.health import check_storage
    from autotune.store.studydir import check_owned
    from autotune.study import prepare_study, smallest_restart_budget

    space = load_space_for(args)
    # The engine and its options, read once: every ${VAR} the engine will resolve is set, before anything is created
    # (autotune.core.secrets).
    choice = EngineChoice.for_space(space, args.engine, args.engine_opt)
    study_name = args.study or default_study_name(space, choice.name)
    preflight.check_study_name_flag(study_name)
    settings = TuneSettings.from_cli_args(args)  # every flag's bounds, checked once, here; --storage parsed once
    check_owned(settings.workdir, study_name)
    sources = _warm_start_sources(args.warm_start, study_name, settings.storage)
    options = settings.study_options(study_name=study_name, command=command_line(),
                                     enqueue=[enqueue_params(space, item) for item in args.enqueue or ()])
    groups = worker.check_worker_args(args)
    output = StudyOutput.from_cli_args(args)
    # Everything the study needs but the engine never sees is checked before the first engine start.
    preflight.check_budget_covers(options.budget_restarts, smallest_restart_budget(space, options),
                                  "the baselines, one search trial" + (" and verification" if options.verify else ""))
    if output.json_path:
        preflight.check_output_path(output.json_path, "--json", preflight.protected_paths(
            storage=settings.storage, tracking_uri=output.tracking_store, space_file=space.source,
            dataset=preflight.dataset_path(space.workload), study_dir=options.cache_dir), workdir=options.workdir)
    check_storage(settings.storage, write=True)
    if options.fresh:
        preflight.check_fresh(settings.storage, study_name)
    if output.mlflow:
        preflight.check_tracking_store(output.tracking_store)
    check_engine_name(choice.name)
    engine = choice.make(space)
    space = space.in_vocabulary(engine.vocabulary())  # the engine's own names (vLLM 0.34: decode graphs in requests)
    if sources:
        options = _warm_started(options, sources, space, engine)
    preflight.check_page_cache(engine, out)
    _say_what_the_budget_can_prove(options, settings.storage, engine, out)
    if groups is None:
        return worker.run_here(space, engine, options, output, out)
    if settings.storage.memory:
        raise UsageError("--gpus: workers share the study through a storage: keep the default SQLite file "
                         "(one machine) or pass --storage postgresql+psycopg2://... (several machines)")
    try:
        prepare_study(space, engine, options)  # the study and its baselines exist before any worker starts
    finally:
        engine.close()
    return worker.run_local_workers_for(options, settings.storage, output, choice.typed, groups, out, engine, space)


def _say_what_the_budget_can_prove(options: StudyOptions, storage: StorageUrl, engine: EngineBackend,
                                   out: IO[str]) -> None:
    """Before the first start: the smallest speedup the budget can prove at the machine's prior noise, and whether
    --min-effect is in reach (issue 41): a study that cannot resolve what the user asks should say so before the GPU
    is spent, not after."""
    from autotune.core.records import EngineFacts
    from autotune.store.ledger import LedgerError, load
    from autotune.study import StartCosts, budget_reach_for

    ledger = price = None
    if not options.fresh and not storage.memory:
        try:  # a resume: its measured prices and noise, not the defaults
            ledger = load(options.study_name, storage)
            costs = StartCosts.of(ledger)
            price = costs.price((None, False)) if costs.warm else None
        except LedgerError:
            ledger = None
    reach = budget_reach_for(options, encode(EngineFacts.of(engine.describe())), ledger, price)
    if reach is not None:
        out.write(("WARNING: " if not reach.in_reach else "") + "budget: " + reach.describe() + "\n")


def _warm_start_sources(warm_start: str | None, study_name: str, storage: StorageUrl) -> list[Ledger]:
    """The studies ``--warm-start`` names, opened from ``--storage``: a missing one is one line, before anything
    runs."""
    from autotune.store.ledger import LedgerError, load

    names = [n.strip() for n in (warm_start or "").split(",") if n.strip()]
    if warm_start is not None and not names:
        raise UsageError("--warm-start: name at least one earlier study, e.g. --warm-start h200-sim-llama")
    if study_name in names:
        raise UsageError(f"--warm-start {study_name}: a study cannot start from itself")
    sources = []
    for name in dict.fromkeys(names):
        try:
            sources.append(load(name, storage))
        except LedgerError as exc:
            raise UsageError(f"--warm-start: {exc}") from None
    return sources


def _warm_started(options: StudyOptions, sources: Sequence[Ledger], space: SearchSpace, engine: EngineBackend
                  ) -> StudyOptions:
    """``options`` with the sources' top configurations queued first and the warm start's record; the engine's
    warm-up noise prior seeded where engine and machine match (``study._warm_start``)."""
    import dataclasses

    from autotune.core.records import EngineFacts
    from autotune.study import carry_noise, plan_warm_start, warm_start_top

    warm = plan_warm_start(sources, space, EngineFacts.of(engine.describe()), warm_start_top(options.budget_restarts))
    carry_noise(engine, warm)
    return dataclasses.replace(options, enqueue=(*warm.enqueue, *options.enqueue), warm_start=dict(warm.record))

"""``autotune worker``: join a running study, from this machine or another, one worker per GPU with ``--gpus``.

Everything a worker needs comes from the study itself (its space file, engine, budgets, racing and verification
settings, as ``autotune tune`` recorded them), so a machine joins with the study's name and the storage URL:

    AUTOTUNE_STORAGE=postgresql+psycopg2://autotune@db-host/autotune \\
        autotune worker --study llama8b-h200 --gpus 0,1,2,3,4,5,6,7

``autotune tune --gpus`` uses the same code: it creates the study, then starts one worker per GPU group here.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.config.space import SearchSpace
    from autotune.core.urls import StorageUrl
    from autotune.engines import EngineBackend
    from autotune.report import Report
    from autotune.study import StudyOptions
    from autotune.study.events import StudyObserver

from autotune.cli._common import (
    EngineChoice,
    StudyOutput,
    UsageError,
    add_output_args,
    add_store_args,
    stored_space_dir,
    add_workdir_arg,
    command_line,
    parse_kv,
)
from autotune.core.exit_status import ExitStatus
from autotune.core.redact import redact_text

__all__ = ["HELP", "add_worker_args", "configure_parser", "gpu_groups_of", "run", "run_here",
           "run_local_workers_for"]

HELP = "Join a running study from this or another machine (--gpus: one worker per GPU)."


def add_worker_args(p: argparse.ArgumentParser) -> None:
    """``--gpus``, ``--gpus-per-trial`` and ``--heartbeat``: shared by ``tune`` and ``worker``."""
    from autotune.store.ledger import DEFAULT_HEARTBEAT_S

    p.add_argument("--gpus", metavar="LIST", default=None,
                   help="run one worker per GPU of this machine, e.g. 0,1,2,3: each engine start sees only its "
                        "worker's GPUs (CUDA_VISIBLE_DEVICES); the workers share the study through --storage")
    p.add_argument("--gpus-per-trial", type=int, default=1, metavar="N",
                   help="GPUs each worker gets (tensor-parallel models), e.g. 2 with --gpus 0,1,2,3: two workers")
    p.add_argument("--heartbeat", type=int, default=DEFAULT_HEARTBEAT_S, metavar="SECONDS",
                   help="seconds between a worker's heartbeats in the storage; a worker silent for four times "
                        "this is taken for dead and its trial retried (default: %(default)s)")


def check_worker_args(args: argparse.Namespace) -> list[str] | None:
    """``--heartbeat`` and ``--gpus-per-trial``, the same rule in ``tune`` and ``worker``, whether ``--gpus`` is given
    or not: a flag that would be ignored is refused rather than silently dropped. Returns the GPU group of each
    worker ``--gpus`` asks for (:func:`gpu_groups_of`), ``None`` without it: the study runs in this process."""
    from autotune.cli.preflight import MAX_HEARTBEAT_S, check_count

    if args.heartbeat < 1:
        raise UsageError(f"--heartbeat must be >= 1, got {args.heartbeat}")
    check_count("--heartbeat", args.heartbeat, 1, MAX_HEARTBEAT_S, " seconds")
    if args.gpus_per_trial < 1:
        raise UsageError(f"--gpus-per-trial must be >= 1, got {args.gpus_per_trial}")
    if args.gpus is None and args.gpus_per_trial != 1:
        raise UsageError(f"--gpus-per-trial {args.gpus_per_trial} splits the GPUs --gpus lists: add --gpus LIST "
                         "(e.g. --gpus 0,1,2,3), or drop --gpus-per-trial")
    return None if args.gpus is None else gpu_groups_of(args)


def gpu_groups_of(args: argparse.Namespace) -> list[str]:
    from autotune.cli.gpu_workers import GpuSpecError, gpu_groups

    try:
        return gpu_groups(args.gpus, args.gpus_per_trial)
    except GpuSpecError as exc:
        raise UsageError(str(exc)) from None


def run_here(space: SearchSpace, engine: EngineBackend, options: StudyOptions, output: StudyOutput, out: IO[str],
             worker: int | None = None) -> ExitStatus:
    """Run the study in this process (alone, or as one of several workers) and print its report."""
    from autotune.cli.gpu_workers import GPU_ENV
    from autotune.observers.progress import ProgressPrinter
    from autotune.report import build_report
    from autotune.study import Interrupted, run_study

    observers: list[StudyObserver] = [ProgressPrinter(quiet=output.quiet)]
    tracker = None
    if output.mlflow:
        from autotune.observers.mlflow import MlflowTracker

        tracker = MlflowTracker(tracking_uri=output.tracking_uri)
        observers.append(tracker)
    try:
        ledger = run_study(space, engine, options, observers, worker=worker,
                           gpus=os.environ.get(GPU_ENV) if worker is not None else None)
        # One report per tune, built here: MLflow logs (when this process concluded the study) the one printed.
        report = build_report(ledger, engine=engine, space=space)
        if tracker is not None:
            tracker.on_report(report)
    except Interrupted as exc:
        print(f"autotune: {exc}", file=sys.stderr)
        return ExitStatus.for_signal(exc.signum)
    finally:
        for obs in observers:
            obs.close()  # an error must not leave MLflow runs marked RUNNING
        engine.close()
    return _print_report(report, output, out)


def _print_report(report: Report, output: StudyOutput, out: IO[str]) -> ExitStatus:
    """The study's report, redacted, on ``out`` (and ``--json``); a study with no result exits non-zero."""
    print(redact_text(report.render()), file=out)
    if output.json_path:
        from autotune.report import report_json

        output.write_json(report_json(report))
    if report.no_result:
        # A study that measured nothing claims nothing: scripts must not take its "winner" for a result.
        print(f"autotune: error: study {report.study!r} has no result: {redact_text(report.no_result)}",
              file=sys.stderr)
        return ExitStatus.NO_RESULT
    return ExitStatus.SUCCESS


def run_local_workers_for(options: StudyOptions, storage: StorageUrl, output: StudyOutput, engine_opts: Sequence[str],
                          groups: Sequence[str], out: IO[str], engine: EngineBackend, space: SearchSpace) -> ExitStatus:
    """One ``autotune worker`` process per GPU group on this machine, then the study's report.

    ``storage``: the study's store as the command line parsed it (``options.storage`` as text), which every worker
    is handed; ``engine_opts`` are this command's ``--engine-opt`` items, passed on to each worker as typed.
    """
    from autotune.cli.gpu_workers import run_local_workers
    from autotune.report import build_report
    from autotune.store import ledger
    from autotune.store.studydir import NotOwned, prepare_study_dir

    study_name = options.study_name
    argv = ["worker", "--study", study_name, "--workdir", options.workdir, "--heartbeat", str(options.heartbeat_s)]
    for item in engine_opts:
        argv += ["--engine-opt", item]
    if not output.mlflow:
        argv.append("--no-mlflow")
    elif output.tracking_uri:
        argv += ["--tracking-uri", output.tracking_uri]
    argv.append("--quiet")
    # The workers' logs live in the study's directory: create it with its marker first, as a worker would (on a
    # machine that joins a study the directory does not exist yet; a bare mkdir would leave it unmarked and every
    # worker would refuse to write into it).
    from autotune.core.confine import LinkRefused, confined_dir

    try:
        log_dir = str(confined_dir(prepare_study_dir(options.workdir, study_name), "workers"))
    except (NotOwned, LinkRefused) as exc:
        raise UsageError(str(exc)) from None
    print(f"autotune: {len(groups)} workers on study {study_name} ({ledger.redact(storage.url)}); "
          f"their output goes to {log_dir}", file=out)
    watched = ledger.load(study_name, storage)

    def progress() -> str:
        used, _ = watched.budget_used()
        budget = watched.meta().budget_restarts
        return (f"autotune: {watched.finished_search_trials()} trials finished, {used}"
                f"{f' of {budget}' if budget else ''} engine starts used")

    if output.mlflow:
        from autotune.observers.mlflow import prepare_store

        try:
            prepare_store(output.tracking_uri)
        except Exception:  # noqa: BLE001 - each worker reports a tracking problem itself and carries on
            pass
    status = run_local_workers(argv, groups, storage.url, log_dir, out, progress=progress)
    study = ledger.load(study_name, storage)
    meta = study.meta()
    if not (study.has_verification() or meta.verify is False):
        print(f"autotune: the study is not finished (worst worker status {status}); run the same command again "
              "to resume it", file=sys.stderr)
        return ExitStatus.for_signal(status - 128) if status > 128 else ExitStatus.ERROR
    if status:
        print(f"autotune: a worker stopped early (worst status {status}); the others finished the study",
              file=sys.stderr)
    report = build_report(study, engine=engine, space=space)
    return _print_report(report, output, out)


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", required=True, help="the study to join (started with autotune tune --storage URL)")
    add_store_args(p)
    add_workdir_arg(p)
    p.add_argument("--engine-opt", action="append", metavar="KEY=VALUE",
                   help="engine option for this machine (e.g. python=/opt/vllm/bin/python), repeatable")
    add_output_args(p, tracking_note="; use the same server as the study's other workers")
    add_worker_args(p)


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    """Join the study: its space, engine and settings come from the study, so any machine can join."""
    from autotune.cli.gpu_workers import WORKER_ENV
    from autotune.config.space import load_space_text
    from autotune.core.urls import StorageUrl
    from autotune.store import ledger
    from autotune.study import StudyOptions

    groups = check_worker_args(args)
    typed_options = parse_kv(args.engine_opt, "--engine-opt")  # bad input (a literal credential) before the store
    storage = StorageUrl.parse(args.storage)
    try:
        study = ledger.load(args.study, storage)
    except ledger.LedgerError as exc:
        raise UsageError(f"{exc}; start the study first with autotune tune --study {args.study} --storage URL "
                         "(the same URL on every machine)") from None
    meta, text = study.meta(), study.space_yaml()
    if text is None or meta.engine.name is None:
        raise UsageError(f"study {args.study!r} has no recorded space or engine (an older autotune started it): "
                         "resume it with autotune tune --space FILE instead")
    space = load_space_text(text, f"study {args.study}'s stored space", stored_space_dir(meta.space_file))
    if meta.model and space.engine_args.get("model") != meta.model:
        space = space.with_model(meta.model)
    output = StudyOutput.from_cli_args(args)
    if output.json_path:
        from autotune.cli.preflight import check_output_path, dataset_path, protected_paths

        check_output_path(output.json_path, "--json", protected_paths(
            storage=storage, tracking_uri=output.tracking_store, space_file=meta.space_file,
            dataset=dataset_path(space.workload), study_dir=os.path.join(args.workdir, args.study)),
            workdir=args.workdir)
    choice = EngineChoice.joining(space, meta.engine.name, meta.engine_options, typed_options, args.engine_opt)
    engine = choice.make(space)
    space = space.in_vocabulary(engine.vocabulary())  # as `tune` put it, so both run the same configurations
    from autotune.cli.preflight import check_page_cache

    check_page_cache(engine, out)
    # The study's settings as its creator stored them; only where this process keeps its files is its own.
    options = StudyOptions.from_meta(meta, study_name=args.study, storage=storage.url, workdir=args.workdir,
                                     heartbeat_s=args.heartbeat, command=command_line())
    if groups is not None:
        engine.close()
        return run_local_workers_for(options, storage, output, choice.typed, groups, out, engine, space)
    return run_here(space, engine, options, output, out, worker=int(os.environ.get(WORKER_ENV, "0")))

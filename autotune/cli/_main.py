"""The ``autotune`` command: ``main -> raw_main -> program``, one exit status per outcome.

Subcommands: ``tune`` (run or resume a study; ``--gpus`` runs one worker per GPU), ``worker`` (join a study from
this or another machine), ``report`` (the ten-second table, ``--json``), ``export`` (the
winner as a ``vllm serve --config`` YAML, CLI flags or ``LLM`` kwargs), ``ui`` (the MLflow UI), ``audit``
(configured vs resolved for one configuration), ``bench`` (the tuner against other strategies on the simulator).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

from autotune import __version__
from autotune.cli import audit
from autotune.bench import _bench as bench
from autotune.cli import export
from autotune.bench import scaling
from autotune.cli import ui
from autotune.cli import worker
from autotune.cli._common import (
    UsageError,
    add_output_args,
    add_store_args,
    build_engine,
    default_study_name,
    load_space_for,
    open_named_study,
    parse_kv,
)
from autotune.engines.process import interrupt_on_sigterm, stop_live
from autotune.core.exit_status import ExitStatus

__all__ = ["SUBCOMMANDS", "Subcommand", "UsageError", "main", "raw_main"]

DEFAULT_SPACE = "search_spaces/default.yaml"


# -- tune ------------------------------------------------------------------------------------------------


def _configure_tune(p: argparse.ArgumentParser) -> None:
    p.add_argument("--space", default=DEFAULT_SPACE, help="search space YAML (default: %(default)s)")
    p.add_argument("--model", help="model path or hub id; overrides engine_args.model")
    p.add_argument("--engine", help="sim, cmd or vllm (default: the space's engine.name, else vllm)")
    p.add_argument("--engine-opt", action="append", metavar="KEY=VALUE", help="engine option, repeatable")
    p.add_argument("--study", help="study name (default: <space>-<engine>-<model>)")
    add_store_args(p)
    p.add_argument("--workdir", default=os.path.join("mlruns", "autotune"), help="engine caches and logs")
    p.add_argument("--trials", type=int, default=None,
                   help="search trials: configurations measured, a repeated suggestion does not count "
                        "(default: 20; with --budget-restarts, as many as the budget allows)")
    p.add_argument("--restarts", type=int, default=None,
                   help="restarts per trial: the starting number with racing (default 1), fixed without (default 3)")
    p.add_argument("--max-restarts", type=int, default=6, help="racing cap per trial (default: %(default)s)")
    p.add_argument("--no-racing", action="store_true", help="give every trial exactly --restarts restarts")
    p.add_argument("--top-k", type=int, default=None,
                   help="configurations verified at the end (default: 3; with --budget-restarts, 1 per 30 starts)")
    p.add_argument("--verify-restarts", type=int, default=3, help="restarts per verified configuration")
    p.add_argument("--no-verify", action="store_true", help="skip the verification phase")
    p.add_argument("--budget-restarts", type=int, help="engine starts for the whole study, verification included")
    p.add_argument("--budget-minutes", type=float, help="engine wall minutes for the whole study")
    p.add_argument("--sampler", choices=("tpe", "gp"), default="tpe")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ci-method", choices=("t", "bca"), default="t", help="interval for a trial's mean")
    p.add_argument("--fresh", action="store_true", help="delete a study of the same name and start over")
    p.add_argument("--enqueue", action="append", metavar="K=V,K=V",
                   help="a configuration to try early, e.g. num_speculative_tokens=3,draft=ngram (repeatable)")
    add_output_args(p)
    worker.add_worker_args(p)


def _enqueue_params(space: Any, item: str) -> dict[str, Any]:
    """``--enqueue cudagraph_mode=FULL,num_speculative_tokens=3,draft=ngram`` -> validated trial parameters.

    Searched engine arguments (``max_num_seqs=16``) may be given too; those left out take their baseline value.
    """
    from autotune.config.space import DEFAULT

    params = parse_kv([p for p in item.split(",") if p.strip()], "--enqueue")
    dims = {d.name: d.baseline for d in space.engine_dims}
    full = {"cudagraph_mode": DEFAULT, "capture_sizes": DEFAULT, "num_speculative_tokens": 0, **dims, **params}
    allowed = ["cudagraph_mode", "capture_sizes", "num_speculative_tokens", "draft", *dims]
    unknown = set(full) - set(allowed)
    if unknown:
        raise UsageError(f"--enqueue {item!r}: unknown parameter(s) {', '.join(sorted(unknown))}; use "
                         f"{', '.join(allowed)}")
    if full["num_speculative_tokens"] and "draft" not in full and space.drafts:
        full["draft"] = space.drafts[0].name
    problem = space.params_problem(full)
    if problem is not None:
        raise UsageError(f"--enqueue {item!r}: {problem} (choices declared in {space.source})")
    return full


def _tune(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    from autotune.cli import preflight
    from autotune.decisions.racing import RacingPolicy
    from autotune.core.redact import redact_command
    from autotune.study import StudyOptions
    from autotune.store.studydir import check_owned
    from autotune.observers.mlflow import resolve_tracking_uri

    space = load_space_for(args)
    engine_name = args.engine or space.engine.get("name") or "vllm"
    study_name = args.study or default_study_name(space, engine_name)
    preflight.check_study_name_flag(study_name)
    preflight.check_top_k(args.top_k)
    preflight.check_seed(args.seed)
    preflight.check_budget(args.budget_restarts, args.budget_minutes)
    check_owned(args.workdir, study_name)
    # A restart budget is the limit the user chose: a default trial count must not stop the study first (no
    # trial costs less than one engine start, so the budget itself bounds the trials).
    trials = args.trials if args.trials is not None else (args.budget_restarts or 20)
    for flag, value in (("--trials", trials), ("--max-restarts", args.max_restarts),
                        ("--verify-restarts", args.verify_restarts), ("--heartbeat", args.heartbeat)):
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    restarts = args.restarts if args.restarts is not None else (3 if args.no_racing else RacingPolicy.min_restarts)
    if restarts < 1 or restarts > args.max_restarts and not args.no_racing:
        raise UsageError(f"--restarts must be between 1 and --max-restarts ({args.max_restarts}), got {restarts}")
    options = StudyOptions(
        study_name=study_name, storage=args.storage, workdir=args.workdir, trials=trials,
        policy=RacingPolicy(min_restarts=restarts, max_restarts=max(restarts, args.max_restarts),
                            racing=not args.no_racing),
        top_k=args.top_k, verify_restarts=args.verify_restarts, budget_restarts=args.budget_restarts,
        budget_minutes=args.budget_minutes, sampler=args.sampler, seed=args.seed,
        interval_method=args.ci_method, fresh=args.fresh, verify=not args.no_verify,
        command=tuple(redact_command(["autotune", *sys.argv[1:]]) if sys.argv and "autotune" in sys.argv[0] else ()),
        heartbeat_s=args.heartbeat,
    )
    enqueue = [_enqueue_params(space, item) for item in args.enqueue or ()]
    options = dataclasses.replace(options, enqueue=tuple(enqueue))
    # Everything the study needs but the engine never sees is checked before the first engine start.
    from autotune.study import smallest_restart_budget

    preflight.check_budget_covers(args.budget_restarts, smallest_restart_budget(space, options),
                                  "the baselines, one search trial" + (" and verification" if options.verify else ""))
    if args.json:
        preflight.check_output_path(args.json, "--json", preflight.protected_paths(
            storage=args.storage, tracking_uri=resolve_tracking_uri(args.tracking_uri), space_file=space.source,
            dataset=preflight.dataset_path(space.workload), study_dir=os.path.join(args.workdir, study_name)))
    preflight.check_storage(args.storage, write=True)
    if args.fresh:
        preflight.check_fresh(args.storage, study_name)
    if not args.no_mlflow:
        preflight.check_tracking_store(resolve_tracking_uri(args.tracking_uri))
    engine = build_engine(space, args.engine, parse_kv(args.engine_opt, "--engine-opt"))
    if args.gpus is None:
        return worker.run_here(args, space, engine, options, out)
    groups = worker.gpu_groups_of(args)
    if options.storage == "memory":
        raise UsageError("--gpus: workers share the study through a storage: keep the default SQLite file "
                         "(one machine) or pass --storage postgresql+psycopg2://... (several machines)")
    from autotune.study import prepare_study

    try:
        prepare_study(space, engine, options)  # the study and its baselines exist before any worker starts
    finally:
        engine.close()
    return worker.run_local_workers_for(args, study_name, groups, out, engine, space)


def _write_json(path: str, data: Any) -> None:
    with open(path, "w") as fh:
        json.dump(data, fh, indent=2, default=str)


# -- report ----------------------------------------------------------------------------------------------


def _configure_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", help="study name (default: the most recent study in the store)")
    add_store_args(p)
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="write JSON to PATH (or stdout)")


def _report(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    from autotune.cli.preflight import check_output_path, dataset_path, protected_paths
    from autotune.core.redact import redact, redact_text
    from autotune.observers.mlflow import resolve_tracking_uri
    from autotune.report import build_report

    if args.json not in (None, "-"):
        check_output_path(args.json, "--json")
    study = open_named_study(args)
    if args.json not in (None, "-"):
        meta = study.meta()
        check_output_path(args.json, "--json", protected_paths(
            storage=args.storage, tracking_uri=resolve_tracking_uri(), space_file=meta.space_file,
            dataset=dataset_path(meta.workload)))
    report = build_report(study)
    if args.json == "-":
        json.dump(redact(report.to_json()), out, indent=2, default=str)
        out.write("\n")
    else:
        print(redact_text(report.render()), file=out)
        if args.json:
            _write_json(args.json, redact(report.to_json()))
    return ExitStatus.SUCCESS


# -- track -----------------------------------------------------------------------------------------------


def _configure_track(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", required=True, help="the study to log (e.g. one copied back from a GPU box)")
    add_store_args(p)
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default as for tune)")


def _track(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    from autotune.observers.mlflow import TrackingError, log_study

    ledger = open_named_study(args)
    try:
        run_id = log_study(ledger, tracking_uri=args.tracking_uri)
    except TrackingError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        return ExitStatus.ERROR
    print(f"Logged study {args.study} to MLflow (parent run {run_id}); open it with `make ui`.", file=out)
    return ExitStatus.SUCCESS


# -- the registry --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """One ``autotune`` subcommand: its name, one line of help, its flags and what it runs."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, IO[str]], int]


#: Every subcommand, in the order ``--help`` lists them. A new one is a module with ``configure_parser`` and
#: ``run`` (importing shared helpers from :mod:`autotune.cli._common`, never from here) and one line below.
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("tune", "Run or resume a tuning study (--gpus: one worker per GPU).", _configure_tune, _tune),
    Subcommand("worker", "Join a running study from this or another machine (--gpus: one worker per GPU).",
               worker.configure_parser, worker.run),
    Subcommand("report", "Print a study's result (--json for the same as JSON).", _configure_report, _report),
    Subcommand("track", "Log a finished study to MLflow (studies run with --no-mlflow elsewhere).",
               _configure_track, _track),
    Subcommand("export", "Export the verified winner as a vllm serve YAML, CLI flags or LLM kwargs.",
               export.configure_parser, export.run),
    Subcommand("ui", "Start the MLflow UI on 127.0.0.1 against the project's store.", ui.configure_parser, ui.run),
    Subcommand("audit", "Start the engine once: configured vs resolved, side by side.",
               audit.configure_parser, audit.run),
    Subcommand("bench", "Benchmark the tuner against other strategies on simulated ground truth.",
               bench.configure_parser, bench.run),
    Subcommand("bench-scaling", "1, 2, 4 and 8 workers on one study at one start budget, on simulated time.",
               scaling.configure_parser, scaling.run),
)


# -- main ------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autotune",
        description="Bayesian-optimisation autotuner for vLLM: CUDA-graph capture x speculative decoding, "
        "measured across fresh restarts, verified against the baseline.",
    )
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in SUBCOMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.configure(p)
        p.set_defaults(handler=command.run)
    return parser


def program(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    """Run the chosen subcommand; bad input becomes a one-line error and a non-zero status."""
    from sqlalchemy.exc import SQLAlchemyError

    from autotune.engines import EngineError
    from autotune.store.fingerprint import FingerprintMismatch
    from autotune.store.ledger import LedgerError
    from autotune.cli.preflight import PreflightError
    from autotune.core.redact import redact_text
    from autotune.config.space import SpaceError
    from autotune.study import BudgetTooSmall
    from autotune.store.studydir import NotOwned

    try:
        return ExitStatus(args.handler(args, out))
    except (SpaceError, UsageError, LedgerError, PreflightError, NotOwned, FingerprintMismatch, BudgetTooSmall) as exc:
        print(f"autotune: error: {redact_text(str(exc))}", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    except EngineError as exc:
        print(f"autotune: error: {redact_text(str(exc))}", file=sys.stderr)
        return ExitStatus.ERROR
    except SQLAlchemyError as exc:
        # The store broke mid-command (disk full, a server gone): one line; what was stored before is kept.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"autotune: error: the study storage failed: {redact_text(first)[:300]}; check --storage and "
              "disk space, then run the same command again", file=sys.stderr)
        return ExitStatus.ERROR


def raw_main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> ExitStatus:
    """Parse ``argv`` and run; argparse errors exit 2 like every usage error."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return ExitStatus(exc.code if isinstance(exc.code, int) else ExitStatus.BAD_INPUT)
    # SIGTERM (docker stop, systemd, Slurm) takes Ctrl-C's path: engines stopped, the trial marked interrupted,
    # MLflow runs closed, the same command resumes.
    try:
        with interrupt_on_sigterm():
            try:
                return program(args, out or sys.stdout)
            finally:
                stop_live()  # an engine an interruption caught mid-start must not outlive autotune
    except KeyboardInterrupt as exc:
        name = getattr(exc, "signal_name", None)
        print(f"autotune: interrupted{f' by {name}' if name else ''}", file=sys.stderr)
        return ExitStatus.for_signal(getattr(exc, "signum", None))


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    return int(raw_main(argv))

"""``autotune recheck``: does a study's stored verdict still hold on today's engine and machine?

Re-measures the stored winner and baseline (``--runner-ups``: the other verified challengers too) in fresh
interleaved matched-seed restarts, prints them side by side with the stored result, stores a recheck record in the
study (its own verdict untouched), logs it to MLflow as a nested run of the study's parent, and exits with a status
a cron job or CI can act on:

====  ==========================================================================================================
0     the verdict holds: "still faster" (or, for a study whose baseline won, "still not faster"); two engines:
      the new engine is as fast or faster
3     "engine changed the configuration": the engine resolves the winner or the baseline differently now
4     nothing to recheck: the study has no verification yet
5     "no longer faster": the stored winner is no longer significantly faster than the baseline
6     "now slower": significantly slower than the baseline (two engines: slower on the new engine)
7     "now faster": the study's best challenger was not faster then and is now
====  ==========================================================================================================

``--space FILE`` rechecks on the engine that file configures (a new image, a new interpreter, a simulated
``engine_version``) in place of the stored copy; ``--engine-opt KEY=VALUE`` compares two engines: the winner on the
study's engine beside the winner on that engine changed by the options, in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO

from autotune.cli._common import (
    UsageError, add_store_args, add_workdir_arg, build_engine, make_engine_from_input, parse_kv, stored_space_dir,
    write_json,
)
from autotune.core.exit_status import ExitStatus

__all__ = ["EXIT_FOR_VERDICT", "HELP", "configure_parser", "run"]

HELP = "Re-measure a study's winner and baseline on today's engine and machine: does the verdict still hold?"


def _exit_for_verdict() -> dict[str, ExitStatus]:
    from autotune.decisions import recheck as r

    return {r.STILL_FASTER: ExitStatus.SUCCESS, r.STILL_NOT_FASTER: ExitStatus.SUCCESS,
            r.NEW_FASTER: ExitStatus.SUCCESS, r.NEW_SAME: ExitStatus.SUCCESS, r.CONFIG_CHANGED: ExitStatus.CHANGED,
            r.NO_LONGER_FASTER: ExitStatus.NO_LONGER_FASTER, r.NOW_SLOWER: ExitStatus.NOW_SLOWER,
            r.NOW_FASTER: ExitStatus.NOW_FASTER}


EXIT_FOR_VERDICT = _exit_for_verdict()


EPILOG = ("exit status: 0 the verdict holds (still faster; still not faster; two engines: as fast or faster), "
          "3 engine changed the configuration, 4 no verification yet, 5 no longer faster, 6 now slower, 7 now faster "
          "(the study's best challenger was not faster then), 2 bad input")


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("--study", required=True, help="the study whose verdict to recheck")
    add_store_args(p)
    add_workdir_arg(p)
    p.add_argument("--space", help="today's space file (its engine section: a new image, interpreter or version) "
                                   "in place of the copy the study stored")
    p.add_argument("--engine-opt", action="append", metavar="KEY=VALUE",
                   help="compare two engines: the winner on the study's engine beside the winner on the engine with "
                        "these options (e.g. python=/path/new-venv/bin/python, image=...), repeatable")
    p.add_argument("--restarts", type=int, help="counted restarts per configuration (default: sized from the "
                                                "study's verification and its recorded noise)")
    p.add_argument("--budget-minutes", type=float, help="engine wall minutes the recheck may take")
    p.add_argument("--runner-ups", action="store_true", help="re-measure the study's other verified challengers too")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or "
                                                        "sqlite:///mlruns/mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    p.add_argument("--json", metavar="PATH", help="also write the recheck record as JSON to PATH")


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:

    from autotune.cli.preflight import (MAX_RESTARTS, check_budget, check_count, check_output_path, check_storage,
                                        dataset_path, protected_paths)
    from autotune.config.space import load_space, load_space_text
    from autotune.report.lineage import render_recheck
    from autotune.store.ledger import load
    from autotune.store.studydir import check_owned, prepare_study_dir, study_dir
    from autotune.study import RecheckError, RecheckOptions, recheck

    if args.restarts is not None and args.restarts < 2:
        raise UsageError(f"--restarts must be >= 2 (an interval needs two restarts a side), got {args.restarts}")
    check_count("--restarts", args.restarts, 2, MAX_RESTARTS)
    check_budget(None, args.budget_minutes)  # tune's rule: finite, over 0, at most a year
    if args.json:  # a first check before the study is read; the protected paths are checked once they are known
        check_output_path(args.json, "--json", links=False)
    check_storage(args.storage, write=True, existing=True)  # a typo's path must not become a new store
    ledger = load(args.study, args.storage)
    if ledger.verification() is None:
        print(f"autotune: study {args.study!r} has no verification to recheck yet: finish it with autotune tune",
              file=sys.stderr)
        return ExitStatus.NO_RESULT
    meta = ledger.meta()
    if meta.engine.name is None:
        raise UsageError(f"study {args.study!r} recorded no engine (an older autotune ran it): it cannot be rechecked")
    if args.json:
        # Before any restart (issue 32, principle 7): never over the stores, the space, the dataset or the study's logs.
        from autotune.observers.mlflow import resolve_tracking_uri

        check_output_path(args.json, "--json", protected_paths(
            storage=args.storage, tracking_uri=resolve_tracking_uri(args.tracking_uri), space_file=meta.space_file,
            dataset=dataset_path(meta.workload), study_dir=os.path.join(args.workdir, args.study)))
    # The study's own engine caches and logs (its compile caches are today's too): the directory the study owns.
    # Made only once every input (the space, the engine options) is accepted: a refused recheck leaves nothing.
    cache_dir = str(study_dir(args.workdir, args.study))
    check_owned(args.workdir, args.study)
    if args.space:
        space = load_space(args.space)
        engine = build_engine(space, meta.engine.name, {}, cache_dir=cache_dir)
    else:
        text = ledger.space_yaml()
        if text is None:
            raise UsageError(f"study {args.study!r} stored no space file: pass --space FILE")
        space = load_space_text(text, f"study {args.study}'s stored space", stored_space_dir(meta.space_file))
        engine = make_engine_from_input(meta.engine.name, cache_dir, meta.engine_options)
        engine.check(space)
    if meta.model and space.engine_args.get("model") != meta.model:
        space = space.with_model(meta.model)
    new_engine = None
    if args.engine_opt:
        options = {**dict(engine.options), **parse_kv(args.engine_opt, "--engine-opt")}
        new_engine = make_engine_from_input(meta.engine.name, os.path.join(cache_dir, "recheck-new-engine"), options)
        new_engine.check(space)
    prepare_study_dir(args.workdir, args.study)
    try:
        record = recheck(ledger, space, engine, RecheckOptions(args.restarts, args.budget_minutes, args.runner_ups),
                         new_engine=new_engine)
    except RecheckError as exc:
        raise UsageError(str(exc)) from None
    finally:
        for e in (engine, new_engine):
            if e is not None:
                e.close()
    print("\n".join(render_recheck(record, space.workload.unit)), file=out)
    if args.json:
        write_json(args.json, record.to_dict())
    if not args.no_mlflow:
        from autotune.observers.mlflow import TrackingError, log_recheck

        try:
            log_recheck(ledger, record, args.tracking_uri)
        except TrackingError as exc:
            print(f"autotune: warning: {exc} (the recheck is stored in the study)", file=sys.stderr)
    return EXIT_FOR_VERDICT.get(record.verdict, ExitStatus.ERROR)

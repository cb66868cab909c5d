"""``autotune recheck``: did a study's stored speedup change on today's engine and machine?

Re-measures the stored winner and baseline (``--runner-ups``: the other verified challengers too) in fresh
interleaved matched-seed restarts, prints them side by side with the stored result, stores a recheck record in the
study (its own verdict untouched), logs it to MLflow as a nested run of the study's parent, and exits with a status
a cron job or CI can act on. The verdict answers "did it change?": today's speedup of the winner over the baseline
(measured today, on fresh seeds) against the stored one, each with its own uncertainty, through an anytime-valid
confidence sequence looked at after every round (the rounds stop once it decides). Only a change the data support
beyond the equivalence margin (``--margin``, default 5%) exits non-zero; a study whose baseline won is tested the
same way on its best challenger's ratio:

====  ==========================================================================================================
0     no change the data support: "unchanged" (today's speedup is within +-margin of the stored one) or
      "undecided" (neither shown yet: the output says how many more rounds would decide); two engines: the new
      engine is as fast or faster
3     "engine changed the configuration": the speed did not change, but the engine resolves the winner or the
      baseline differently now
4     nothing to recheck: the study has no verification yet
5     "changed: now slower": the speedup fell by more than the margin (a change the data support), or the
      winner or the baseline fails today ("changed: fails now")
6     "changed: now slower than the baseline": as 5, and today the winner is slower than the baseline (two
      engines: slower on the new engine)
7     "changed: now faster": the speedup rose by more than the margin
====  ==========================================================================================================

``--space FILE`` rechecks on the engine that file configures (a new image, a new interpreter, a simulated
``engine_version``) in place of the stored copy; ``--engine-opt KEY=VALUE`` compares two engines: the winner on the
study's engine beside the winner on that engine changed by the options, in the same rounds. An engine of another
vLLM version than the study's runs the stored configurations in its own names, translated as ``export
--vllm-version`` writes them, or the recheck is refused in one line with the reason (exit 2) before any engine starts.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import IO

from autotune.records import encode
from autotune.cli._common import (
    UsageError, add_store_args, add_workdir_arg, build_engine, check_references, make_engine_from_input, parse_kv,
    stored_space_dir,
    write_json,
)
from autotune.core.exit_status import ExitStatus
from autotune.core.urls import StorageUrl

__all__ = ["EXIT_FOR_VERDICT", "HELP", "configure_parser", "run"]

HELP = "Re-measure a study's winner and baseline on today's engine and machine: did its speedup change?"


def _exit_for_verdict() -> dict[str, ExitStatus]:
    from autotune.decisions import recheck as r

    return {r.UNCHANGED: ExitStatus.SUCCESS, r.UNDECIDED: ExitStatus.SUCCESS, r.NEW_FASTER: ExitStatus.SUCCESS,
            r.NEW_SAME: ExitStatus.SUCCESS, r.CONFIG_CHANGED: ExitStatus.CHANGED,
            r.CHANGED_SLOWER: ExitStatus.NO_LONGER_FASTER, r.FAILS_NOW: ExitStatus.NO_LONGER_FASTER,
            r.SLOWER_THAN_BASELINE: ExitStatus.NOW_SLOWER, r.NOW_SLOWER: ExitStatus.NOW_SLOWER,
            r.CHANGED_FASTER: ExitStatus.NOW_FASTER}


EXIT_FOR_VERDICT = _exit_for_verdict()


EPILOG = ("exit status: 0 no change the data support (unchanged within the margin, or undecided; two engines: as "
          "fast or faster), 3 engine changed the configuration, 4 no verification yet, 5 changed: now slower (the "
          "speedup fell beyond the margin, or a configuration fails today), 6 changed: now slower than the baseline "
          "(two engines: slower on the new engine), 7 changed: now faster, 2 bad input")


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
    p.add_argument("--budget-minutes", type=float, help="engine wall minutes the recheck may take (tune's rule: no "
                                                        "start once the next one's measured price does not fit)")
    p.add_argument("--margin", type=float, default=None, metavar="FRACTION",
                   help="equivalence margin of the change test: today's speedup within +-FRACTION of the stored one "
                        "is unchanged (default 0.05)")
    p.add_argument("--runner-ups", action="store_true", help="re-measure the study's other verified challengers too")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or "
                                                        "sqlite:///mlruns/mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    p.add_argument("--json", metavar="PATH", help="also write the recheck record as JSON to PATH")


def _margin(value: float | None) -> float:
    from autotune.decisions.recheck import DEFAULT_MARGIN

    if value is None:
        return DEFAULT_MARGIN
    if not math.isfinite(value) or not 0.0 < value < 1.0:
        raise UsageError(f"--margin must be a fraction between 0 and 1 (0.05: +-5%), got {value:g}")
    return value


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:

    from autotune.cli.preflight import (MAX_RESTARTS, check_budget, check_count, check_output_path, dataset_path,
                                        protected_paths)
    from autotune.config.space import load_space, load_space_text
    from autotune.engines.vllm.vocabulary import vocabulary_for
    from autotune.report.lineage import render_recheck
    from autotune.store.health import check_storage
    from autotune.store.ledger import load
    from autotune.engines.process import set_scope
    from autotune.store.studydir import check_owned, prepare_study_dir, study_dir
    from autotune.study import RecheckError, RecheckOptions, recheck, recheck_configs

    if args.restarts is not None and args.restarts < 2:
        raise UsageError(f"--restarts must be >= 2 (an interval needs two restarts a side), got {args.restarts}")
    check_count("--restarts", args.restarts, 2, MAX_RESTARTS)
    check_budget(None, args.budget_minutes)  # tune's rule: finite, over 0, at most a year
    margin = _margin(args.margin)
    new_options = parse_kv(args.engine_opt, "--engine-opt")  # bad input (a literal credential) before the store
    if args.json:  # a first check before the study is read; the protected paths are checked once they are known
        check_output_path(args.json, "--json", links=False, workdir=args.workdir)
    storage = StorageUrl.parse(args.storage)
    check_storage(storage, write=True, existing=True)  # a typo's path must not become a new store
    ledger = load(args.study, storage)
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
            storage=storage, tracking_uri=resolve_tracking_uri(args.tracking_uri),
            space_file=meta.space_file,
            dataset=dataset_path(meta.workload), study_dir=os.path.join(args.workdir, args.study)),
            workdir=args.workdir)
    # The study's own engine caches and logs (its compile caches are today's too): the directory the study owns.
    # Made only once every input (the space, the engine options) is accepted: a refused recheck leaves nothing.
    cache_dir = str(study_dir(args.workdir, args.study))
    check_owned(args.workdir, args.study)
    set_scope(args.workdir)  # its engines are tagged as this workdir's (engines.process.stop_orphans)
    if args.space:
        space = load_space(args.space)
        engine = build_engine(space, meta.engine.name, {}, cache_dir=cache_dir)
    else:
        text = ledger.space_yaml()
        if text is None:
            raise UsageError(f"study {args.study!r} stored no space file: pass --space FILE")
        space = load_space_text(text, f"study {args.study}'s stored space", stored_space_dir(meta.space_file))
        # The stored space and options hold references (${HF_TOKEN}), resolved when the engine starts.
        check_references(space, dict(meta.engine_options), meta.engine.name)
        engine = make_engine_from_input(meta.engine.name, cache_dir, meta.engine_options)
        engine.check(space)
    if meta.model and space.engine_args.get("model") != meta.model:
        space = space.with_model(meta.model)
    # The study's own names: its stored configurations rebuild as it measured them; recheck_configs carries them to
    # each engine's names (another vLLM version: translated as export --vllm-version writes them, or refused).
    space = space.in_vocabulary(vocabulary_for(meta.engine))
    new_engine = None
    if args.engine_opt:
        options = {**dict(engine.options), **new_options}
        check_references(space, options, meta.engine.name)
        new_engine = make_engine_from_input(meta.engine.name, os.path.join(cache_dir, "recheck-new-engine"), options)
        new_engine.check(space)
    try:  # before the study's directory is made and any engine starts: a refused recheck leaves nothing
        configs = recheck_configs(ledger, space, engine, new_engine=new_engine, runner_ups=args.runner_ups)
    except RecheckError as exc:
        for e in (engine, new_engine):
            if e is not None:
                e.close()
        raise UsageError(str(exc)) from None
    for note in configs.translated:
        print(f"autotune: note: {note}", file=sys.stderr)
    prepare_study_dir(args.workdir, args.study)
    from autotune.observers.progress import RecheckProgress

    # Each restart is stored as it lands (study._recheck): the same command after Ctrl-C continues from them.
    progress = RecheckProgress(sys.stderr, space.workload.unit)
    try:
        record = recheck(ledger, space, engine, RecheckOptions(args.restarts, args.budget_minutes, args.runner_ups,
                                                                      margin=margin),
                         new_engine=new_engine, on_restart=progress.on_restart, on_start=progress.start)
    except RecheckError as exc:
        raise UsageError(str(exc)) from None
    finally:
        progress.close()
        for e in (engine, new_engine):
            if e is not None:
                e.close()
    print("\n".join(render_recheck(record, space.workload.unit)), file=out)
    if args.json:
        write_json(args.json, encode(record), args.workdir)
    if not args.no_mlflow:
        from autotune.observers.mlflow import TrackingError, log_recheck

        try:
            log_recheck(ledger, record, args.tracking_uri)
        except TrackingError as exc:
            print(f"autotune: warning: {exc} (the recheck is stored in the study)", file=sys.stderr)
    return EXIT_FOR_VERDICT.get(record.verdict, ExitStatus.ERROR)

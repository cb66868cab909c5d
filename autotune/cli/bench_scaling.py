"""``autotune bench-scaling``: 1, 2, 4 and 8 workers on one study at one start budget, on simulated time.

The benchmark itself is :mod:`autotune.bench.scaling`; this module reads its command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import IO, Any

from autotune.bench import PROFILES, count
from autotune.bench.scaling import (
    DEFAULT_BUDGET,
    DEFAULT_SEEDS,
    DEFAULT_WORKERS,
    ScalingRun,
    load_runs,
    render,
    run_scaling,
    summarize,
)
from autotune.cli._common import write_json
from autotune.cli.bench import _int_list, _name_list
from autotune.core.exit_status import ExitStatus
from autotune.study import BudgetTooSmall

__all__ = ["HELP", "configure_parser", "run"]

HELP = "1, 2, 4 and 8 workers on one study at one start budget, on simulated time."
#: More workers than any machine of the benchmark's profiles runs.
_MAX_WORKERS = 256


def _bounded(low: int, high: int) -> Any:
    return count(low, high)  # the benchmarks' one typed count (bench/_args.py)


def configure_parser(p: argparse.ArgumentParser) -> None:
    # Every flag typed and bounded where it is parsed (issue 44: --seeds 0 ran nothing and said so with exit 0,
    # --workers 0 and --profiles nope were KeyError tracebacks, --first-seed -1 a ValueError).
    p.add_argument("--profiles", type=_name_list(tuple(PROFILES)), default=("gb10", "h200"),
                   help="simulator profiles (default: gb10,h200)")
    p.add_argument("--workers", type=_int_list, default=DEFAULT_WORKERS,
                   help=f"worker counts (default: {','.join(map(str, DEFAULT_WORKERS))})")
    p.add_argument("--budget", type=_bounded(1, 1_000_000), default=DEFAULT_BUDGET,
                   help="engine starts per study (default: %(default)s)")
    p.add_argument("--seeds", type=_bounded(1, 100_000), default=DEFAULT_SEEDS,
                   help="seeds per cell (default: %(default)s)")
    p.add_argument("--first-seed", type=_bounded(0, 2**32 - 1 - 100_000), default=0)
    p.add_argument("--json", metavar="PATH", help="also write every run and the summary as JSON")
    p.add_argument("--summarize", nargs="+", metavar="JSON",
                   help="run nothing: summarise the runs stored by earlier --json runs (more seeds in several goes)")


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    if args.summarize:
        try:
            stored = [r for path in args.summarize for r in load_runs(path)]
        except ValueError as exc:
            print(f"autotune: error: --summarize {exc}", file=sys.stderr)
            return ExitStatus.BAD_INPUT
        print(render(summarize(stored)), file=out)
        return ExitStatus.SUCCESS
    if args.json:  # before the runs, not after them
        from autotune.cli.preflight import check_output_path

        check_output_path(args.json, "--json")
    workers = list(args.workers)
    if max(workers) > _MAX_WORKERS:
        print(f"autotune: error: --workers {max(workers)}: at most {_MAX_WORKERS} workers a study", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    if 1 not in workers:
        workers = [1, *workers]  # the speedup is over one worker
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    runs: list[ScalingRun] = []
    for profile in args.profiles:
        try:
            runs += run_scaling(profile, workers, args.budget, seeds, out=sys.stderr)
        except BudgetTooSmall as exc:  # the study's own words name its flag; this command's is --budget
            print(f"autotune: error: {str(exc).replace('--budget-restarts', '--budget')}", file=sys.stderr)
            return ExitStatus.BAD_INPUT
    rows = summarize(runs)
    print(render(rows), file=out)
    if args.json:
        write_json(args.json, {"runs": [dataclasses.asdict(r) for r in runs], "summary": rows})
    return ExitStatus.SUCCESS

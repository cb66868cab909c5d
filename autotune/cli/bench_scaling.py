"""``autotune bench-scaling``: 1, 2, 4 and 8 workers on one study at one start budget, on simulated time.

The benchmark itself is :mod:`autotune.bench.scaling`; this module reads its command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import IO

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
from autotune.core.exit_status import ExitStatus

__all__ = ["HELP", "configure_parser", "run"]

HELP = "1, 2, 4 and 8 workers on one study at one start budget, on simulated time."


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profiles", default="gb10,h200", help="simulator profiles (default: %(default)s)")
    p.add_argument("--workers", default=",".join(map(str, DEFAULT_WORKERS)),
                   help="worker counts (default: %(default)s)")
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="engine starts per study (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="seeds per cell (default: %(default)s)")
    p.add_argument("--first-seed", type=int, default=0)
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
    workers = [int(w) for w in str(args.workers).split(",") if w.strip()]
    if 1 not in workers:
        workers = [1, *workers]  # the speedup is over one worker
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    runs: list[ScalingRun] = []
    for profile in [p.strip() for p in args.profiles.split(",") if p.strip()]:
        runs += run_scaling(profile, workers, args.budget, seeds, out=sys.stderr)
    rows = summarize(runs)
    print(render(rows), file=out)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": [dataclasses.asdict(r) for r in runs], "summary": rows},
                                              indent=2))
    return ExitStatus.SUCCESS

"""``autotune bench``: the tuner against other strategies on the simulator's ground truth.

The benchmark itself lives in :mod:`autotune.bench`; this module is its command line: flags in, a
:class:`~autotune.bench.BenchConfig` built once, then JSON, PNG, MLflow and the table out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from autotune.bench import (
    DEFAULT_BUDGETS,
    DEFAULT_OUT,
    DEFAULT_SEEDS,
    HELD_OUT_SEEDS,
    MLFLOW_EXPERIMENT,
    PROFILES,
    STRATEGIES,
    BenchConfig,
    check_status,
    log_to_mlflow,
    plot_regret,
    render_header,
    render_table,
    render_targets,
    run_benchmark,
)
from autotune.cli._common import UsageError, open_output
from autotune.core.confine import LinkRefused, confined_output, output_roots
from autotune.core.exit_status import ExitStatus
from autotune.engines.drift import PRESETS as DRIFT_PRESETS
from autotune.observers.mlflow import DEFAULT_TRACKING_URI

__all__ = ["HELP", "configure_parser", "run"]

HELP = "Benchmark the tuner against other strategies on simulated ground truth."
DRIFTS = ("off", *sorted(DRIFT_PRESETS))


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, e.g. 20,30,60,120; got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, e.g. 20,30,60,120; got {text!r}")
    return values


def _name_list(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(v.strip() for v in text.split(",") if v.strip())
        bad = [n for n in names if n not in choices]
        if not names or bad:
            raise argparse.ArgumentTypeError(f"unknown {bad[0] if bad else 'empty list'!r}; choose from "
                                             f"{', '.join(choices)}")
        return names

    return parse


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Flags of ``autotune bench``."""
    parser.add_argument("--profiles", type=_name_list(tuple(PROFILES)), default=tuple(PROFILES),
                        help=f"comma-separated (default: {','.join(PROFILES)})")
    parser.add_argument("--strategies", type=_name_list(STRATEGIES), default=STRATEGIES,
                        help=f"comma-separated (default: {','.join(STRATEGIES)})")
    parser.add_argument("--budgets", type=_int_list, default=DEFAULT_BUDGETS,
                        help=f"engine starts per strategy run, comma-separated "
                             f"(default: {','.join(map(str, DEFAULT_BUDGETS))})")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"independent runs per cell (default: {DEFAULT_SEEDS}; {HELD_OUT_SEEDS[1]} with --check)")
    parser.add_argument("--first-seed", type=int, default=None,
                        help=f"first seed; a different range is a held-out check (default: 0; {HELD_OUT_SEEDS[0]} "
                             "with --check)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default: %(default)s)")
    parser.add_argument("--sampler", choices=("tpe", "gp"), default="tpe",
                        help="the autotune strategy's sampler (default: %(default)s; gp needs torch)")
    parser.add_argument("--verify", choices=("planned", "fixed"), default="planned",
                        help="the studies' verification: planned from the search's noise as autotune tune does, or "
                             "fixed at three restarts a side as before the plan (default: %(default)s)")
    parser.add_argument("--drift", choices=DRIFTS, default="off",
                        help="the simulator's machine: off (restarts independent, the landscapes as before) or a "
                             "drifting machine fitted from real GPUs, whose level moves over minutes so restarts "
                             "close in time correlate (docs/simulator.md; default: %(default)s)")
    parser.add_argument("--root", default=".", help="directory the profiles' search_spaces/ paths are relative to")
    parser.add_argument("--out", default=DEFAULT_OUT, help="where bench.json and regret.png go (default: %(default)s)")
    parser.add_argument("--tracking-uri", default=None,
                        help=f"MLflow tracking URI (default: $MLFLOW_TRACKING_URI or {DEFAULT_TRACKING_URI})")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    parser.add_argument("--check", action="store_true",
                        help=f"run the held-out seeds {HELD_OUT_SEEDS[0]}-{sum(HELD_OUT_SEEDS) - 1} (unless --seeds or "
                             "--first-seed say otherwise) and exit 1 when an issue-9 target is missed")


def _progress_printer(stream: IO[str]) -> Callable[[int, int], None]:
    last = [-1]

    def show(done: int, total: int) -> None:
        tenth = done * 10 // total
        if tenth != last[0]:
            last[0] = tenth
            print(f"bench: {done}/{total} runs", file=stream, flush=True)

    return show


def run(args: argparse.Namespace, out: IO[str]) -> int:
    """``autotune bench``: run, write JSON and PNG, log to MLflow, print the table last."""
    first_seed, seeds = HELD_OUT_SEEDS if args.check else (0, DEFAULT_SEEDS)
    seeds = seeds if args.seeds is None else args.seeds
    first_seed = first_seed if args.first_seed is None else args.first_seed
    if seeds < 1 or args.jobs < 1:
        print("autotune: error: --seeds and --jobs must be >= 1", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    config = BenchConfig(profiles=tuple(args.profiles), strategies=tuple(args.strategies),
                         budgets=tuple(args.budgets), seeds=seeds, first_seed=first_seed,
                         jobs=args.jobs, root=args.root, sampler=args.sampler, verify=args.verify,
                         drift=args.drift)
    out_dir = Path(args.out)
    json_path, png_path = out_dir / "bench.json", out_dir / "regret.png"
    # Before the benchmark runs: --out's files never through a link out of the directory --out was named in
    # (issue 44; the rule is core.confine's), nor through a link as themselves.
    for path in (json_path, png_path):
        if path.is_symlink():
            raise UsageError(f"--out {args.out}: {path} is a symbolic link (to {os.readlink(path)}); autotune does "
                             "not write through links: give the real path, or remove the link")
        try:
            confined = confined_output(path, output_roots())
        except LinkRefused as exc:
            raise UsageError(f"--out {args.out}: {exc.strerror}") from None
    result = run_benchmark(config, progress=_progress_printer(sys.stderr))
    if confined is None:  # a directory named outside the working directory: made as given
        out_dir.mkdir(parents=True, exist_ok=True)
    with open_output(str(json_path), "--out") as fh:  # its directories made on the way, never through a link
        fh.write(json.dumps(result, indent=1, default=str))
    with open_output(str(png_path), "--out", mode="wb") as fh:
        plot_regret(result, fh)
    lines = [render_header(result), f"  JSON: {json_path}  plot: {png_path}"]
    if not args.no_mlflow:
        from autotune.observers.mlflow import resolve_tracking_uri

        uri = resolve_tracking_uri(args.tracking_uri)
        run_id = log_to_mlflow(result, [json_path, png_path], uri)
        lines.append(f"  MLflow: experiment {MLFLOW_EXPERIMENT}, run {run_id} ({uri})")
    lines += ["", "Targets:", render_targets(result), "", render_table(result)]
    print("\n".join(lines), file=out)
    return check_status(result, args.check, sys.stderr)

"""``autotune bench``: the tuner against other search strategies, scored on the simulator's ground truth.

Every strategy gets the same budget in engine starts (cold first starts included) on the same simulated machine,
and is scored on what its user would walk away with:

* **simple regret** of the recommended configuration: ``(true best - true value of the pick) / true best``;
  mean, median and 90th percentile over seeds;
* **coverage** of the reported 95% interval of the winner's throughput (CI), and of the verdict's speedup
  interval over the runs whose winner is not the baseline (xCI), for strategies that report them;
* **"faster" claims**: how often the strategy tells its user the pick beats the baseline. On the ``flat``
  profile no configuration is more than 1% faster than the baseline, so every claim there is a false win;
* **distinct configurations** that got at least one engine start, and the starts used;
* **found**: the regret of the truly best configuration that got an engine start, whatever was picked. It splits
  the pick's regret in two: what the search never reached (``found``) and what selection lost (regret - found).

Strategies:

* ``autotune`` - :func:`autotune.study._loop.run_study` with its defaults and ``budget_restarts``.
* ``random`` - the same study (racing, verification) with Optuna's ``RandomSampler``.
* ``random-2`` - random search by hand: the baseline, then distinct random configurations, 2 restarts each,
  best mean wins. No verification.
* ``grid`` - a coarse grid (every mode, default capture sizes, every other K, every draft), 3 restarts per
  point, best mean wins; what a ``vllm bench sweep`` user does. A budget smaller than the grid runs a seeded
  random subset of it, the baseline always included. No verification.
* ``naive-tpe`` - Optuna's default TPE, one restart per trial, best observed value wins. No verification.

``random-2``, grid and naive TPE use whatever a restart reports, the slow cold first start of a configuration
included: their users do not know about it. The ``random`` profile draws a different landscape per seed
(:mod:`autotune.engines._sim_landscape`): the held-out check that nothing is tuned to ``gb10`` or ``h200``.
Ground truth (:meth:`SimEngine.true_throughput`) is read only here, to score picks; the tuner never sees it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

# The benchmark's concepts live in sibling modules; this one is the command and the names it always offered.
from autotune.bench._truth import (PER_SEED_PROFILES, PROFILES, Profile, Truth, _space_and_truth, ground_truth,
    load_profile_space, make_engine)
from autotune.bench._strategies import (GRID_RESTARTS, MAX_ASKS_PER_RESTART, Pick, RANDOM2_RESTARTS, REPORTS_CI,
    STRATEGIES, STRATEGY_FUNCS, grid_points)
from autotune.bench._running import (BenchConfig, DEFAULT_BUDGETS, DEFAULT_SEEDS, HELD_OUT_SEEDS, Task, run_benchmark,
    run_one, summarize_runs, worker_pool)
from autotune.bench._results import (ABSOLUTE_PROFILES, COVERAGE_TARGET, DEFAULT_OUT, FALSE_WIN_TARGET,
    MLFLOW_EXPERIMENT, REGRET_TARGETS, RELATIVE_BUDGETS, RELATIVE_PROFILES, check_targets, log_to_mlflow, plot_regret,
    render_header, render_table, render_targets)
from autotune.core.exit_status import ExitStatus
from autotune.observers.mlflow import DEFAULT_TRACKING_URI

__all__ = [
    "BenchConfig",
    "PROFILES",
    "Pick",
    "Profile",
    "STRATEGIES",
    "Task",
    "Truth",
    "check_status",
    "check_targets",
    "configure_parser",
    "ground_truth",
    "grid_points",
    "log_to_mlflow",
    "plot_regret",
    "render_header",
    "render_table",
    "render_targets",
    "run",
    "run_benchmark",
    "run_one",
    "summarize_runs",
]


# -- command line ----------------------------------------------------------------------------------------


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
                         jobs=args.jobs, root=args.root, sampler=args.sampler)
    result = run_benchmark(config, progress=_progress_printer(sys.stderr))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out_dir / "bench.json", out_dir / "regret.png"
    json_path.write_text(json.dumps(result, indent=1, default=str))
    plot_regret(result, png_path)
    lines = [render_header(result), f"  JSON: {json_path}  plot: {png_path}"]
    if not args.no_mlflow:
        from autotune.observers.mlflow import resolve_tracking_uri

        uri = resolve_tracking_uri(args.tracking_uri)
        run_id = log_to_mlflow(result, [json_path, png_path], uri)
        lines.append(f"  MLflow: experiment {MLFLOW_EXPERIMENT}, run {run_id} ({uri})")
    lines += ["", "Targets:", render_targets(result), "", render_table(result)]
    print("\n".join(lines), file=out)
    return check_status(result, args.check, sys.stderr)


def check_status(result: Mapping[str, Any], check: bool, err: IO[str]) -> ExitStatus:
    """``--check``: ERROR (1) with the missed targets listed on ``err`` when any is missed, else SUCCESS."""
    missed = [c for c in result["targets"] if not c["ok"]]
    if not check or not missed:
        return ExitStatus.SUCCESS
    print(f"autotune bench --check: {len(missed)} of {len(result['targets'])} targets missed:", file=err)
    for c in missed:
        print(f"  MISS  {c['target']}", file=err)
    return ExitStatus.ERROR

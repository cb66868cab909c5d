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

* ``autotune`` - :func:`autotune.study.run_study` with its defaults and ``budget_restarts``.
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

from collections.abc import Mapping
from typing import IO, Any

# The benchmark's concepts live in sibling modules; this one offers the names it always did, and --check's verdict.
# Its command line is autotune.cli.bench.
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

__all__ = [
    "BenchConfig",
    "DEFAULT_BUDGETS",
    "DEFAULT_OUT",
    "DEFAULT_SEEDS",
    "HELD_OUT_SEEDS",
    "MLFLOW_EXPERIMENT",
    "PROFILES",
    "Pick",
    "Profile",
    "STRATEGIES",
    "Task",
    "Truth",
    "check_status",
    "check_targets",
    "ground_truth",
    "grid_points",
    "log_to_mlflow",
    "plot_regret",
    "render_header",
    "render_table",
    "render_targets",
    "run_benchmark",
    "run_one",
    "summarize_runs",
]


# -- the verdict of --check ------------------------------------------------------------------------------


def check_status(result: Mapping[str, Any], check: bool, err: IO[str]) -> ExitStatus:
    """``--check``: ERROR (1) with the missed targets listed on ``err`` when any is missed, else SUCCESS."""
    missed = [c for c in result["targets"] if not c["ok"]]
    if not check or not missed:
        return ExitStatus.SUCCESS
    print(f"autotune bench --check: {len(missed)} of {len(result['targets'])} targets missed:", file=err)
    for c in missed:
        print(f"  MISS  {c['target']}", file=err)
    return ExitStatus.ERROR

"""Benchmarks of the tuner on the simulator's ground truth: strategies, interval coverage, worker scaling.

The strategy benchmark (:mod:`._bench`) is run by ``autotune bench``, which reaches it through the names below; the
other benchmarks are public modules of their own (``coverage``, ``scaling``, ``recheck``, ``warmstart``, ...).
"""

from autotune.bench._args import count
from autotune.bench._bench import (
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

__all__ = [
    "DEFAULT_BUDGETS",
    "DEFAULT_OUT",
    "DEFAULT_SEEDS",
    "HELD_OUT_SEEDS",
    "MLFLOW_EXPERIMENT",
    "PROFILES",
    "STRATEGIES",
    "BenchConfig",
    "check_status",
    "count",
    "log_to_mlflow",
    "plot_regret",
    "render_header",
    "render_table",
    "render_targets",
    "run_benchmark",
]

"""Numbers from restarts: intervals and comparisons, latency against limits, the cold-start test. Pure functions."""

from types import ModuleType

__all__ = ["scipy_optimize", "scipy_stats"]


def scipy_stats() -> ModuleType:
    """``scipy.stats``, imported on first use. Importing it costs ~1.7 s of CPU (on CI's kind of machine: 2.6 s of the
    CLI's whole import), which every ``autotune`` process would pay at its start: a ``report``, an ``export``, a
    worker stopped before its first decision. The distributions and tests are scipy's all the same."""
    from scipy import stats

    return stats


def scipy_optimize() -> ModuleType:
    """``scipy.optimize``, imported on first use (~0.4 s of CPU beyond numpy; only the sequential design needs it)."""
    from scipy import optimize

    return optimize

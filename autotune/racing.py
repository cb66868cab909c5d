"""Racing: spend restarts where they matter.

A trial starts with a few restarts. After each one it is compared with the incumbent (the best completed
trial) on matched restart seeds: it stops early (Optuna prunes it) once its interval lies wholly below the
incumbent's, gets another restart while the two intervals overlap, and completes otherwise. The pruning
decision goes through Optuna's pruner interface, one intermediate value per restart, so it shows in Optuna's
own records and plots.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.measure import interval

__all__ = ["Decision", "RacingPolicy", "RacingPruner", "incumbent_values"]


class Decision:
    """What to do with a trial after its latest restart."""

    MORE = "more"
    COMPLETE = "complete"
    PRUNE = "prune"


@dataclasses.dataclass(frozen=True)
class RacingPolicy:
    """How many restarts a trial gets.

    Attributes:
        min_restarts: Restarts every trial gets before any decision.
        max_restarts: Cap per trial. With ``racing=False`` every trial gets exactly ``min_restarts``.
        confidence: Interval coverage used for the overlap test.
        racing: Adaptive restarts and early stops on (default) or off.
    """

    min_restarts: int = 2
    max_restarts: int = 6
    confidence: float = 0.95
    racing: bool = True

    def decide(self, values: Sequence[float], incumbent: Sequence[float] | None) -> str:
        """Decide after a restart, given this trial's values and the incumbent's on the same seeds."""
        n = len(values)
        if n < self.min_restarts:
            return Decision.MORE
        if not self.racing or not incumbent or len(incumbent) < 2:
            return Decision.COMPLETE
        low, high = interval(values, self.confidence)
        inc_low, inc_high = interval(incumbent, self.confidence)
        if high < inc_low:
            return Decision.PRUNE
        if low > inc_high or n >= self.max_restarts:
            return Decision.COMPLETE
        return Decision.MORE


def incumbent_values(study: optuna.Study, exclude_number: int, n: int | None = None) -> list[float] | None:
    """Per-restart values of the best completed trial (other than ``exclude_number``), in restart order.

    Args:
        study: The study.
        exclude_number: The challenger's own trial number.
        n: Keep the first ``n`` restarts only, i.e. the challenger's matched seeds (all when ``None``).
    """
    best: FrozenTrial | None = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.number == exclude_number or t.value is None or not t.intermediate_values:
            continue
        if best is None or t.value > best.value:  # type: ignore[operator]
            best = t
    if best is None:
        return None
    values = [best.intermediate_values[s] for s in sorted(best.intermediate_values)]
    values = [v for v in values if not math.isnan(v)]
    if n is not None and len(values) > n:
        values = values[: max(n, 2)]
    return values


class RacingPruner(optuna.pruners.BasePruner):
    """Optuna pruner for racing: prune a trial whose interval lies below the incumbent's.

    Intermediate values are per-restart throughputs (step = restart index, which fixes the seed), so the
    comparison is on matched restarts.
    """

    def __init__(self, policy: RacingPolicy) -> None:
        self.policy = policy

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        values = [trial.intermediate_values[s] for s in sorted(trial.intermediate_values)]
        incumbent = incumbent_values(study, trial.number, n=len(values))
        return self.policy.decide(values, incumbent) == Decision.PRUNE

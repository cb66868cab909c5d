"""Racing: spend restarts where they matter.

A trial starts with a few restarts. After each one it is compared with the incumbent (the best completed
trial) on matched restart seeds: it stops early (Optuna prunes it) once its interval lies wholly below the
incumbent's, gets another restart while the two intervals overlap and its mean is ahead of the incumbent's, and
completes otherwise. The pruning decision goes through Optuna's pruner interface, one intermediate value per
restart, so it shows in Optuna's own records and plots.

The intervals use the study's pooled restart-to-restart noise. Restart noise is multiplicative and about the
same for every configuration of one engine on one machine, so every trial's restarts estimate it; pooled on the
log scale over the whole study it has dozens of degrees of freedom after a few trials. A trial's own two
restarts have one: Student's t for one degree of freedom is 12.7, which makes a two-restart interval span
about +-9 standard deviations, so nothing could ever be decided at two restarts. With the noise known, a
hopeless trial can be pruned after its first restart. Racing only steers the search; the verdict the user gets
comes from verification, which uses each configuration's own restarts.

One counted restart enters the race (issue 9: at 30 engine starts, two counted restarts per configuration plus
a cold start left room for 7 configurations where random search with two restarts each measured 15). More
restarts go only to a configuration that could still be the best: ahead of the incumbent on matched seeds and
not yet shown better at the racing confidence. With the pooled noise known the test is on the difference itself
(the log ratio of geometric means, Student's t on the pooled degrees of freedom), which is sharper than asking
two separate intervals not to overlap. Until the study knows its noise (no configuration has two restarts) the
first trial, the baseline, gets a second restart to start the estimate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.stats import scipy_stats
from autotune.stats.intervals import interval

__all__ = [
    "Decision",
    "Noise",
    "RacingPolicy",
    "RacingPruner",
    "decide_trial",
    "incumbent_values",
    "pooled_noise",
]


class Decision:
    """What to do with a trial after its latest restart."""

    MORE = "more"
    COMPLETE = "complete"
    PRUNE = "prune"


@dataclasses.dataclass(frozen=True)
class Noise:
    """Restart-to-restart noise pooled over a study, on the log scale (a relative sd).

    Attributes:
        sd: Pooled standard deviation of log throughput within a configuration.
        df: Its degrees of freedom: restarts minus configurations, over every configuration pooled.
    """

    sd: float
    df: int

    def interval(self, values: Sequence[float], confidence: float) -> tuple[float, float]:
        """Interval for the (geometric) mean of ``values`` with this noise: ``exp(mean log +- t * sd / sqrt(n))``."""
        logs = np.log(np.asarray(values, dtype=float))
        half = float(scipy_stats().t.ppf(0.5 + confidence / 2.0, self.df)) * self.sd / math.sqrt(logs.size)
        centre = float(logs.mean())
        return math.exp(centre - half), math.exp(centre + half)


@dataclasses.dataclass(frozen=True)
class RacingPolicy:
    """How many restarts a trial gets.

    Attributes:
        min_restarts: Restarts every trial gets before any decision.
        max_restarts: Cap per trial. With ``racing=False`` every trial gets exactly ``min_restarts``.
        confidence: Interval coverage used for the overlap test.
        racing: Adaptive restarts and early stops on (default) or off.
        pooled: Use the study's pooled noise for the intervals (default); off, each trial's own restarts.
        only_ahead: Add restarts only to a challenger whose mean is ahead of the incumbent's on the same seeds
            (default); off, to every challenger whose interval overlaps the incumbent's.
    """

    min_restarts: int = 1
    max_restarts: int = 6
    confidence: float = 0.95
    racing: bool = True
    pooled: bool = True
    only_ahead: bool = True

    def interval(self, values: Sequence[float], noise: Noise | None) -> tuple[float, float]:
        """The interval racing uses for ``values``: pooled noise when known, else their own spread."""
        if noise is not None and self.pooled and all(v > 0 for v in values):
            return noise.interval(values, self.confidence)
        return interval(values, self.confidence)

    def decide(self, values: Sequence[float], incumbent: Sequence[float] | None, noise: Noise | None = None,
               incumbent_restarts: int | None = None) -> str:
        """Decide after a restart, given this trial's values and the incumbent's on the same seeds.

        Args:
            values: This trial's counted restarts, in restart order.
            incumbent: The incumbent's restarts on the same seeds (``None`` if there is no incumbent yet).
            noise: The study's pooled noise (``None``: each side's own spread, as in :func:`measure.interval`).
            incumbent_restarts: How many counted restarts the incumbent has in all (``None``: no such cap). A
                challenger that has run every one of the incumbent's seeds and is still ahead completes: it is the
                new incumbent, and racing has no matched seed left to compare on.
        """
        n = len(values)
        if self.racing and self.pooled and noise is None and n < 2 <= self.max_restarts:
            # Nothing in the study has two restarts yet, so its noise is unknown and racing could decide nothing
            # at one restart: this trial (the first, a baseline) gets a second restart to start the estimate.
            return Decision.MORE
        comparable = (self.racing and incumbent is not None and len(incumbent) > 0
                      and (noise is not None or (n >= 2 and len(incumbent) >= 2)))
        if not comparable:
            return Decision.MORE if n < self.min_restarts else Decision.COMPLETE
        assert incumbent is not None
        if noise is not None and self.pooled and min(values) > 0 and min(incumbent) > 0:
            diff = float(np.mean(np.log(values)) - np.mean(np.log(incumbent)))
            half = (float(scipy_stats().t.ppf(0.5 + self.confidence / 2.0, noise.df)) * noise.sd
                    * math.sqrt(1.0 / n + 1.0 / len(incumbent)))
            worse, better = diff + half < 0.0, diff - half > 0.0
        else:
            low, high = self.interval(values, noise)
            inc_low, inc_high = self.interval(incumbent, noise)
            worse, better = high < inc_low, low > inc_high
        if worse:
            return Decision.PRUNE  # from the first restart on, once the study's noise says it is hopeless
        if n < self.min_restarts:
            return Decision.MORE
        if better or n >= self.max_restarts:
            return Decision.COMPLETE
        if incumbent_restarts is not None and n >= max(incumbent_restarts, self.min_restarts):
            # Past the incumbent's seeds a challenger would race a fixed mean: a near-tie stays "ahead, not shown
            # better" by chance for several restarts (9 of 137 search trials ran to the cap on gb10 at 30 starts,
            # 63 of 330 search starts). SMAC's intensifier stops a challenger there too; it becomes the incumbent
            # by its mean, and verification, not the search, settles near-ties.
            return Decision.COMPLETE
        if self.only_ahead and np.mean(values) <= np.mean(incumbent):
            # Behind on the same seeds: more restarts could at best prove a tie or a loss, which the search
            # learns as well from this mean. Restarts go to challengers that may be the new best.
            return Decision.COMPLETE
        return Decision.MORE


def _values(trial: FrozenTrial) -> list[float]:
    values = [trial.intermediate_values[s] for s in sorted(trial.intermediate_values)]
    return [v for v in values if not math.isnan(v)]


def incumbent_values(study: optuna.Study, exclude_number: int, n: int | None = None) -> list[float] | None:
    """Per-restart values of the best completed trial (other than ``exclude_number``), in restart order.

    Under latency limits only a trial that met them (Optuna's recorded constraints) can be the incumbent: a fast
    configuration that misses an SLO must not race out slower ones that meet it.

    Args:
        study: The study.
        exclude_number: The challenger's own trial number.
        n: Keep the first ``n`` restarts only, i.e. the challenger's matched seeds (all when ``None``).
    """
    best: FrozenTrial | None = None
    best_value = 0.0  # read only once best is set
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.number == exclude_number or t.value is None or not t.intermediate_values:
            continue
        if any(v > 0.0 for v in t.constraints.values()):
            continue
        if best is None or t.value > best_value:
            best, best_value = t, t.value
    if best is None:
        return None
    values = _values(best)
    if n is not None:
        values = values[: max(n, 1)]
    return values


def pooled_noise(study: optuna.Study, exclude_number: int, current: Sequence[float] = ()) -> Noise | None:
    """The study's restart noise: within-configuration spread of log throughput, pooled over every trial.

    Args:
        study: The study; finished trials with two or more restarts contribute.
        exclude_number: The trial being decided (its restarts are passed as ``current`` instead).
        current: That trial's restarts so far.

    Returns:
        ``None`` until some configuration has two restarts.
    """
    groups = [_values(t) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
              if t.number != exclude_number]  # a repeat of a trial reports no restarts of its own: no values
    groups.append(list(current))
    squares, df = 0.0, 0
    for g in groups:
        if len(g) < 2 or min(g) <= 0:
            continue
        logs = np.log(np.asarray(g, dtype=float))
        squares += float(((logs - logs.mean()) ** 2).sum())
        df += logs.size - 1
    if df == 0:
        return None
    return Noise(math.sqrt(squares / df), df)


def decide_trial(study: optuna.Study, number: int, values: Sequence[float], policy: RacingPolicy) -> str:
    """The racing decision for trial ``number`` after its latest restart (``values``, in restart order)."""
    incumbent = incumbent_values(study, number)
    noise = pooled_noise(study, number, values) if policy.pooled else None
    matched = None if incumbent is None else incumbent[: max(len(values), 1)]
    return policy.decide(values, matched, noise, incumbent_restarts=None if incumbent is None else len(incumbent))


class RacingPruner(optuna.pruners.BasePruner):
    """Optuna pruner for racing: prune a trial whose interval lies below the incumbent's.

    Intermediate values are per-restart throughputs (step = restart index, which fixes the seed), so the
    comparison is on matched restarts.
    """

    def __init__(self, policy: RacingPolicy) -> None:
        self.policy = policy

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return decide_trial(study, trial.number, _values(trial), self.policy) == Decision.PRUNE

"""The two levels of a benchmark's noise: timed passes inside one restart, and restarts of one configuration.

Kalibera & Jones ("Rigorous benchmarking in reasonable time", ISMM 2013) split the variance of a measurement taken
as ``n`` passes in each of several executions into a within-execution part, which more passes average away, and a
between-execution part, which only more executions do: a restart's mean varies as ``between + within / n``. The
restart count and the passes per restart are then sized from the two parts and from what a pass and a restart cost
(:mod:`autotune.decisions.window`).

All in log throughput, so ``0.01`` is about a 10% CV. The passes of one restart are taken as independent; adjacent
passes of a real engine correlate a little (issue 41: r = 0.64 between 1.3-s rounds, ~0 beyond 20 s), so for passes
of several seconds ``within`` underestimates one pass's variance a little, which flatters short windows: the sizing
asks for a material gain before it moves (:data:`autotune.decisions.window.MIN_GAIN`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

__all__ = ["Components", "components"]


@dataclasses.dataclass(frozen=True)
class Components:
    """Estimated variance components of log throughput.

    Attributes:
        within: Variance of one timed pass about its restart's mean.
        within_df: Its degrees of freedom (passes less one, summed over restarts).
        between: Variance of restart means about their configuration's mean beyond what their passes explain
            (never below 0: Kalibera & Jones' ``T2 - T1 / n``, floored).
        between_df: Its degrees of freedom (restarts less one, summed over configurations); 0 when no
            configuration has two restarts, and ``between`` is then 0 and unknown.
        passes: The mean number of timed passes per restart behind the estimates.
    """

    within: float
    within_df: int
    between: float
    between_df: int
    passes: float

    def restart_var(self, passes: int) -> float:
        """The variance of a restart's mean of ``passes`` timed passes."""
        return self.between + self.within / max(1, passes)


def components(groups: Sequence[Sequence[Sequence[float]]]) -> Components | None:
    """Within- and between-restart variance from ``groups``: per configuration, its restarts, each the throughput of
    its timed passes. Passes that are not positive are left out; a restart with one pass adds to ``between`` only.
    ``None`` when no restart has two passes (nothing separates the two levels)."""
    ss_within, df_within = 0.0, 0
    ss_between, df_between = 0.0, 0
    passes: list[int] = []
    for restarts in groups:
        means = []
        for values in restarts:
            logs = [math.log(v) for v in values if v and v > 0 and math.isfinite(v)]
            if not logs:
                continue
            mean = sum(logs) / len(logs)
            ss_within += sum((x - mean) ** 2 for x in logs)
            df_within += len(logs) - 1
            passes.append(len(logs))
            means.append(mean)
        if len(means) >= 2:
            centre = sum(means) / len(means)
            ss_between += sum((m - centre) ** 2 for m in means)
            df_between += len(means) - 1
    if df_within == 0:
        return None
    within = ss_within / df_within
    # The harmonic mean of the passes: what the variance of a restart's mean divides ``within`` by on average.
    n = len(passes) / sum(1.0 / p for p in passes)
    between = max(0.0, ss_between / df_between - within / n) if df_between else 0.0
    return Components(within, df_within, between, df_between, sum(passes) / len(passes))

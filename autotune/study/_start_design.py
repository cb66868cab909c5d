"""Where the search looks before its model has anything to go on, and after it starts repeating itself.

The start design spreads the first trials over every dimension (:func:`_queue_spread`); after a repeated
suggestion an unmeasured configuration is queued (:func:`_queue_unmeasured`). Both draw from Optuna's
``RandomSampler`` over the same define-by-run space, seeded, so a resume draws the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import optuna

from autotune.config.space import Infeasible
from autotune.core.params import ParamValue, TrialParams
from autotune.core.records import EngineConfig
from autotune.study.events import StudyContext

__all__ = ["EXPLORE_DRAWS", "START_DESIGN_TRIALS"]

#: Random draws tried for an unmeasured configuration after a repeated suggestion (:func:`_queue_unmeasured`).
EXPLORE_DRAWS = 50


def _queue_unmeasured(ctx: StudyContext, number: int) -> None:
    """After a repeated suggestion, queue a configuration drawn uniformly from those not measured yet.

    A sampler that repeats a measured configuration has stopped exploring (TPE does once one region dominates its
    model). The repeat is answered from the record and starts nothing; the trial after it explores instead, so the
    budget keeps buying information rather than ending the study with starts unspent. The draw is Optuna's
    ``RandomSampler`` over the same define-by-run space, seeded by the study's seed and the repeat's number; when
    :data:`EXPLORE_DRAWS` draws all hit measured or infeasible configurations nothing is queued, and the search
    ends on repeats as before (:data:`MAX_IDLE_SUGGESTIONS`).
    """
    measured = ctx.ledger.measured_keys()
    for params, config in _random_draws(ctx, number):
        if config.key() not in measured:
            ctx.study.enqueue_trial(params, skip_if_exists=True)
            return


def _random_draws(ctx: StudyContext, number: int) -> Iterator[tuple[TrialParams, EngineConfig]]:
    """The feasible ones of :data:`EXPLORE_DRAWS` draws of Optuna's ``RandomSampler`` over the space, as
    ``(params, config)``; seeded by the study's seed and ``number``, so a resume draws the same."""
    draws = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=ctx.options.search_seed(number)))
    for _ in range(EXPLORE_DRAWS):
        draw = draws.ask()
        try:
            config = ctx.space.suggest(draw)
        except Infeasible:
            continue
        yield draw.params, config


#: Search trials (baselines included) whose configurations come from the spread-out start design
#: (:func:`_queue_spread`): TPE's own ``n_startup_trials``, so the design replaces its independent random draws
#: (with ``--sampler gp`` too, whose model then starts from the same ten points).
START_DESIGN_TRIALS = 10


_ABSENT = object()


def _param_distance(a: Mapping[str, ParamValue], b: Mapping[str, ParamValue]) -> int:
    """How many parameters two points of the define-by-run space differ in; one only one side has (the draft of a
    configuration with speculation on) counts. Numbers count as categories: a distance over their range would push
    the design to the ends of each range (K = 0 and the largest K)."""
    return sum(a.get(name, _ABSENT) != b.get(name, _ABSENT) for name in set(a) | set(b))


def _queue_spread(ctx: StudyContext, number: int) -> None:
    """Queue the start design's next configuration: of :data:`EXPLORE_DRAWS` random draws, the one farthest (its
    nearest neighbour farthest, :func:`_param_distance`) from every configuration the study has tried.

    Independent random draws cluster by chance; with the 10-20 configurations a small budget measures, a whole
    mode or draft can go unmeasured. A maximin choice among random candidates spreads the same number of draws
    over every dimension (a space-filling start, as BoTorch starts from Sobol points), for any landscape: it
    reads only the space and the trials' parameters.
    """
    trials = [t for t in ctx.study.get_trials(deepcopy=False) if t.params]
    if not trials:
        return
    best, best_distance = None, 0
    for params, _ in _random_draws(ctx, number):
        nearest = min(_param_distance(params, t.params) for t in trials)
        if nearest > best_distance:  # ties keep the earlier draw: the choice among equals stays random
            best, best_distance = params, nearest
    if best is not None:
        ctx.study.enqueue_trial(best, skip_if_exists=True)

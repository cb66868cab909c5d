"""The search strategies the tuner is compared with, each given the same engine-start budget: what each hands its
user (:class:`Pick`)."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.config.space import DEFAULT, Infeasible, SearchSpace
from autotune.core.records import EngineConfig
from autotune.engines.sim import SimEngine


STRATEGIES = ("autotune", "random", "random-2", "grid", "naive-tpe")
#: Strategies whose user is handed a 95% interval for the winner's throughput and a verdict with a speedup interval.
REPORTS_CI = ("autotune", "random")
#: Restarts per configuration of ``random-2`` (random search, best mean wins).
RANDOM2_RESTARTS = 2
#: Restarts a grid user runs per point (``vllm bench sweep``'s default number of runs).
GRID_RESTARTS = 3
#: Stop asking the naive loop for trials after this many suggestions per budgeted restart (all infeasible).
MAX_ASKS_PER_RESTART = 5


@dataclasses.dataclass(frozen=True)
class Pick:
    """What a strategy hands its user.

    Attributes:
        config: The recommended configuration (``None`` if the strategy found nothing that runs).
        measured: The strategy's own estimate of its throughput.
        ci: The reported 95% interval of that throughput, ``None`` when the strategy reports none.
        claims_faster: Whether the user is told the pick beats the baseline.
        restarts_used: Engine starts spent, cold first starts included.
        minutes_used: Simulated engine wall minutes spent.
        trials: Configurations tried (search trials, grid points).
        started: Keys of the configurations that got at least one engine start (in the search or verification).
        speedup_ci: The verdict's interval of the pick's speedup over the baseline, ``None`` when none is shown
            (strategies without a verdict, or the baseline won).
    """

    config: EngineConfig | None
    measured: float | None
    ci: tuple[float, float] | None
    claims_faster: bool
    restarts_used: int
    minutes_used: float
    trials: int
    started: frozenset[str] = frozenset()
    speedup_ci: tuple[float, float] | None = None

    @property
    def distinct(self) -> int:
        """Distinct configurations that got at least one engine start."""
        return len(self.started)


# -- strategies ------------------------------------------------------------------------------------------


def _restart_seed(seed: int, restart: int) -> int:
    """Seed of restart ``restart`` for benchmark seed ``seed``.

    The study's own scheme (:meth:`StudyOptions.search_seed`), so every strategy meets the same simulated machine.
    """
    from autotune.study import StudyOptions

    return StudyOptions(study_name="bench", seed=seed).search_seed(restart)


def _study_strategy(sampler: str, planned: bool = True) -> Callable[[SearchSpace, SimEngine, int, int], Pick]:
    """A strategy that runs the whole study with ``sampler``: autotune (``tpe``) or its random control; its
    verification planned from the noise (``autotune tune``'s default) or fixed at three restarts a side."""

    def run_strategy(space: SearchSpace, engine: SimEngine, budget: int, seed: int) -> Pick:
        return _run_autotune(space, engine, budget, seed, sampler, planned)

    return run_strategy


def _run_autotune(space: SearchSpace, engine: SimEngine, budget: int, seed: int, sampler: str,
                  planned: bool = True) -> Pick:
    """A whole study (search, racing, verification) with the tuner's defaults and a restart budget."""
    from autotune.report import build_report
    from autotune.study import StudyOptions, run_study

    with tempfile.TemporaryDirectory(prefix="autotune-bench-") as workdir:
        # The budget is the binding limit, so the trial cap must not be: no trial costs less than one start.
        options = StudyOptions(study_name=f"bench-{sampler}-{seed}", storage="memory", workdir=workdir,
                               trials=budget, budget_restarts=budget, sampler=sampler, seed=seed,
                               verify_planned=planned)
        report = build_report(run_study(space, engine, options))
    counts = report.trials
    trials = counts.complete + counts.screened + counts.pruned + counts.fail
    # Configurations that got an engine start, in the search or in verification.
    started = {t.record.config.key() for t in report.search_trials if t.record.restarts}
    if report.verification is not None:
        started |= {e.config.key() for e in report.verification.entries if e.restarts or e.values}
    winner = report.winner
    used, minutes = report.budget.restarts_used, float(report.budget.minutes_used)
    if winner is None:  # no verification (budget too small for it): the user is handed nothing
        return Pick(None, None, None, False, used, minutes, trials, frozenset(started))
    ci = None
    if winner.ci_low is not None and winner.ci_high is not None:
        ci = (float(winner.ci_low), float(winner.ci_high))
    speedup_ci = None
    speedup = winner.speedup
    if speedup is not None and speedup.ci_low is not None and speedup.ci_high is not None:  # has_interval
        speedup_ci = (float(speedup.ci_low), float(speedup.ci_high))
    return Pick(winner.config, winner.mean, ci, report.verdict == "faster", used, minutes, trials, frozenset(started),
                speedup_ci)


def grid_points(space: SearchSpace) -> list[dict[str, Any]]:
    """A sweep user's coarse grid: every mode, the engine's default capture sizes, every other K, every draft."""
    ks = set(range(space.k_low, space.k_high + 1, 2))
    return [p for p in space.all_params()
            if p.get("capture_sizes", DEFAULT) == DEFAULT and p["num_speculative_tokens"] in ks]


def _grid_subset(space: SearchSpace, budget: int, seed: int) -> list[dict[str, Any]]:
    """The points a budget affords: the baseline, then a seeded random subset of the rest of the grid."""
    base = space.baseline().key()
    others = [p for p in grid_points(space) if space.config_from_params(p).key() != base]
    random.Random(seed).shuffle(others)
    n = max(1, budget // GRID_RESTARTS)
    return [space.baseline_params()[0], *others[: n - 1]]


def _run_grid(space: SearchSpace, engine: SimEngine, budget: int, seed: int) -> Pick:
    """Three restarts per grid point on the same seeds, best mean wins, no verification."""
    return _sweep(space, engine, _grid_subset(space, budget, seed), GRID_RESTARTS, seed)


def _sweep(space: SearchSpace, engine: SimEngine, points: Iterable[Mapping[str, Any]], restarts: int, seed: int,
           budget: int | None = None) -> Pick:
    """``restarts`` restarts of each point in turn on the same seeds (while ``budget`` affords all of a point's),
    best mean wins: what a user sweeping by hand does. A crash ends that point (the user moves on to the next)."""
    means: list[tuple[float, EngineConfig]] = []
    used, wall_s, started = 0, 0.0, set()
    for params in points:
        if budget is not None and used + restarts > budget:
            break
        config = space.config_from_params(dict(params))
        started.add(config.key())
        values = []
        for j in range(restarts):
            result = engine.run_restart(config, space.workload, restart=j, seed=_restart_seed(seed, j))
            used, wall_s = used + 1, wall_s + (result.wall_s or 0.0)
            if not result.ok:
                break
            values.append(result.measured())
        if len(values) == restarts:
            means.append((statistics.fmean(values), config))
    return _best_mean(space, means, used, wall_s, frozenset(started))


def _best_mean(space: SearchSpace, means: list[tuple[float, EngineConfig]], used: int, wall_s: float,
               started: frozenset[str]) -> Pick:
    """A sweep user's pick: the best mean; "faster" when it is not the baseline and beats the baseline's mean."""
    if not means:
        return Pick(None, None, None, False, used, wall_s / 60.0, 0, started)
    best_mean, best = max(means, key=lambda m: m[0])
    base_key = space.baseline().key()
    base_mean = next((m for m, c in means if c.key() == base_key), math.nan)
    claims = best.key() != base_key and best_mean > base_mean
    return Pick(best, best_mean, None, claims, used, wall_s / 60.0, len(means), started)


def _run_random2(space: SearchSpace, engine: SimEngine, budget: int, seed: int) -> Pick:
    """Random search by hand: the baseline, then distinct random configurations, :data:`RANDOM2_RESTARTS` starts
    each while the budget affords them; best mean wins, no verification.

    A configuration's first start is cold and counts as its user saw it (they do not know about cold starts).
    Distinct configurations: a repeat would only spend the budget on something already measured.
    """
    base_key = space.baseline().key()
    others = [p for p in space.all_params() if space.config_from_params(p).key() != base_key]
    random.Random(seed).shuffle(others)
    return _sweep(space, engine, [space.baseline_params()[0], *others], RANDOM2_RESTARTS, seed, budget)


def _run_naive_tpe(space: SearchSpace, engine: SimEngine, budget: int, seed: int) -> Pick:
    """Optuna's default TPE, one restart per trial (duplicates run again), best observed value wins."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial(space.baseline_params()[0])
    observed: list[tuple[float, EngineConfig]] = []
    started: set[str] = set()
    used, wall_s, asks = 0, 0.0, 0
    while used < budget and asks < MAX_ASKS_PER_RESTART * budget:
        asks += 1
        trial = study.ask()
        try:
            config = space.suggest(trial)
        except Infeasible:
            study.tell(trial, state=TrialState.PRUNED)
            continue
        # One run per configuration with the benchmark's fixed seed, as a user of `vllm bench` would do.
        result = engine.run_restart(config, space.workload, restart=0, seed=_restart_seed(seed, 0))
        used, wall_s = used + 1, wall_s + (result.wall_s or 0.0)
        if not result.ok:
            started.add(config.key())
            study.tell(trial, state=TrialState.FAIL)
            continue
        study.tell(trial, result.measured())
        observed.append((result.measured(), config))
        started.add(config.key())
    if not observed:
        return Pick(None, None, None, False, used, wall_s / 60.0, 0, frozenset(started))
    best_value, best = max(observed, key=lambda o: o[0])
    base_key = space.baseline().key()
    base_values = [v for v, c in observed if c.key() == base_key]
    claims = best.key() != base_key and bool(base_values) and best_value > statistics.fmean(base_values)
    return Pick(best, best_value, None, claims, used, wall_s / 60.0, len(observed), frozenset(started))


STRATEGY_FUNCS: dict[str, Callable[[SearchSpace, SimEngine, int, int], Pick]] = {
    "autotune": _study_strategy("tpe"),
    "random": _study_strategy("random"),
    "random-2": _run_random2,
    "grid": _run_grid,
    "naive-tpe": _run_naive_tpe,
}

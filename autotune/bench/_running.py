"""One strategy run scored against ground truth, many of them in a worker pool, and their summary per cell."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import signal
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from autotune.bench._results import _percentile, check_targets
from autotune.bench._strategies import REPORTS_CI, STRATEGIES, STRATEGY_FUNCS, _study_strategy
from autotune.bench._truth import PER_SEED_PROFILES, PROFILES, _space_and_truth, make_engine
from autotune.engines.process import TERMINATING_SIGNALS


DEFAULT_BUDGETS = (20, 30, 60, 120)
DEFAULT_SEEDS = 20
#: ``--check`` runs these seeds (first, count) unless told otherwise: no default was chosen on them.
HELD_OUT_SEEDS = (100, 100)


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """What one benchmark run covers.

    Attributes:
        profiles: Profile names (keys of :data:`PROFILES`).
        strategies: Strategy names (from :data:`STRATEGIES`).
        budgets: Engine starts per strategy run.
        seeds: Number of seeds; each seed is one independent run of every strategy.
        first_seed: The first seed (``first_seed .. first_seed + seeds - 1``), for held-out checks.
        jobs: Worker processes.
        root: Directory the profiles' space files are relative to.
        sampler: The sampler of the ``autotune`` strategy (``tpe``, its default, or ``gp``).
        verify: The studies' verification: ``planned`` from the search's noise (what ``autotune tune`` does), or
            ``fixed`` (three restarts a side, as before the plan).
        drift: The simulator's machine: ``off`` (restarts independent, every landscape as before issue 41) or a
            drifting machine's preset (``h100``), its level's path drawn from the run's seed.
    """

    profiles: tuple[str, ...] = tuple(PROFILES)
    strategies: tuple[str, ...] = STRATEGIES
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    seeds: int = DEFAULT_SEEDS
    first_seed: int = 0
    jobs: int = 2
    root: str = "."
    sampler: str = "tpe"
    verify: str = "planned"
    drift: str = "off"

    def tasks(self) -> list[Task]:
        """Every (profile, strategy, budget, seed), the costliest first so the pool finishes together."""
        cost = {"naive-tpe": 3, "autotune": 2, "random": 1, "random-2": 0, "grid": 0}
        out = [Task(p, s, b, seed, self.sampler, self.verify, self.drift)
               for p in self.profiles for s in self.strategies for b in self.budgets
               for seed in range(self.first_seed, self.first_seed + self.seeds)]
        out.sort(key=lambda t: (-t.budget, -cost.get(t.strategy, 0)))
        return out


@dataclasses.dataclass(frozen=True)
class Task:
    """One strategy run: a profile, a strategy, a budget in engine starts and a seed."""

    profile: str
    strategy: str
    budget: int
    seed: int
    sampler: str = "tpe"  # the ``autotune`` strategy's sampler
    verify: str = "planned"  # the studies' verification: planned from the noise, or fixed
    drift: str = "off"  # the simulator's machine: off, or a drifting machine's preset


# -- one run, many runs ----------------------------------------------------------------------------------


def run_one(task: Task, root: str = ".") -> dict[str, Any]:
    """Run one strategy once and score its pick against ground truth. Returns a JSON-ready dict."""
    profile = PROFILES[task.profile]
    space, truth = _space_and_truth(profile, root, task.seed)
    started = time.perf_counter()
    if task.strategy in ("autotune", "random"):
        strategy = _study_strategy(task.sampler if task.strategy == "autotune" else "random", task.verify == "planned")
    else:
        strategy = STRATEGY_FUNCS[task.strategy]
    pick = strategy(space, make_engine(profile, task.seed, task.drift), task.budget, task.seed)
    true_value = truth.of(pick.config)
    true_speedup = true_value / truth.baseline if truth.baseline else math.nan
    pick_is_baseline = pick.config is not None and pick.config.key() == space.baseline().key()
    covered = speedup_covered = None
    if task.strategy in REPORTS_CI:  # a missing interval is a miss: the user was promised one
        covered = pick.ci is not None and pick.ci[0] <= true_value <= pick.ci[1]
        # The verdict shows a speedup interval for a winner that is not the baseline (the baseline's is 1).
        if pick.config is not None and not pick_is_baseline:
            speedup_covered = pick.speedup_ci is not None and pick.speedup_ci[0] <= true_speedup <= pick.speedup_ci[1]
    return {
        **dataclasses.asdict(task),
        "pick": None if pick.config is None else pick.config.label(),
        "pick_key": None if pick.config is None else pick.config.key(),
        "pick_is_baseline": pick_is_baseline,
        "true": true_value,
        "measured": pick.measured,
        "regret": truth.regret(pick.config),
        "ci": None if pick.ci is None else list(pick.ci),
        "covered": covered,
        "speedup_ci": None if pick.speedup_ci is None else list(pick.speedup_ci),
        "speedup_covered": speedup_covered,
        "claims_faster": pick.claims_faster,
        "true_speedup": true_speedup,
        "restarts_used": pick.restarts_used,
        "minutes_used": round(pick.minutes_used, 3),
        "trials": pick.trials,
        "distinct": pick.distinct,
        # The best the strategy ever started, scored like a pick (1.0: nothing it started runs).
        "found": min((truth.regret_of_key(k) for k in pick.started), default=1.0),
        "wall_s": round(time.perf_counter() - started, 3),
    }


def _run_task(args: tuple[Task, str]) -> dict[str, Any]:
    return run_one(*args)


def summarize_runs(runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (profile, strategy, budget): regret quantiles, coverage, claim rate, budget spent."""
    cells: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for r in runs:
        cells.setdefault((r["profile"], r["strategy"], r["budget"]), []).append(r)
    rows = []
    for (profile, strategy, budget), rs in cells.items():
        regrets = [r["regret"] for r in rs]
        covered = [r["covered"] for r in rs if r["covered"] is not None]
        sp_covered = [r["speedup_covered"] for r in rs if r.get("speedup_covered") is not None]
        rows.append({
            "profile": profile, "strategy": strategy, "budget": budget, "n": len(rs),
            "median_regret": statistics.median(regrets),
            "mean_regret": statistics.fmean(regrets),
            "p90_regret": _percentile(regrets, 0.9),
            "coverage": statistics.fmean(covered) if covered else None,
            "speedup_coverage": statistics.fmean(sp_covered) if sp_covered else None,
            "speedup_intervals": len(sp_covered),
            "claim_rate": statistics.fmean(1.0 if r["claims_faster"] else 0.0 for r in rs),
            "baseline_pick_rate": statistics.fmean(1.0 if r["pick_is_baseline"] else 0.0 for r in rs),
            "mean_restarts_used": statistics.fmean(r["restarts_used"] for r in rs),
            "max_restarts_used": max(r["restarts_used"] for r in rs),
            "mean_trials": statistics.fmean(r["trials"] for r in rs),
            "mean_distinct": statistics.fmean(r.get("distinct", 0) for r in rs),
            "mean_found": statistics.fmean(r["found"] for r in rs),
        })
    order = {s: i for i, s in enumerate(STRATEGIES)}
    prof_order = {p: i for i, p in enumerate(PROFILES)}
    rows.sort(key=lambda r: (prof_order.get(r["profile"], 99), r["budget"], order.get(r["strategy"], 99)))
    return rows


def _quiet_worker() -> None:
    # A forked worker inherits the CLI's handlers (SIGTERM and SIGHUP take Ctrl-C's path, autotune.cli._main): a
    # worker the pool ends must simply go, not print the interrupted path's traceback.
    for signum in TERMINATING_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


@contextlib.contextmanager
def worker_pool(jobs: int) -> Iterator[Any]:
    """The pool the seeds run in: ``jobs`` processes that end quietly when it closes."""
    pool = multiprocessing.Pool(jobs, initializer=_quiet_worker)
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    # Closed, not terminated: each worker takes the end-of-work sentinel and exits. Pool.__exit__'s terminate() has
    # hung here, joining a worker it never ended that waited on the task queue's lock.
    pool.close()
    pool.join()


def run_benchmark(config: BenchConfig, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run every task of ``config`` (in a pool of ``config.jobs`` processes) and summarise.

    Returns:
        A JSON-ready dict: ``config``, ``truth`` per profile, every ``runs`` outcome, ``summary`` rows,
        ``targets`` checks and ``wall_s``.
    """
    started = time.perf_counter()
    tasks = config.tasks()
    work = [(t, config.root) for t in tasks]
    runs: list[dict[str, Any]] = []
    if config.jobs <= 1:
        for item in work:
            runs.append(_run_task(item))
            if progress is not None:
                progress(len(runs), len(tasks))
    else:
        with worker_pool(config.jobs) as pool:
            for outcome in pool.imap_unordered(_run_task, work, chunksize=1):
                runs.append(outcome)
                if progress is not None:
                    progress(len(runs), len(tasks))
    runs.sort(key=lambda r: (r["profile"], r["strategy"], r["budget"], r["seed"]))
    truth = {}
    seeds = range(config.first_seed, config.first_seed + config.seeds)
    for name in config.profiles:
        profile = PROFILES[name]
        info: dict[str, Any] = {"space_file": profile.space_file, "sim": dict(profile.sim),
                                "description": profile.description, "per_seed": name in PER_SEED_PROFILES}
        if name in PER_SEED_PROFILES:
            drawn = [_space_and_truth(profile, config.root, seed)[1] for seed in seeds]
            info.update({"n_configs": drawn[0].n_configs, "best": None, "best_label": "drawn per seed",
                         "baseline": None,
                         "baseline_over_best": statistics.fmean(t.baseline / t.best for t in drawn)})
        else:
            _, t = _space_and_truth(profile, config.root)
            info.update({"best": t.best, "best_label": t.best_label, "baseline": t.baseline,
                         "baseline_over_best": t.baseline / t.best, "n_configs": t.n_configs})
        truth[name] = info
    summary = summarize_runs(runs)
    return {
        "config": dataclasses.asdict(config),
        "truth": truth,
        "runs": runs,
        "summary": summary,
        "targets": check_targets(summary),
        "wall_s": round(time.perf_counter() - started, 1),
    }

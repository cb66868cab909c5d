"""``autotune bench-scaling``: 1, 2, 4 and 8 workers on one study at the same engine-start budget, on simulated time.

An engine start costs 30 s to minutes, so a study's wall time is its engine time, and the question for several
GPUs is how much of it runs in parallel and what that costs the search. Each run here is a whole study (search,
racing, verification) by N workers sharing one Optuna storage, run by the real worker code
(:func:`autotune.study.run_study`, one thread per worker). The simulator's start-up and measurement times are
the only thing that takes time: a :class:`SimClock` lets exactly one worker run at a time, always the one that
is earliest in simulated time, and a restart moves its worker's clock on by the restart's simulated wall time.
So the result is deterministic, takes seconds of real time, and measures scheduling (idle GPUs at the end of the
search, the verification rounds spread over the workers), not this machine's CPU. What it leaves out: the
storage's and the sampler's own time, which on a real study is milliseconds against minutes per engine start.

Scored per run: the study's wall time (the last worker's exit, in simulated hours), engine starts used, and the
simple regret of the verified winner on the simulator's ground truth (:mod:`autotune.bench._bench`). The summary gives
per worker count the median wall time, the median per-seed speedup over one worker, and the median regret.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import statistics
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from autotune.bench._truth import PROFILES, _space_and_truth, make_engine

__all__ = ["DEFAULT_BUDGET", "DEFAULT_SEEDS", "DEFAULT_WORKERS", "ScalingRun", "SimClock", "load_runs",
           "regret_worse_p", "render", "run_scaling", "summarize"]

DEFAULT_WORKERS = (1, 2, 4, 8)
DEFAULT_BUDGET = 120
DEFAULT_SEEDS = 10
#: Simulated seconds a worker waits between looks at the study while other workers hold what it needs.
POLL_S = 5.0
#: Regret at or below this counts as none: float noise in the ratio to the best, not a worse configuration.
REGRET_TOLERANCE = 1e-9


class SimClock:
    """Simulated time for threads: one runs at a time, the one earliest in simulated time (ties: lowest index).

    A thread :meth:`enter` s, runs instantly in simulated time, and lets time pass only through :meth:`sleep`
    (an engine restart, a poll); :meth:`leave` when it is done. Deterministic whatever the OS scheduler does.
    """

    def __init__(self, threads: int) -> None:
        self._cv = threading.Condition()
        self._expected = threads  # nobody runs before every thread entered: start order is not the OS's
        self._ids: dict[int, int] = {}
        self._now: dict[int, float] = {}
        self._queue: list[tuple[float, int]] = []
        self._running: int | None = None
        self._left = 0
        self.end = 0.0

    def _local(self) -> int:
        return threading.get_ident()

    def enter(self, index: int) -> None:
        with self._cv:
            self._ids[self._local()] = index
            self._now[index] = 0.0
            heapq.heappush(self._queue, (0.0, index))
            self._cv.notify_all()
            self._wait_turn(index)

    def sleep(self, seconds: float) -> None:
        with self._cv:
            index = self._ids[self._local()]
            wake = self._now[index] + max(0.0, float(seconds))
            self._running = None
            heapq.heappush(self._queue, (wake, index))
            self._cv.notify_all()
            self._wait_turn(index)

    def now(self) -> float:
        with self._cv:
            return self._now[self._ids[self._local()]]

    def leave(self) -> None:
        with self._cv:
            index = self._ids.pop(self._local())
            self.end = max(self.end, self._now.pop(index))
            self._left += 1
            self._running = None
            self._cv.notify_all()

    def _wait_turn(self, index: int) -> None:
        while not (self._running is None and len(self._now) + self._left >= self._expected and self._queue
                   and self._queue[0][1] == index):
            self._cv.wait()
        wake, _ = heapq.heappop(self._queue)
        self._now[index] = wake
        self._running = index


@dataclasses.dataclass(frozen=True)
class ScalingRun:
    """One study: ``workers`` workers, one seed, one budget; its simulated wall time and the winner's regret."""

    profile: str
    workers: int
    budget: int
    seed: int
    wall_h: float
    restarts_used: int
    regret: float
    verification_restarts: int
    winner: str | None
    #: Regret of each verified challenger: what the search handed verification (its best is the best the
    #: verification could have picked; the winner's regret beyond it is the verification's pick).
    candidate_regrets: tuple[float, ...] = ()

    @property
    def best_candidate_regret(self) -> float | None:
        return min(self.candidate_regrets) if self.candidate_regrets else None

    @property
    def picked_best_candidate(self) -> bool:
        best = self.best_candidate_regret
        return best is not None and self.regret <= best + REGRET_TOLERANCE


def run_one(profile_name: str, workers: int, budget: int, seed: int, root: str = ".", machines: int = 1) -> ScalingRun:
    """One whole study by ``workers`` simulated workers sharing an in-memory Optuna storage.

    ``machines``: the workers take turns over this many machines, each with its own compile cache (workdir), so
    a configuration's first start on each machine is cold.
    """
    import optuna

    from autotune.store.ledger import Ledger
    from autotune.report import build_report
    from autotune.study import StudyOptions, run_study
    from autotune.decisions.verification import BASELINE

    profile = PROFILES[profile_name]
    space, truth = _space_and_truth(profile, root)
    clock = SimClock(workers)
    storage = optuna.storages.InMemoryStorage()
    errors: list[BaseException] = []
    with tempfile.TemporaryDirectory(prefix="autotune-scaling-") as workdir:
        # One machine: the workers share the study's compile cache, as GPUs of one box share a disk.
        options = StudyOptions(study_name=f"scaling-{profile_name}-{workers}-{seed}", storage=storage,
                               workdir=workdir, trials=budget, budget_restarts=budget, seed=seed)

        def worker(index: int) -> None:
            engine = make_engine(profile)
            engine.time_scale, engine.sleep = 1.0, clock.sleep
            mine = options if machines <= 1 else dataclasses.replace(
                options, workdir=str(Path(workdir) / f"machine-{index % machines}"))
            clock.enter(index)
            try:
                run_study(space, engine, mine, worker=index, sleep=clock.sleep, poll_s=POLL_S)
            except BaseException as exc:  # noqa: BLE001 - reported after the other workers finished
                errors.append(exc)
            finally:
                clock.leave()

        threads = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}") for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        study = optuna.load_study(study_name=options.study_name, storage=storage)
        report = build_report(study)
        verification = Ledger(study).verification()
    config = None if report.winner is None else report.winner.config
    candidates = () if verification is None else tuple(
        truth.regret(e.candidate.config) for e in verification.entries if e.candidate.role != BASELINE)
    return ScalingRun(profile_name, workers, budget, seed, clock.end / 3600.0, report.budget.restarts_used,
                      truth.regret(config), report.budget.verification_restarts or 0,
                      None if config is None else config.label(), candidates)


def run_scaling(profile: str, workers: Sequence[int], budget: int, seeds: Sequence[int],
                root: str = ".", out: IO[str] | None = None) -> list[ScalingRun]:
    runs = []
    for seed in seeds:
        for n in workers:
            run = run_one(profile, n, budget, seed, root)
            runs.append(run)
            if out is not None:
                print(f"  {profile} seed {seed} workers {n}: {run.wall_h:.2f} h simulated, "
                      f"{run.restarts_used} starts, regret {run.regret:.1%}", file=out)
    return runs


def summarize(runs: Iterable[ScalingRun]) -> list[dict[str, Any]]:
    """Per worker count: median wall hours, median per-seed speedup over one worker, and the regret.

    Regret on a landscape whose best configurations are closer than verification can resolve is a coin flip
    per seed, so its median over a few seeds moves with one seed. Besides the median the row gives the mean,
    the seeds with any regret, and ``p_worse``: whether N workers' regret is worse than one worker's beyond
    seed noise, a one-sided Wilcoxon signed-rank test paired by seed (seeds where both picked equally good
    configurations carry no information and are dropped, Wilcoxon's own treatment of zero differences).
    It also splits the regret between the search and the verification: the mean regret of the best
    configuration the search handed verification, and in how many seeds verification picked that one.
    """
    runs = list(runs)
    one = {(r.profile, r.budget, r.seed): r for r in runs if r.workers == 1}
    rows = []
    for key in sorted({(r.profile, r.budget, r.workers) for r in runs}):
        cell = [r for r in runs if (r.profile, r.budget, r.workers) == key]
        paired = [(r, one[(r.profile, r.budget, r.seed)]) for r in cell if (r.profile, r.budget, r.seed) in one]
        speedups = [base.wall_h / r.wall_h for r, base in paired if r.wall_h > 0]
        rows.append({
            "profile": key[0], "budget": key[1], "workers": key[2], "seeds": len(cell),
            "median_wall_h": statistics.median(r.wall_h for r in cell),
            "median_speedup": statistics.median(speedups) if speedups else None,
            "min_speedup": min(speedups) if speedups else None,
            "median_regret": statistics.median(r.regret for r in cell),
            "mean_regret": statistics.fmean(r.regret for r in cell),
            "max_regret": max(r.regret for r in cell),
            "seeds_with_regret": sum(1 for r in cell if r.regret > REGRET_TOLERANCE),
            "mean_best_candidate_regret": statistics.fmean(b) if (b := [r.best_candidate_regret for r in cell
                                                                         if r.best_candidate_regret is not None])
            else None,
            "picked_best_candidate": sum(1 for r in cell if r.picked_best_candidate),
            "p_worse": None if key[2] == 1 else regret_worse_p([r.regret for r, _ in paired],
                                                             [base.regret for _, base in paired]),
            "max_restarts_used": max(r.restarts_used for r in cell),
        })
    return rows


def regret_worse_p(regrets: Sequence[float], baseline_regrets: Sequence[float]) -> float | None:
    """One-sided p-value that ``regrets`` are larger than ``baseline_regrets`` (paired): Wilcoxon signed-rank.

    1.0 when no pair differs (nothing suggests a difference); ``None`` with no pairs.
    """
    from scipy import stats

    diffs = [a - b for a, b in zip(regrets, baseline_regrets, strict=True)]
    if not diffs:
        return None
    if all(abs(d) <= REGRET_TOLERANCE for d in diffs):
        return 1.0
    return float(stats.wilcoxon(diffs, alternative="greater", zero_method="wilcox").pvalue)


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| profile | budget (starts) | workers | seeds | median wall (simulated h) | median speedup "
             "(min) | median regret (max) | mean regret | seeds with regret | regret worse than 1 worker: p "
             "| best candidate's regret (mean) | winner = best candidate | most starts used |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        speed = "-" if r["median_speedup"] is None else f"{r['median_speedup']:.2f}x ({r['min_speedup']:.2f}x)"
        p = "-" if r["p_worse"] is None else f"{r['p_worse']:.2f}"
        cand = "-" if r["mean_best_candidate_regret"] is None else f"{r['mean_best_candidate_regret']:.2%}"
        lines.append(f"| {r['profile']} | {r['budget']} | {r['workers']} | {r['seeds']} | {r['median_wall_h']:.2f} "
                     f"| {speed} | {r['median_regret']:.2%} ({r['max_regret']:.2%}) | {r['mean_regret']:.2%} "
                     f"| {r['seeds_with_regret']}/{r['seeds']} | {p} | {cand} | {r['picked_best_candidate']}/{r['seeds']} "
                     f"| {r['max_restarts_used']} |")
    return "\n".join(lines)


def load_runs(path: str) -> list[ScalingRun]:
    """The runs a ``--json`` file holds. Raises ``ValueError`` naming the file when it holds none."""
    try:
        data = json.loads(Path(path).read_text())
        return [ScalingRun(**{**r, "candidate_regrets": tuple(r.get("candidate_regrets") or ())})
                for r in data["runs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a file written by `autotune bench-scaling --json` ({exc}); "
                         "pass the files that option wrote") from None

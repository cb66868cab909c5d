"""``python -m autotune.bench.coverage``: do the printed intervals hold their stated level?

Draws restart samples with known truth and counts how often each interval covers it:

* **throughput**: :func:`autotune.stats.intervals.interval` for one configuration's mean, ``n`` restarts;
* **speedup**: :func:`autotune.stats.intervals.compare` for mean(challenger) / mean(baseline), at 95% and at the
  Bonferroni level of three challengers (98.33%), with equal and with unequal spread and restart counts;
* **verification**: the whole verification phase (three challengers and the baseline, extra rounds for near-ties,
  winner picked by its verified mean) on a simulated engine, run by the study's own loop
  (:func:`autotune.study.run_verification`: :class:`autotune.study._verification.VerificationLoop` with its rounds
  in memory): how often the winner's speedup interval covers its true speedup, and how often it says "faster"
  when nothing is.

Noise is lognormal or normal at a given coefficient of variation (CV), independent between restarts. The old
percentile bootstrap of the ratio of means (what the verdict used before) is kept here as a reference column:
it is the interval a coverage check has to be able to fail. Everything is seeded; the same command prints the
same table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

import numpy as np
from scipy import stats

from autotune.bench._args import BenchParser, count, seed_number
from autotune.stats.intervals import compare, interval
from autotune.core.records import EngineConfig, Resolved, RestartResult, Workload
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate
from autotune.study import run_verification

__all__ = [
    "NOISES",
    "draw_restarts",
    "main",
    "speedup_coverage",
    "throughput_coverage",
    "verification_coverage",
]

NOISES = ("lognormal", "normal")
SPEEDUP_METHODS = ("welch-log", "bootstrap")
THROUGHPUT_METHODS = ("log-t", "t")


def draw_restarts(rng: np.random.Generator, noise: str, cv: float, n: int, mean: float = 1000.0,
                  draws: int = 1) -> np.ndarray:
    """``draws x n`` restart throughputs with true mean ``mean`` and coefficient of variation ``cv``."""
    if noise == "lognormal":
        sd = math.sqrt(math.log1p(cv * cv))
        return np.exp(rng.normal(math.log(mean) - sd * sd / 2.0, sd, size=(draws, n)))
    if noise == "normal":
        # 15% CV puts a value below zero once in 10^17 draws; clip so a throughput is never non-positive.
        return np.maximum(rng.normal(mean, cv * mean, size=(draws, n)), 1e-9 * mean)
    raise ValueError(f"unknown noise {noise!r}: use one of {NOISES}")


def _rng(seed: int, *cell: object) -> np.random.Generator:
    """A generator of its own for each table cell (cells are independent samples, and reproducible)."""
    return np.random.default_rng([seed, int.from_bytes(hashlib.sha256(repr(cell).encode()).digest()[:8], "big")])


def _old_arithmetic_t(values: Sequence[float], confidence: float) -> tuple[float, float]:
    x = np.asarray(values, dtype=float)
    low, high = stats.t.interval(confidence, x.size - 1, loc=float(x.mean()), scale=stats.sem(x))
    return float(low), float(high)


def throughput_coverage(method: str, noise: str, cv: float, n: int, draws: int, seed: int,
                        confidence: float = 0.95) -> tuple[float, float]:
    """Coverage of the true mean by a throughput interval, and the share of intervals with a low end <= 0.

    Args:
        method: ``log-t`` (:func:`autotune.stats.intervals.interval`, today's) or ``t`` (the arithmetic t interval it
            replaced).
    """
    rng = _rng(seed, "throughput", noise, cv, n)
    samples = draw_restarts(rng, noise, cv, n, draws=draws)
    fn = interval if method == "log-t" else _old_arithmetic_t
    hits = nonpositive = 0
    for row in samples:
        low, high = fn(row, confidence)
        hits += low <= 1000.0 <= high
        nonpositive += low <= 0.0
    return hits / draws, nonpositive / draws


def _ratio_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) / np.mean(b, axis=axis)


def _old_bootstrap(a: np.ndarray, b: np.ndarray, confidence: float, seed: int) -> tuple[float, float]:
    res = stats.bootstrap((a, b), _ratio_of_means, vectorized=True, paired=False, confidence_level=confidence,
                          method="percentile", n_resamples=2000, random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def speedup_coverage(method: str, noise: str, cv: float, n: int, draws: int, seed: int, *,
                     comparisons: int = 1, ref_cv: float | None = None, ref_n: int | None = None,
                     true_speedup: float = 1.2) -> float:
    """Coverage of the true speedup by a speedup interval at Bonferroni level ``0.05 / comparisons``.

    Args:
        method: ``welch-log`` (:func:`autotune.stats.intervals.compare`, today's) or ``bootstrap`` (the percentile
            bootstrap of the ratio of means it replaced).
        cv, n: The challenger's noise and restarts; ``ref_cv``/``ref_n`` the baseline's (default: the same).
    """
    rng = _rng(seed, "speedup", noise, cv, n, ref_cv, ref_n, true_speedup)
    a = draw_restarts(rng, noise, cv, n, mean=1000.0 * true_speedup, draws=draws)
    b = draw_restarts(rng, noise, cv if ref_cv is None else ref_cv, n if ref_n is None else ref_n, draws=draws)
    hits = 0
    for i in range(draws):
        if method == "welch-log":
            c = compare(a[i], b[i], comparisons=comparisons)
            low, high = c.ci_low, c.ci_high
        else:
            low, high = _old_bootstrap(a[i], b[i], 1.0 - 0.05 / comparisons, seed + i)
        hits += low <= true_speedup <= high
    return hits / draws


# -- the whole verification phase ---------------------------------------------------------------------------


class _NoisyEngine:
    """An engine whose configurations have known true means and draw lognormal or normal restart noise."""

    def __init__(self, truth: dict[str, float], noise: str, cv: float, rng: np.random.Generator) -> None:
        self.truth, self.noise, self.cv, self.rng = truth, noise, cv, rng

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        value = float(draw_restarts(self.rng, self.noise, self.cv, 1, mean=self.truth[config.key()])[0, 0])
        return RestartResult(status="ok", restart=restart, seed=seed, passes_tok_s=(value,), wall_s=60.0,
                             resolved=Resolved(cudagraph_mode=config.cudagraph_mode))


#: Verification scenarios: true speedups of three challengers over a baseline at 1000 tok/s.
SCENARIOS: dict[str, tuple[float, ...]] = {
    "flat": (1.0, 1.0, 1.0),
    "near-tie": (1.10, 1.08, 1.0),
    "clear": (1.30, 1.10, 0.90),
}


@dataclasses.dataclass(frozen=True)
class VerificationCoverage:
    scenario: str
    noise: str
    cv: float
    draws: int
    speedup_coverage: float
    throughput_coverage: float
    says_faster: float
    mean_starts: float


def verification_coverage(scenario: str, noise: str, cv: float, draws: int, seed: int, *, restarts: int = 3,
                          max_restarts: int = 5) -> VerificationCoverage:
    """Run the verification phase ``draws`` times on a known landscape and score its winner's intervals."""
    speedups = SCENARIOS[scenario]
    configs = [EngineConfig(compilation_config={"cudagraph_mode": f"MODE{i}"}) for i in range(len(speedups))]
    base = EngineConfig()
    truth = {c.key(): 1000.0 * s for c, s in zip(configs, speedups)} | {base.key(): 1000.0}
    candidates = [Candidate(CANDIDATE, c) for c in configs] + [Candidate(BASELINE, base)]
    sp_hits = tp_hits = faster = starts = 0
    for d in range(draws):
        engine = _NoisyEngine(truth, noise, cv, _rng(seed, "verify", scenario, noise, cv, d))
        v = run_verification(engine, Workload(), candidates, restarts, seed_for=lambda r: r,
                             max_restarts=max_restarts)
        win = v.winner
        true = truth[win.candidate.config.key()]
        tp_hits += win.summary.ci_low <= true <= win.summary.ci_high
        starts += v.restarts_used
        if win.comparison is None:  # the baseline won: its "speedup" is 1 by definition, no interval shown
            sp_hits += 1
            continue
        sp_hits += win.comparison.ci_low <= true / 1000.0 <= win.comparison.ci_high
        faster += v.verdict == "faster"
    return VerificationCoverage(scenario, noise, cv, draws, sp_hits / draws, tp_hits / draws, faster / draws,
                                starts / draws)


# -- sequential against fixed verification, on the same draws --------------------------------------------------


#: CVs of the sequential table: where three rounds settle most verdicts, and where they settle few.
SEQUENTIAL_CVS = (0.03, 0.10)


@dataclasses.dataclass(frozen=True)
class SequentialCoverage:
    """One cell: the same phases scored three ways (each a tuple: fixed today, fixed at the planned maximum,
    sequential). ``coverage`` of the winner's true speedup by its printed interval; ``conclusive``: the interval
    excludes 1 or lies inside the margin; ``false_faster``: "faster" when the winner is truly no faster."""

    draws: int
    coverage: tuple[float, float, float]
    conclusive: tuple[float, float, float]
    false_faster: tuple[float, float, float]
    starts: tuple[float, float, float]
    looks: float


def _conclusive(low: float, high: float, margin: float) -> bool:
    return low > 1.0 or high < 1.0 or (low >= 1.0 / (1.0 + margin) and high <= 1.0 + margin)


def sequential_coverage(scenario: str, noise: str, cv: float, draws: int, seed: int, *, restarts: int = 3,
                        max_restarts: int = 5, rounds: int = 5, margin: float = 0.03) -> SequentialCoverage:
    """Each draw runs the sequential verification (:func:`autotune.study.run_verification` with ``rounds``) and,
    on an engine with the same seed, the fixed one (no sequential rounds); the fixed design at the planned
    maximum takes the fixed one's restarts plus ``rounds`` more of its winner and the baseline from the same
    engine, in the order the sequential rounds draw them (so where the sequential design stopped early the two
    share their restarts), and states the full-level interval on all of them."""
    speedups = SCENARIOS[scenario]
    configs = [EngineConfig(compilation_config={"cudagraph_mode": f"MODE{i}"}) for i in range(len(speedups))]
    base = EngineConfig()
    truth = {c.key(): 1000.0 * s for c, s in zip(configs, speedups)} | {base.key(): 1000.0}
    candidates = [Candidate(CANDIDATE, c) for c in configs] + [Candidate(BASELINE, base)]
    cover = [0, 0, 0]
    decided = [0, 0, 0]
    false_faster = [0, 0, 0]
    starts = [0, 0, 0]
    looks = 0
    for d in range(draws):
        runs = []
        for seq in (0, rounds):
            engine = _NoisyEngine(truth, noise, cv, _rng(seed, "sequential", scenario, noise, cv, d))
            v = run_verification(engine, Workload(), candidates, restarts, seed_for=lambda r: r,
                                 max_restarts=max_restarts, sequential_rounds=seq, margin=margin)
            runs.append((v, engine))
        (fixed, fixed_engine), (sequential, _) = runs
        w, b = fixed.winner, fixed.baseline
        # The fixed design at the planned maximum: the fixed phase's restarts, then `rounds` more of its winner
        # and the baseline, drawn on in the fixed phase's generator as the sequential rounds draw them.
        full = None
        if w.comparison is not None:
            extra_w: list[float] = []
            extra_b: list[float] = []
            for r in range(rounds):
                for key, into in ((w.candidate.config.key(), extra_w), (b.candidate.config.key(), extra_b)):
                    into.append(float(draw_restarts(fixed_engine.rng, noise, cv, 1, mean=truth[key])[0, 0]))
            full = compare([*w.summary.values, *extra_w], [*b.summary.values, *extra_b],
                           comparisons=w.comparison.comparisons)
        for i, (v, c, n) in enumerate(((fixed, fixed.winner.comparison, fixed.restarts_used),
                                       (fixed, full, fixed.restarts_used + (2 * rounds if full else 0)),
                                       (sequential, sequential.winner.comparison, sequential.restarts_used))):
            true = truth[v.winner.candidate.config.key()] / 1000.0
            starts[i] += n
            if c is None:  # the baseline won: no speedup claimed
                cover[i] += 1
                continue
            cover[i] += c.ci_low <= true <= c.ci_high
            decided[i] += _conclusive(c.ci_low, c.ci_high, margin)
            false_faster[i] += c.ci_low > 1.0 and true <= 1.0
        looks += sequential.sequential.look if sequential.sequential is not None else 1

    def share(xs: list[int]) -> tuple[float, float, float]:
        return (xs[0] / draws, xs[1] / draws, xs[2] / draws)

    return SequentialCoverage(draws, share(cover), share(decided), share(false_faster), share(starts),
                              looks / draws)


def _sequential_table(out: IO[str], draws: int, seed: int, cell: Any, rounds: int = 5) -> None:
    out.write(f"\nSequential against fixed verification, on the same draws ({draws} phases a cell): 3 challengers "
              f"and the baseline, 3 common rounds, near-ties up to 5, then up to {rounds} rounds of the winner and "
              "the baseline (group-sequential, Lan-DeMets O'Brien-Fleming spending, margin 3%). `fixed` is today's "
              f"design; `fixed max` the fixed design of the planned maximum ({rounds} more rounds, always run). The "
              "winner's interval claims 98.33% in all three (Bonferroni over 3); `conclusive`: it excludes 1 or "
              "lies inside [1/1.03, 1.03]; `starts / verdict`: engine starts per conclusive verdict.\n\n")
    out.write("| true speedups | noise | CV | coverage fixed / fixed max / sequential | conclusive fixed / fixed max "
              "/ sequential | false faster (seq) | starts fixed / fixed max / sequential | sequential / fixed max "
              "starts | starts / verdict fixed / fixed max / sequential | mean look |\n")
    out.write("|---|---|---|---|---|---|---|---|---|---|\n")
    for scenario in SCENARIOS:
        for noise in NOISES:
            for cv in SEQUENTIAL_CVS:
                r = cell("sequential", scenario, noise, cv, draws, seed)
                per = " / ".join("-" if c == 0 else f"{s / c:.1f}" for s, c in zip(r.starts, r.conclusive))
                out.write(f"| {scenario} {SCENARIOS[scenario]} | {noise} | {cv:.0%} | "
                          + " / ".join(_pct(x) for x in r.coverage) + " | "
                          + " / ".join(_pct(x) for x in r.conclusive) + f" | {_pct(r.false_faster[2])} | "
                          + " / ".join(f"{x:.1f}" for x in r.starts) + f" | {r.starts[2] / r.starts[1]:.2f} | "
                          + per + f" | {r.looks:.1f} |\n")


# -- the table -------------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _cell(job: tuple[str, tuple[Any, ...], dict[str, Any]]) -> object:
    cells: dict[str, Callable[..., object]] = {
        "throughput": throughput_coverage, "speedup": speedup_coverage, "verify": verification_coverage,
        "sequential": sequential_coverage}
    return cells[job[0]](*job[1], **job[2])


def run(draws: int, seed: int, out: IO[str], cvs: Sequence[float] = (0.03, 0.06, 0.10, 0.15),
        ns: Sequence[int] = (2, 3, 4, 5, 6), bootstrap_draws: int = 400, verify_draws: int = 400,
        jobs: int = 1, sequential_draws: int = 400, only_sequential: bool = False) -> None:
    """Print the four coverage tables as markdown, computing their cells in ``jobs`` processes."""
    started = time.monotonic()
    unequal = [(cv, ref_cv, n, ref_n) for cv, ref_cv in ((0.15, 0.03), (0.03, 0.15), (0.10, 0.05))
               for n, ref_n in ((3, 3), (3, 6), (6, 3), (6, 6))]
    cells: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    for noise in NOISES:
        for cv in cvs:
            cells += [("throughput", ("log-t", noise, cv, n, draws, seed), {}) for n in ns]
            cells.append(("throughput", ("t", noise, cv, 2, draws, seed), {}))
            for k in (1, 3):
                cells += [("speedup", ("welch-log", noise, cv, n, draws, seed), {"comparisons": k}) for n in ns]
                cells.append(("speedup", ("bootstrap", noise, cv, 3, bootstrap_draws, seed), {"comparisons": k}))
        for cv, ref_cv, n, ref_n in unequal:
            cells += [("speedup", ("welch-log", noise, cv, n, draws, seed),
                       {"comparisons": k, "ref_cv": ref_cv, "ref_n": ref_n}) for k in (1, 3)]
    for scenario in SCENARIOS:
        for noise in NOISES:
            cells += [("verify", (scenario, noise, cv, verify_draws, seed), {}) for cv in (0.03, 0.10, 0.15)]
    if only_sequential:
        cells = []
    cells += [("sequential", (scenario, noise, cv, sequential_draws, seed), {}) for scenario in SCENARIOS
              for noise in NOISES for cv in SEQUENTIAL_CVS]
    if jobs > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            results = dict(zip(range(len(cells)), pool.map(_cell, cells, chunksize=1)))
    else:
        results = {i: _cell(c) for i, c in enumerate(cells)}
    got = {(c[0], c[1], tuple(sorted(c[2].items()))): results[i] for i, c in enumerate(cells)}

    def cell(kind: str, *args: object, **kw: object) -> Any:
        return got[(kind, args, tuple(sorted(kw.items())))]

    if only_sequential:
        _sequential_table(out, sequential_draws, seed, cell)
        out.write(f"\n({time.monotonic() - started:.0f} s wall, {jobs} process(es))\n")
        return

    out.write(f"Throughput interval, 95% claimed ({draws} draws a cell; `old t` = the arithmetic t interval it "
              "replaced, `old t low<=0` = share of those reaching zero or below)\n\n")
    out.write("| noise | CV | " + " | ".join(f"n={n}" for n in ns) + " | old t, n=2 | old t low<=0, n=2 |\n")
    out.write("|---|---|" + "---|" * (len(ns) + 2) + "\n")
    for noise in NOISES:
        for cv in cvs:
            row = [_pct(cell("throughput", "log-t", noise, cv, n, draws, seed)[0]) for n in ns]
            old, nonpos = cell("throughput", "t", noise, cv, 2, draws, seed)
            out.write(f"| {noise} | {cv:.0%} | " + " | ".join(row) + f" | {_pct(old)} | {_pct(nonpos)} |\n")

    out.write(f"\nSpeedup interval, true speedup 1.2, same CV and restarts on both sides ({draws} draws a cell; "
              f"old bootstrap = the percentile bootstrap it replaced, {bootstrap_draws} draws)\n\n")
    out.write("| noise | CV | claimed | " + " | ".join(f"n={n}" for n in ns) + " | old bootstrap, n=3 |\n")
    out.write("|---|---|---|" + "---|" * (len(ns) + 1) + "\n")
    for noise in NOISES:
        for cv in cvs:
            for k, level in ((1, "95%"), (3, "98.33%")):
                row = [_pct(cell("speedup", "welch-log", noise, cv, n, draws, seed, comparisons=k))
                       for n in ns]
                old = cell("speedup", "bootstrap", noise, cv, 3, bootstrap_draws, seed, comparisons=k)
                out.write(f"| {noise} | {cv:.0%} | {level} | " + " | ".join(row) + f" | {_pct(old)} |\n")

    out.write(f"\nSpeedup interval, unequal spread or restarts (challenger / baseline; {draws} draws a cell)\n\n")
    out.write("| noise | CV | n | 95% claimed | 98.33% claimed |\n|---|---|---|---|---|\n")
    for noise in NOISES:
        for cv, ref_cv, n, ref_n in unequal:
            row = [_pct(cell("speedup", "welch-log", noise, cv, n, draws, seed, comparisons=k,
                             ref_cv=ref_cv, ref_n=ref_n)) for k in (1, 3)]
            out.write(f"| {noise} | {cv:.0%} / {ref_cv:.0%} | {n} / {ref_n} | " + " | ".join(row) + " |\n")

    out.write(f"\nWhole verification phase: 3 challengers and the baseline, 3 common rounds, near-ties up to 5 "
              f"({verify_draws} phases a cell). The winner's intervals claim 98.33% (speedup, Bonferroni over 3) "
              "and 98.75% (throughput, over the 4 verified); `says faster` on `flat` is a false win.\n\n")
    out.write("| true speedups | noise | CV | speedup coverage | throughput coverage | says faster | starts |\n")
    out.write("|---|---|---|---|---|---|---|\n")
    for scenario in SCENARIOS:
        for noise in NOISES:
            for cv in (0.03, 0.10, 0.15):
                r = cell("verify", scenario, noise, cv, verify_draws, seed)
                out.write(f"| {scenario} {SCENARIOS[scenario]} | {noise} | {cv:.0%} | {_pct(r.speedup_coverage)} "
                          f"| {_pct(r.throughput_coverage)} | {_pct(r.says_faster)} | {r.mean_starts:.1f} |\n")
    _sequential_table(out, sequential_draws, seed, cell)
    out.write(f"\n({time.monotonic() - started:.0f} s wall, {jobs} process(es))\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(prog="python -m autotune.bench.coverage", description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=count(1, 10_000_000), default=4000, help="samples per cell (default 4000)")
    parser.add_argument("--bootstrap-draws", type=count(1, 1_000_000), default=400,
                        help="samples per cell for the old bootstrap, which is slow (default 400)")
    parser.add_argument("--verify-draws", type=count(1, 1_000_000), default=400,
                        help="verification phases per cell (default 400)")
    parser.add_argument("--sequential-draws", type=count(1, 1_000_000), default=400,
                        help="verification phases per cell of the sequential-against-fixed table (default 400)")
    parser.add_argument("--only-sequential", action="store_true",
                        help="print only the sequential-against-fixed table")
    parser.add_argument("--seed", type=seed_number, default=0)
    parser.add_argument("--jobs", type=count(1, 1024), default=1, help="worker processes (default 1)")
    args = parser.parse_args(argv)
    for name in ("draws", "bootstrap_draws", "verify_draws", "sequential_draws", "jobs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    run(args.draws, args.seed, sys.stdout, bootstrap_draws=args.bootstrap_draws, verify_draws=args.verify_draws,
        jobs=args.jobs, sequential_draws=args.sequential_draws, only_sequential=args.only_sequential)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

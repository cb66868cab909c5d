"""``tune --warm-start`` measured on the simulator's random landscapes: warm against cold, at 20 and 30 starts.

Per seed: a source study runs on landscape ``seed`` (30 engine starts, the tuner's defaults). Then, on two targets,
a cold study and a study warm-started from the source run at each budget, on their own seed:

* **related**: the same landscape moved within its family (``engine.landscape_shift``: every mode effect, the
  base speed and each method's acceptance and drafting cost take an independent log-scale draw of sd ``shift``),
  as the next engine release or a sibling model would be;
* **unrelated**: another landscape of the family (seed + 1000): what the source knows is no help there, and a warm
  start must cost no more than the few starts its queued configurations take.

Each study's verified winner is scored on the target's ground truth (regret: 0 is the best configuration in the
space). ``python -m autotune.bench.warmstart [--seeds N] [--jobs J]`` prints the table (docs/benchmarks.md, "Warm
start"); ``make bench-warmstart`` runs it.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.bench._args import BenchParser, count, number, seed_number
from autotune.bench._running import worker_pool
from autotune.bench._truth import PROFILES, ground_truth, load_profile_space
from autotune.core.records import EngineFacts
from autotune.engines.sim import SimEngine
from autotune.report import build_report
from autotune.study import StudyOptions, carry_noise, plan_warm_start, run_study, warm_start_top

__all__ = ["TARGETS", "main", "paired", "run_seed", "summarize"]

SOURCE_BUDGET = 30
BUDGETS = (20, 30)
SHIFT = 0.1
#: Regret a study must reach to count as having found a good configuration.
GOOD_REGRET = 0.05
#: The seed a target's studies run on is the landscape's plus this (the source ran on the landscape's own).
TARGET_SEED_OFFSET = 7


def TARGETS(seed: int, shift: float) -> dict[str, dict[str, Any]]:  # noqa: N802 - a table, by seed
    return {"related": {"landscape_seed": seed, "landscape_shift": shift},
            "unrelated": {"landscape_seed": seed + 1000}}


def _study(space: Any, engine: SimEngine, name: str, budget: int, seed: int, workdir: str,
           source: Any = None) -> tuple[Any, int]:
    options = StudyOptions(study_name=name, storage="memory", workdir=workdir, trials=budget, budget_restarts=budget,
                           seed=seed)
    queued = 0
    if source is not None:
        warm = plan_warm_start([source], space, EngineFacts.of(engine.describe()), warm_start_top(budget))
        carry_noise(engine, warm)
        options = dataclasses.replace(options, enqueue=tuple(warm.enqueue), warm_start=dict(warm.record))
        queued = len(warm.enqueue)
    return build_report(run_study(space, engine, options)), queued


def run_seed(seed: int, budgets: Sequence[int] = BUDGETS, shift: float = SHIFT) -> list[dict[str, Any]]:
    """The source study of landscape ``seed``, then cold and warm studies on each target at each budget."""
    space = load_profile_space(PROFILES["random"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="autotune-bench-warm-") as workdir:
        source_options = StudyOptions(study_name=f"source-{seed}", storage="memory", workdir=workdir,
                                      trials=SOURCE_BUDGET, budget_restarts=SOURCE_BUDGET, seed=seed)
        source = run_study(space, SimEngine(cache_dir=None, profile="random", landscape_seed=seed), source_options)
        for target, opts in TARGETS(seed, shift).items():
            truth = ground_truth(space, SimEngine(cache_dir=None, profile="random", **opts))
            for budget in budgets:
                for start in ("cold", "warm"):
                    engine = SimEngine(cache_dir=None, profile="random", **opts)
                    report, queued = _study(space, engine, f"{target}-{start}-{budget}-{seed}", budget,
                                            seed + TARGET_SEED_OFFSET, workdir, source if start == "warm" else None)
                    winner = None if report.winner is None else report.winner.config
                    started = {t.record.config.key() for t in report.search_trials if t.record.restarts}
                    rows.append({"seed": seed, "target": target, "budget": budget, "start": start,
                                 "regret": truth.regret(winner), "queued": queued,
                                 "found": min((truth.regret_of_key(k) for k in started), default=1.0),
                                 "claims_faster": report.verdict == "faster",
                                 "starts": report.budget.restarts_used})
    return rows


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (target, budget, start): regret of the verified winner, share within :data:`GOOD_REGRET`."""
    cells: dict[tuple[str, int, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["target"], r["budget"], r["start"]), []).append(r)
    out = []
    for (target, budget, start), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        regrets = [r["regret"] for r in rs]
        out.append({"target": target, "budget": budget, "start": start, "n": len(rs),
                    "mean_regret": statistics.fmean(regrets), "median_regret": statistics.median(regrets),
                    "good": statistics.fmean(1.0 if g <= GOOD_REGRET else 0.0 for g in regrets),
                    "mean_found": statistics.fmean(r["found"] for r in rs),
                    "mean_starts": statistics.fmean(r["starts"] for r in rs),
                    "sem_regret": statistics.stdev(regrets) / len(regrets) ** 0.5 if len(regrets) > 1 else 0.0})
    return out


def paired(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Warm minus cold regret on the same seed, per (target, budget): mean and its standard error."""
    by = {(r["target"], r["budget"], r["start"], r["seed"]): r["regret"] for r in rows}
    out = []
    for target, budget in sorted({(r["target"], r["budget"]) for r in rows}):
        diffs = [by[(target, budget, "warm", s)] - by[(target, budget, "cold", s)] for (t, b, st, s) in by
                 if (t, b, st) == (target, budget, "warm") and (target, budget, "cold", s) in by]
        sem = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
        out.append({"target": target, "budget": budget, "n": len(diffs), "mean_diff": statistics.fmean(diffs),
                    "sem_diff": sem, "warm_better": sum(d < 0 for d in diffs), "cold_better": sum(d > 0 for d in diffs)})
    return out


def _paired_table(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| target | starts | seeds | warm - cold regret (mean ± s.e.) | warm better | cold better |",
             "|" + " --- |" * 6]
    for p in paired(rows):
        lines.append(f"| {p['target']} | {p['budget']} | {p['n']} | {p['mean_diff']:+.3f} ± {p['sem_diff']:.3f} | "
                     f"{p['warm_better']} | {p['cold_better']} |")
    return "\n".join(lines)


def _table(summary: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| target | starts | start | seeds | mean regret (± s.e.) | median regret | "
             f"regret <= {GOOD_REGRET:.0%} | best started (mean regret) |", "|" + " --- |" * 8]
    for s in summary:
        lines.append(f"| {s['target']} | {s['budget']} | {s['start']} | {s['n']} | "
                     f"{s['mean_regret']:.3f} ± {s['sem_regret']:.3f} | {s['median_regret']:.3f} | {s['good']:.0%} | "
                     f"{s['mean_found']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(prog="python -m autotune.bench.warmstart", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=count(1, 10_000), default=20)
    parser.add_argument("--first-seed", type=seed_number, default=0)
    parser.add_argument("--shift", type=number(0, 1.99), default=SHIFT,
                        help="the sim landscape shift between source and target (engine.sim.landscape_shift)")
    parser.add_argument("--jobs", type=count(1, 1024), default=2)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows: list[dict[str, Any]] = []
    if args.jobs <= 1:
        for seed in seeds:
            rows += run_seed(seed, shift=args.shift)
    else:
        with worker_pool(args.jobs) as pool:
            for part in pool.imap_unordered(_run_seed_shift, [(s, args.shift) for s in seeds]):
                rows += part
    print(_table(summarize(rows)))
    print()
    print(_paired_table(rows))
    print(f"\n{len(seeds)} seeds, shift {args.shift}, {time.perf_counter() - started:.0f} s")
    return 0


def _run_seed_shift(item: tuple[int, float]) -> list[dict[str, Any]]:
    return run_seed(item[0], shift=item[1])


if __name__ == "__main__":
    sys.exit(main())

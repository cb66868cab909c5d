"""``autotune recheck`` measured on the simulator: repeated draws on an unchanged engine, and one shifted release.

For each profile a study runs once (30 engine starts, the tuner's defaults); then ``draws`` rechecks of it run on
fresh seeds (nothing stored), each on a fresh simulated engine of the same version, and the simulator's ground
truth scores them:

* **coverage**: how often the recheck's speedup interval holds the winner's true speedup over the baseline, against
  the level it states (95% with one challenger);
* how often it holds the study's *stored* speedup (itself an estimate: a stored speedup off the truth is covered
  less often than the stated level);
* the verdicts: on an unchanged engine a winner whose true speedup is well above 1 should stay "still faster".

The h200 profile also runs ``draws`` rechecks on the simulated 0.29.0 (its speculation runs PIECEWISE on sizes
rounded to 8s, engines/_sim_model.py): they should say "no longer faster" (or "now slower") and name the change.

``python -m autotune.bench.recheck [--draws N]`` prints the table (docs/benchmarks.md, "Rechecking a winner").
"""

from __future__ import annotations

import collections
import statistics
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from autotune.bench._args import BenchParser, count
from autotune.bench._truth import PER_SEED_PROFILES, PROFILES, load_profile_space, make_engine
from autotune.decisions.recheck import BASELINE_KIND, RecheckRecord
from autotune.engines.sim import SimEngine
from autotune.study import RecheckOptions, StudyOptions, recheck, run_study

__all__ = ["draw_rechecks", "main"]

BUDGET = 30
#: The recheck's restarts per side in the draws (the planner's default for these studies).
RESTARTS = 5


def _true_speedup(engine: SimEngine, record: RecheckRecord, space: Any) -> float:
    entries = record.verification.entries
    winner = next(e for e in entries if e.candidate.config.label() == record.checked)
    base = next(e for e in entries if e.candidate.role == "baseline")
    w = engine.true_throughput(winner.candidate.config, space.workload) or 0.0
    b = engine.true_throughput(base.candidate.config, space.workload) or 1.0
    return w / b


def draw_rechecks(profile: str, draws: int, seed: int = 0, version: str | None = None,
                  restarts: int = RESTARTS) -> dict[str, Any]:
    """One study of ``profile`` (seed ``seed``), then ``draws`` rechecks of it on ``version`` (default: the
    study's). Returns the row of the table."""
    prof = PROFILES[profile]
    space = load_profile_space(prof)
    with tempfile.TemporaryDirectory(prefix="autotune-bench-recheck-") as workdir:
        options = StudyOptions(study_name=f"recheck-{profile}-{seed}", storage="memory", workdir=workdir,
                               trials=BUDGET, budget_restarts=BUDGET, seed=seed)
        ledger = run_study(space, make_engine(prof, seed), options)
    stored = ledger.verification()
    if stored is None or stored.winner.candidate.role == "baseline":
        return {"profile": profile, "seed": seed, "version": version, "draws": 0, "note": "the baseline won"}
    then = stored.winner.comparison
    verdicts: collections.Counter[str] = collections.Counter()
    covered_true = covered_stored = changed = 0
    level, truth = None, None
    for d in range(draws):
        sim = dict(prof.sim)
        if profile in PER_SEED_PROFILES:
            sim["landscape_seed"] = seed  # the study's own landscape
        if version is not None:
            sim["engine_version"] = version
        engine = SimEngine(cache_dir=None, **sim)
        record = recheck(ledger, space, engine, RecheckOptions(restarts=restarts, index=d), store=False)
        assert record.kind == BASELINE_KIND
        now = record.now
        truth = _true_speedup(engine, record, space)
        level = now.get("confidence")
        lo, hi = now.get("ci_low"), now.get("ci_high")
        if lo is not None and hi is not None:
            covered_true += lo <= truth <= hi
            covered_stored += lo <= then.speedup <= hi
        verdicts[record.verdict] += 1
        changed += bool(record.resolved_changes)
    return {"profile": profile, "seed": seed, "version": version or "study's", "draws": draws,
            "restarts": restarts, "level": level, "true_speedup": truth, "stored_speedup": then.speedup,
            "coverage_true": covered_true / draws, "coverage_stored": covered_stored / draws,
            "verdicts": dict(verdicts), "changed_resolved": changed / draws}


def _table(rows: Sequence[dict[str, Any]]) -> str:
    out = ["| profile | engine | draws | level | true speedup | stored speedup | covers truth | covers stored | "
           "verdicts | resolved change named |", "|" + " --- |" * 10]
    for r in rows:
        if not r["draws"]:
            out.append(f"| {r['profile']} (seed {r['seed']}) | - | 0 | - | - | - | - | - | {r['note']} | - |")
            continue
        verdicts = ", ".join(f"{v} {n}" for v, n in sorted(r["verdicts"].items(), key=lambda kv: -kv[1]))
        out.append(f"| {r['profile']} (seed {r['seed']}) | {r['version']} | {r['draws']} | {r['level']:.1%} | "
                   f"{r['true_speedup']:.3f} | {r['stored_speedup']:.3f} | {r['coverage_true']:.1%} | "
                   f"{r['coverage_stored']:.1%} | {verdicts} | {r['changed_resolved']:.0%} |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(prog="python -m autotune.bench.recheck", description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=count(1, 1_000_000), default=200)
    parser.add_argument("--seeds", type=count(1, 10_000), default=3, help="studies per profile (seeds 0..N-1)")
    parser.add_argument("--restarts", type=count(2, 1_000), default=RESTARTS)
    args = parser.parse_args(argv)
    rows = []
    for profile in ("h200", "gb10", "random"):
        for seed in range(args.seeds):
            rows.append(draw_rechecks(profile, args.draws, seed, restarts=args.restarts))
    for seed in range(args.seeds):
        rows.append(draw_rechecks("h200", args.draws, seed, version="0.29.0", restarts=args.restarts))
    print(_table(rows))
    ok = [r for r in rows if r["draws"] and r["version"] == "study's"]
    if ok:
        print(f"\nmean coverage of the true speedup (unchanged engine): "
              f"{statistics.fmean(r['coverage_true'] for r in ok):.1%} at a stated {ok[0]['level']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

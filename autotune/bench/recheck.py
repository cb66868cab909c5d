"""``autotune recheck`` measured: false alarms on an unchanged engine, power on a real regression, and what the
simulator's ground truth says of today's intervals.

A study runs once per profile and seed (30 engine starts, the tuner's defaults); then ``draws`` rechecks of it run
on fresh seeds (nothing stored), each on a fresh engine, sized as ``autotune recheck`` sizes them (the planner,
stopping early once the change test decides):

* **A/A, the simulator**: the same simulated engine (``h200``, ``gb10``, ``random`` and ``flat``, where the baseline
  usually wins): every non-zero exit is a false alarm. The table also gives how often the old rule ("no longer
  significantly faster" on today's interval, the rule before issue 44) would have alarmed on the same restarts;
* **A/A, the cmd engine**: study and rechecks through ``cmd`` (``examples/cmd_engine_example.py``: a process per
  restart, the JSON protocol) on the h200 simulation;
* **power**: the same rechecks with a real 20% regression injected: every throughput of the checked configuration
  scaled by 0.8 (so its speedup over the baseline is 20% lower, everything else unchanged); an alarm that says
  "slower" is a detection;
* **0.29.0**: the h200 study rechecked on the simulated 0.29.0 (its speculation runs PIECEWISE on sizes rounded to
  8s, engines/_sim_model.py): a change the data support, and the changed resolved configuration named.

``python -m autotune.bench.recheck [--draws N] [--seeds N] [--cmd-draws N]`` prints the tables
(docs/benchmarks.md, "Recheck: false alarms and power (issue 44)"); ``make bench-recheck`` runs it.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autotune.bench._args import BenchParser, count
from autotune.bench._truth import PER_SEED_PROFILES, PROFILES, load_profile_space, make_engine
from autotune.core.records import EngineConfig, RestartResult, Workload
from autotune.decisions import recheck as rules
from autotune.decisions.recheck import BASELINE_KIND, RecheckRecord
from autotune.engines.sim import SimEngine
from autotune.stats import scipy_stats
from autotune.stats.intervals import Verdict
from autotune.study import RecheckOptions, StudyOptions, recheck, run_study

__all__ = ["Regressed", "alarm", "draw_rechecks", "main", "upper_bound"]

BUDGET = 30
#: The verdicts a recheck exits non-zero on (autotune.cli.recheck): every one is an alarm.
ALARMS = (rules.CHANGED_SLOWER, rules.SLOWER_THAN_BASELINE, rules.CHANGED_FASTER, rules.FAILS_NOW,
          rules.CONFIG_CHANGED)
#: The regression the power rows inject: the checked configuration's throughput times this.
REGRESSION = 0.8
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cmd_engine_example.py"


def alarm(record: RecheckRecord) -> bool:
    """The recheck exits non-zero."""
    return record.verdict in ALARMS


def old_rule_alarm(record: RecheckRecord) -> bool:
    """What the rule before issue 44 said on today's interval: "now slower", "no longer faster", "now faster"."""
    now = record.now.get("verdict")
    if now == Verdict.SLOWER:
        return True
    return (now != Verdict.FASTER) if record.stored_verdict == Verdict.FASTER else now == Verdict.FASTER


def upper_bound(alarms: int, n: int, level: float = 0.95) -> float:
    """One-sided upper confidence bound of a rate (Clopper-Pearson)."""
    if n == 0:
        return 1.0
    if alarms >= n:
        return 1.0
    return float(scipy_stats().beta.ppf(level, alarms + 1, n - alarms))


class Regressed:
    """An engine whose runs of one configuration are ``factor`` times as fast (the injected regression)."""

    def __init__(self, engine: Any, key: str, factor: float) -> None:
        self.engine, self.key, self.factor = engine, key, factor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        result = self.engine.run_restart(config, workload, restart=restart, seed=seed)
        if config.key() != self.key or not result.ok:
            return result
        f = self.factor
        return dataclasses.replace(result, passes_tok_s=tuple(v * f for v in result.passes_tok_s),
                                   warmup_tok_s=tuple(v * f for v in result.warmup_tok_s),
                                   score=None if result.score is None else result.score * f)


def _sim_factory(profile: str, seed: int, version: str | None) -> Callable[[], Any]:
    def make() -> Any:
        sim: dict[str, Any] = dict(PROFILES[profile].sim)
        if profile in PER_SEED_PROFILES:
            sim["landscape_seed"] = seed  # the study's own landscape
        if version is not None:
            sim["engine_version"] = version
        return SimEngine(cache_dir=None, **sim)

    return make


def _cmd_factory(profile: str, cache: str) -> Callable[[], Any]:
    def make() -> Any:
        from autotune.engines.cmd import CmdEngine

        sim = PROFILES[profile].sim
        return CmdEngine(cache_dir=cache, command=[sys.executable, str(EXAMPLE), "--profile", sim["profile"],
                                                   "--model-profile", sim.get("model_profile", "dense")])

    return make


def _true_speedup(record: RecheckRecord, space: Any, truth: SimEngine) -> float:
    entries = record.verification.entries
    winner = next(e for e in entries if e.candidate.config.label() == record.checked)
    base = next(e for e in entries if e.candidate.role == "baseline")
    w = truth.true_throughput(winner.candidate.config, space.workload) or 0.0
    b = truth.true_throughput(base.candidate.config, space.workload) or 1.0
    return w / b


def draw_rechecks(profile: str, draws: int, seed: int = 0, version: str | None = None,
                  restarts: int | None = None, regress: float | None = None, engine: str = "sim") -> dict[str, Any]:
    """One study of ``profile`` (seed ``seed``) on ``engine`` (``sim`` or ``cmd``), then ``draws`` rechecks of it on
    ``version`` (default: the study's), with the checked configuration ``regress`` times as fast when given.
    Returns the row of the table."""
    prof = PROFILES[profile]
    space = load_profile_space(prof)
    with tempfile.TemporaryDirectory(prefix="autotune-bench-recheck-") as workdir:
        factory = (_sim_factory(profile, seed, None) if engine == "sim"
                   else _cmd_factory(profile, str(Path(workdir) / "cache")))
        study_engine = make_engine(prof, seed) if engine == "sim" else factory()
        options = StudyOptions(study_name=f"recheck-{profile}-{seed}", storage="memory", workdir=workdir,
                               trials=BUDGET, budget_restarts=BUDGET, seed=seed)
        ledger = run_study(space, study_engine, options)
        stored = ledger.verification()
        row: dict[str, Any] = {"profile": profile, "seed": seed, "engine": engine, "version": version or "study's",
                               "regress": regress, "draws": 0}
        if stored is None or rules.checked_entry(stored) == stored.winner_index and \
                stored.winner.candidate.role == "baseline":
            return {**row, "note": "nothing but the baseline verified"}
        make = factory if version is None else _sim_factory(profile, seed, version)
        verdicts: collections.Counter[str] = collections.Counter()
        alarms = old = slower = covered_true = covered_change = rounds = 0
        truth = _sim_factory(profile, seed, version)()
        true_speedup = None
        for d in range(draws):
            today = make()
            if regress is not None:
                key = stored.entries[rules.checked_entry(stored)].candidate.config.key()
                today = Regressed(today, key, regress)
            record = recheck(ledger, space, today, RecheckOptions(restarts=restarts, index=d), store=False)
            if hasattr(today, "close"):
                today.close()
            assert record.kind == BASELINE_KIND
            change = record.change_test
            assert change is not None
            true_speedup = _true_speedup(record, space, truth) * (regress or 1.0)
            lo, hi = record.now.get("ci_low"), record.now.get("ci_high")
            covered_true += lo is not None and hi is not None and lo <= true_speedup <= hi
            if regress is not None or version is None:
                # The true change: the injected factor (an unchanged engine: 1).
                covered_change += change.low is not None and change.high is not None and \
                    change.low <= (regress or 1.0) <= change.high
            verdicts[record.verdict] += 1
            alarms += alarm(record)
            slower += record.verdict in (rules.CHANGED_SLOWER, rules.SLOWER_THAN_BASELINE)
            old += old_rule_alarm(record)
            rounds += max(change.restarts[2:] or (0,))
        baseline_won = stored.winner.candidate.role == "baseline"
        checked = stored.entries[rules.checked_entry(stored)].comparison
        return {**row, "draws": draws, "baseline_won": baseline_won, "true_speedup": true_speedup,
                "stored_speedup": None if checked is None else checked.speedup,
                "alarms": alarms, "slower": slower, "old_alarms": old, "verdicts": dict(verdicts),
                "coverage_true": covered_true / draws,
                "coverage_change": covered_change / draws if (regress is not None or version is None) else None,
                "mean_rounds": rounds / draws}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _table(rows: Sequence[dict[str, Any]]) -> str:
    out = ["| profile (seed) | engine | today | stored speedup | true speedup today | draws | alarms | old rule's "
           "alarms | verdicts | change covered | rounds (mean) |", "|" + " --- |" * 11]
    for r in rows:
        if not r["draws"]:
            out.append(f"| {r['profile']} ({r['seed']}) | {r['engine']} | - | - | - | 0 | - | - | {r['note']} | - | - |")
            continue
        today = r["version"] if r["regress"] is None else f"x{r['regress']:g} regression"
        verdicts = ", ".join(f"{v} {n}" for v, n in sorted(r["verdicts"].items(), key=lambda kv: -kv[1]))
        won = " (baseline won)" if r["baseline_won"] else ""
        out.append(f"| {r['profile']} ({r['seed']}){won} | {r['engine']} | {today} | {r['stored_speedup']:.3f} | "
                   f"{r['true_speedup']:.3f} | {r['draws']} | {r['alarms']} | {r['old_alarms']} | {verdicts} | "
                   f"{_pct(r['coverage_change'])} | {r['mean_rounds']:.1f} |")
    return "\n".join(out)


def _summary(name: str, rows: Sequence[dict[str, Any]], key: str = "alarms") -> str:
    n = sum(r["draws"] for r in rows)
    x = sum(r.get(key, 0) for r in rows)
    old = sum(r.get("old_alarms", 0) for r in rows)
    return (f"{name}: {x} of {n} rechecks ({x / n if n else 0:.1%}; one-sided 95% upper bound "
            f"{upper_bound(x, n):.1%}); the old rule on the same restarts: {old} ({old / n if n else 0:.1%})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(prog="python -m autotune.bench.recheck", description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=count(1, 1_000_000), default=10, help="rechecks per study")
    parser.add_argument("--seeds", type=count(1, 10_000), default=6, help="studies per profile (seeds 0..N-1)")
    parser.add_argument("--cmd-draws", type=count(0, 1_000_000), default=10,
                        help="rechecks per cmd-engine study (0: none)")
    parser.add_argument("--cmd-seeds", type=count(0, 10_000), default=3,
                        help="cmd-engine studies (h200, seeds from --cmd-first-seed)")
    parser.add_argument("--cmd-first-seed", type=count(0, 1_000_000), default=0, help="first cmd-engine study seed")
    parser.add_argument("--cmd-only", action="store_true", help="only the cmd engine's A/A rows")
    parser.add_argument("--restarts", type=count(2, 1_000), default=None, help="most rounds per recheck (default: planned)")
    args = parser.parse_args(argv)
    same, power, cmd, shifted = [], [], [], []
    for profile in ("h200", "gb10", "random", "flat") if not args.cmd_only else ():
        for seed in range(args.seeds):
            same.append(draw_rechecks(profile, args.draws, seed, restarts=args.restarts))
            power.append(draw_rechecks(profile, args.draws, seed, restarts=args.restarts, regress=REGRESSION))
            print(f"# {profile} seed {seed} done", file=sys.stderr, flush=True)
    for seed in range(args.cmd_first_seed, args.cmd_first_seed + args.cmd_seeds) if args.cmd_draws else ():
        cmd.append(draw_rechecks("h200", args.cmd_draws, seed, restarts=args.restarts, engine="cmd"))
        print(f"# cmd seed {seed} done", file=sys.stderr, flush=True)
    if not args.cmd_only:
        shifted = [draw_rechecks("h200", args.draws, seed, version="0.29.0", restarts=args.restarts)
                   for seed in range(min(2, args.seeds))]
        print("A/A on the simulator (nothing changed):\n" + _table(same) + "\n")
    if cmd:
        print("A/A on the cmd engine (nothing changed):\n" + _table(cmd) + "\n")
    if not args.cmd_only:
        print(f"A {1 - REGRESSION:.0%} regression of the checked configuration:\n" + _table(power))
        print("\nThe simulated 0.29.0 (the h200 study):\n" + _table(shifted) + "\n")
        print(_summary("false alarms, simulator", [r for r in same if r["draws"]]))
    if cmd:
        print(_summary("false alarms, cmd engine", [r for r in cmd if r["draws"]]))
    detected = [r for r in power if r["draws"]]
    if detected:
        n = sum(r["draws"] for r in detected)
        x = sum(r["slower"] for r in detected)
        print(f"power on a {1 - REGRESSION:.0%} regression: {x} of {n} rechecks said slower ({x / n:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

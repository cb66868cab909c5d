"""The warm-up rules side by side: passes spent, stops inside a ramp, and what leaks into the timed passes.

``python -m autotune.bench.warmup`` replays three rules on the same pass series:

* ``old 3%``: warm once two consecutive passes agree within 3% (the rule before issue 21);
* ``MSER+trend``: :func:`autotune.stats.warmup.warmup_end` without a prior (the first pass dropped, MSER, a trend
  t-test over at least three judged passes);
* ``prior``: the same with the study's noise prior (:class:`autotune.stats.warmup.NoisePool`), which may stop from
  the third pass on;

each with the workload's default floor 1 and cap 4 (``prior, cap 6`` shows what a higher cap would buy).

**Recorded series** (``tests/data/warmup_series.json``): the H200 MoE study of 2026-12-03 (every restart ran 4
one-round warm-up passes, then 3 timed passes of ``pass_rounds`` rounds) and the H200 restart-noise probe of
2026-12-01 (4-6 one-round passes per restart, no rule). The prior for a restart is pooled from the restarts before
it in the file, as a study would have it (none for the first). There is no truth here: "leak" is the mean of the
three passes a rule would have timed next (the recorded passes after its stop, one-round passes scaled as they
are) against the mean of the passes the recording timed, in percent; 0 for a rule that spends all 4.

**Synthetic series**, where the truth is known: a process whose first pass loses a uniform 0-80% (lazy
initialisation), and which in the ramp scenarios starts at a uniform 20-50% of steady state and climbs
geometrically to it over ``R`` passes (the H200's measured ramp 720, 1586, 2089, 3826 tok/s is about ``R = 3``
from 19%). Every one-round pass has log-normal noise of sd ``sigma``; a timed pass runs 4 rounds (the H200's 5 s
passes), its throughput the time-weighted mean of its rounds and its noise ``sigma / 2``. The prior is pooled from
8 earlier flat processes' 3 timed passes (16 degrees of freedom). Per scenario and rule: warm-up passes per
process; "inside" is the share of processes whose warm-up the rule (not the cap) ended while the next pass was
still ramping (a false warm); "cap inside" the share the cap cut off inside the ramp; "bias" the mean relative
error of the mean of the 3 timed passes against steady state, in percent (negative: the ramp leaked in).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autotune.bench._args import BenchParser, count, seed_number
from autotune.core import facts as F
from autotune.stats.warmup import NoisePool, warmup_stop

__all__ = ["DATA", "RULES", "main", "old_rule", "recorded", "replay_study", "synthetic"]

#: The recorded pass series (a copy of what the benchmark needs, so that it runs without the shared references).
DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "warmup_series.json"
#: Rounds one timed pass runs (the H200 study's 5 s passes ran 4 one-round warm-up passes' worth).
TIMED_ROUNDS = 4
TIMED_PASSES = 3
#: Earlier flat processes the synthetic prior is pooled from.
PRIOR_PROCESSES = 8

Rule = Callable[[Sequence[float], Any], "str | None"]


def old_rule(tok_s: Sequence[float], minimum: int = 1, maximum: int = 4, tolerance: float = 0.03) -> str | None:
    """The rule before issue 21: stop once the last two passes agree within ``tolerance`` (of the larger)."""
    if len(tok_s) >= max(minimum, maximum):
        return "cap"
    if len(tok_s) < max(minimum, 2):
        return None if minimum or tok_s else "none"
    a, b = tok_s[-2], tok_s[-1]
    return "rule" if abs(a - b) / max(a, b) <= tolerance else None


#: The rules compared: name -> (stop(passes, prior) -> reason or None).
RULES: dict[str, Rule] = {
    "old 3%": lambda p, prior: old_rule(p),
    "MSER+trend": lambda p, prior: warmup_stop(p, 1, 4),
    "prior": lambda p, prior: warmup_stop(p, 1, 4, prior),
    "prior, cap 6": lambda p, prior: warmup_stop(p, 1, 6, prior),
}


def _stop_at(series: Sequence[float], rule: Rule, prior: Any) -> tuple[int, str]:
    """Passes the rule runs on ``series`` (run pass by pass) and why it stopped; the series must be long enough."""
    n = 0
    while (why := rule(series[:n], prior)) is None:
        n += 1
        if n > len(series):
            raise ValueError("series too short for the rule")
    return n, why


def recorded(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows per data set and rule: restarts, mean passes, stops by the rule, leak (%) and its range."""
    rows = []
    sets = {
        "H200 MoE study (16 restarts)": [(r["warmup_tok_s"], r["passes_tok_s"], r["pass_rounds"])
                                         for r in data["h200_moe"]],
        "H200 restart probe (22 restarts)": [(r["tok_s"][:4], r["tok_s"][4:], 1) for r in data["h200_restart_cost"]],
    }
    for label, restarts in sets.items():
        for name, rule in RULES.items():
            if name.endswith("cap 6"):
                continue  # the recordings ran 4 warm-up passes: nothing to replay beyond them
            pool = NoisePool()
            spent, by_rule, leaks = [], 0, []
            for warm, timed, rounds in restarts:
                n, why = _stop_at(warm, rule, pool.prior())
                spent.append(n)
                by_rule += why != "cap"
                after = [*warm[n:], *timed][:TIMED_PASSES]
                if timed:
                    leaks.append(100 * (sum(after) / len(after) / (sum(timed) / len(timed)) - 1))
                pool.add(timed if len(timed) >= 2 else warm[1:], rounds)
            rows.append({"set": label, "rule": name, "passes": sum(spent) / len(spent),
                         "by_rule": by_rule / len(restarts),
                         "leak": sum(leaks) / len(leaks) if leaks else None,
                         "leak_min": min(leaks) if leaks else None})
    return rows


def replay_study(restarts: Sequence[Any]) -> list[dict[str, Any]]:
    """The rules replayed on a study's own restarts (``Ledger.restarts_spent()``, in the order they ran), next to
    what the study did: per rule, mean warm-up passes, the share the rule (not the cap) ended, and how many
    restarts' series ran out before the rule stopped.

    A restart's series is its warm-up passes, then its timed passes: a rule that wants more passes than the study
    ran reads the timed passes, which run several rounds each (``pass_rounds``) and so are less noisy than the
    one-round warm-up passes it would have had. The prior is pooled from the restarts before each, as the study
    pools it. Restarts without warm-up values (a failed start, an engine that does not say) are left out.
    """
    kept = [r for r in restarts if getattr(r, "ok", False) and r.warmup_tok_s]
    said = [r.facts[F.WARMUP_RULE] for r in kept if F.WARMUP_RULE in r.facts]  # older records do not say
    rows = [{"rule": "as run", "passes": sum(len(r.warmup_tok_s) for r in kept) / len(kept) if kept else 0.0,
             "by_rule": sum(w in ("rule", "prior") for w in said) / len(said) if said else None,
             "ran_out": 0, "restarts": len(kept)}]
    for name, rule in RULES.items():
        pool = NoisePool()
        spent, by_rule, ran_out = [], 0, 0
        for r in kept:
            series = [*r.warmup_tok_s, *r.passes_tok_s]
            prior = pool.prior()
            n, why = 0, rule([], prior)
            while why is None and n < len(series):
                n += 1
                why = rule(series[:n], prior)
            ran_out += why is None
            spent.append(n)
            by_rule += why not in (None, "cap")
            rounds = r.facts.get(F.PASS_ROUNDS, 1)
            pool.add(r.passes_tok_s if len(r.passes_tok_s) >= 2 else r.warmup_tok_s[1:], rounds)
        rows.append({"rule": name, "passes": sum(spent) / len(spent) if spent else 0.0,
                     "by_rule": by_rule / len(kept) if kept else 0.0, "ran_out": ran_out, "restarts": len(kept)})
    return rows


def _process(rng: random.Random, sigma: float, ramp: int) -> tuple[Callable[..., float], int]:
    """A synthetic process: ``pass_at(j, rounds)`` (tok/s relative to steady state) and the ramp's length."""
    first = rng.uniform(0.0, 0.8)
    start = rng.uniform(0.2, 0.5)

    def factor(j: int) -> float:
        f = start ** (1.0 - j / ramp) if j < ramp else 1.0
        return f * (1.0 - first if j == 0 else 1.0)

    def pass_at(j: int, rounds: int = 1) -> float:
        mean = rounds / sum(1.0 / factor(j + k) for k in range(rounds))  # time-weighted over its rounds
        return mean * math.exp(rng.gauss(0.0, sigma / math.sqrt(rounds)))

    return pass_at, ramp


def _prior(rng: random.Random, sigma: float) -> Any:
    pool = NoisePool()
    for _ in range(PRIOR_PROCESSES):
        pool.add([math.exp(rng.gauss(0.0, sigma / math.sqrt(TIMED_ROUNDS))) for _ in range(TIMED_PASSES)],
                 TIMED_ROUNDS)
    return pool.prior()


def synthetic(processes: int = 4000, seed: int = 0, sigmas: Sequence[float] = (0.03, 0.08, 0.15),
              ramps: Sequence[int] = (0, 2, 3, 4, 5)) -> list[dict[str, Any]]:
    """Rows per scenario (``sigma``, ramp length) and rule: passes, false-warm share, cap-inside share, bias (%)."""
    rows = []
    for sigma in sigmas:
        for ramp in ramps:
            for name, rule in RULES.items():
                rng = random.Random(f"{seed}/{sigma}/{ramp}")  # every rule sees the same processes
                spent, inside, cap_inside, bias = 0, 0, 0, 0.0
                for _ in range(processes):
                    pass_at, length = _process(rng, sigma, ramp)
                    prior = _prior(rng, sigma)
                    warm: list[float] = []
                    draws = [pass_at(j) for j in range(8)]  # the same warm-up draws whatever the rule
                    while (why := rule(warm, prior)) is None:
                        warm.append(draws[len(warm)])
                    n = len(warm)
                    spent += n
                    if n < length:
                        inside += why != "cap"
                        cap_inside += why == "cap"
                    timed = [pass_at(n + TIMED_ROUNDS * i, TIMED_ROUNDS) for i in range(TIMED_PASSES)]
                    bias += sum(timed) / len(timed) - 1.0
                rows.append({"sigma": sigma, "ramp": ramp, "rule": name, "passes": spent / processes,
                             "inside": inside / processes if ramp else None,
                             "cap_inside": cap_inside / processes if ramp else None,
                             "bias": 100 * bias / processes})
    return rows


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(prog="python -m autotune.bench.warmup", description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=count(1, 10_000_000), default=4000, help="synthetic processes per scenario and rule")
    parser.add_argument("--seed", type=seed_number, default=0)
    parser.add_argument("--data", type=Path, default=DATA, help="the recorded series (JSON)")
    parser.add_argument("--study", help="replay the rules on this study's restarts instead (with --storage)")
    parser.add_argument("--storage", help="the study's Optuna storage URL, e.g. sqlite:///path/optuna.db")
    args = parser.parse_args(argv)
    if args.study is not None or args.storage is not None:
        if args.study is None or args.storage is None:
            parser.error("--study and --storage go together: name the study and its storage URL")
        from autotune.store.ledger import load

        rows = replay_study(load(args.study, args.storage).restarts_spent())
        print(f"Warm-up rules replayed on study {args.study}'s restarts ({rows[0]['restarts']} with warm-up "
              "values; a rule that wants more passes than ran reads the timed passes):\n")
        print(_table(["rule", "warm-up passes", "ended by the rule", "series ran out"],
                     [[r["rule"], f"{r['passes']:.2f}", "not recorded" if r["by_rule"] is None else _pct(r["by_rule"]),
                       "-" if r["rule"] == "as run" else str(r["ran_out"])] for r in rows]))
        return 0
    data = json.loads(args.data.read_text())
    print("Recorded series (cap 4; the prior pooled from the restarts before each):\n")
    print(_table(["series", "rule", "warm-up passes", "ended by the rule", "leak (mean)", "leak (worst)"],
                 [[r["set"], r["rule"], f"{r['passes']:.2f}", _pct(r["by_rule"]),
                   "-" if r["leak"] is None else f"{r['leak']:+.1f}%",
                   "-" if r["leak_min"] is None else f"{r['leak_min']:+.1f}%"] for r in recorded(data)]))
    print(f"\nSynthetic processes ({args.processes} per row, seed {args.seed}; ramp 0 = no ramp, only a slow "
          "first pass):\n")
    print(_table(["sigma", "ramp", "rule", "warm-up passes", "false warm", "cap inside ramp", "timed bias"],
                 [[f"{r['sigma']:.2f}", str(r["ramp"]), r["rule"], f"{r['passes']:.2f}", _pct(r["inside"]),
                   _pct(r["cap_inside"]), f"{r['bias']:+.2f}%"]
                  for r in synthetic(args.processes, args.seed)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The memory guard end to end on the simulator's unified-memory GB10 (issue 20, item 8).

For each seed, the same gb10 study (``search_spaces/gb10.yaml``, the simulator's gb10/moe profile, the same seed
and budget) runs three times:

* **plain**: without unified-memory effects (``engine.unified_memory: false``): the reference winner;
* **guarded**: with them and the default floor: configurations whose graphs push MemAvailable under the floor are
  killed by the real :class:`~autotune.machine.MemoryGuard` and their restarts fail with the figures;
* **unguarded**: with them and ``engine.memory_floor_gib: 0``: the first such start drives MemAvailable under
  the level at which the simulated host stops, and the study ends with "host wedged".

``python -m autotune.bench.memory`` (``make bench-memory``) prints one line per seed and the counts: unguarded
studies that wedged, guarded ones that completed, guarded winners equal to the plain winner, guard trips, and the
simulated seconds the settles waited. Throughput does not depend on the host, so a guard that only removes
configurations that cannot run safely should leave the winner where it was, unless the plain winner is itself
unsafe: its start drives MemAvailable under the guard's floor (ground truth from the simulated host, read only to
score). The winners are compared on the seeds whose plain winner is safe; the others are counted apart, with the
lowest MemAvailable their plain winner reaches. It exits 1 when a guarded study did not complete, an unguarded
one did not wedge, or a guarded winner differs from a safe plain winner.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.bench._args import BenchParser, count
from autotune.config.space import SearchSpace, load_space
from autotune.engines.sim import HostWedged, SimEngine
from autotune.core.failure import FailureKind, kind_of
from autotune.core.records import RestartResult

__all__ = ["DEFAULT_BUDGET", "DEFAULT_SEEDS", "VARIANTS", "main", "run_seed", "run_variant"]

SPACE_FILE = "search_spaces/gb10.yaml"
#: The three runs per seed and their engine options.
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {"unified_memory": False},
    "guarded": {"unified_memory": True},
    "unguarded": {"unified_memory": True, "memory_floor_gib": 0},
}
DEFAULT_SEEDS = 5
#: Winners whose true throughputs are this close are ties: the landscape has several configurations that resolve
#: alike (on gb10, speculation turns FULL modes into PIECEWISE), and which one a study names among them is chance.
TIE = 0.01
DEFAULT_BUDGET = 60


def run_variant(space: SearchSpace, variant: str, seed: int, budget: int) -> dict[str, Any]:
    """One study: ``{"wedged": reason | None, "winner": label | None, "trips": n, "settle_s": s, "restarts": n}``;
    with a winner also its ground truth: ``true_tok_s``, ``lowest_gib`` (the lowest MemAvailable its start reaches on
    the simulated host) and ``safe`` (at or above the guard's floor)."""
    from autotune.report import build_report
    from autotune.study import StudyOptions, run_study

    engine = SimEngine(cache_dir=None, profile="gb10", model_profile="moe", **VARIANTS[variant])
    results: list[RestartResult] = []
    tripped: set[str] = set()
    settle_s = 0.0
    real = engine.run_restart

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal settle_s
        result = real(*args, **kwargs)
        results.append(result)
        if kind_of(result) is FailureKind.GUARD:
            tripped.add(args[0].label())
        settle_s += float(result.facts.get("settle_wait_s", 0.0))
        return result

    # The benchmark counts this engine's restarts by wrapping its method on the instance; mypy refuses any
    # assignment to a method.
    engine.run_restart = counted  # type: ignore[method-assign]
    out: dict[str, Any] = {"wedged": None, "winner": None}
    with tempfile.TemporaryDirectory(prefix="autotune-bench-memory-") as workdir:
        options = StudyOptions(study_name=f"bench-memory-{variant}-{seed}", storage="memory", workdir=workdir,
                               trials=budget, budget_restarts=budget, seed=seed)
        try:
            report = build_report(run_study(space, engine, options))
        except HostWedged as exc:
            out["wedged"] = str(exc)
        else:
            if report.winner is not None:
                config = report.winner.config
                out["winner"] = config.label()
                # Ground truth (read only here, to score): the winner's noiseless throughput, and whether it
                # would run safely on the host (the need the engine's own plan puts on it).
                truth = SimEngine(cache_dir=None, profile="gb10", model_profile="moe", unified_memory=True)
                out["true_tok_s"] = truth.true_throughput(config, space.workload)
                out["lowest_gib"] = truth.true_lowest_available_gib(config)
                out["safe"] = out["lowest_gib"] is not None and out["lowest_gib"] >= (truth.memory_floor_gib() or 0.0)
    out["trips"] = sum(1 for r in results if kind_of(r) is FailureKind.GUARD)
    out["tripped"] = sorted(tripped)
    out["restarts"] = len(results)
    out["settle_s"] = settle_s
    return out


def run_seed(seed: int, budget: int = DEFAULT_BUDGET, root: str | Path = ".") -> dict[str, dict[str, Any]]:
    """The three variants of one seed."""
    space = load_space(Path(root) / SPACE_FILE)
    return {variant: run_variant(space, variant, seed, budget) for variant in VARIANTS}


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(prog="python -m autotune.bench.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=count(1, 10_000), default=DEFAULT_SEEDS, help="seeds 0..N-1 (default: %(default)s)")
    parser.add_argument("--budget", type=count(1, 1_000_000), default=DEFAULT_BUDGET,
                        help="engine starts per study (default: %(default)s)")
    parser.add_argument("--root", default=".", help="directory search_spaces/ is relative to")
    args = parser.parse_args(argv)
    wedged = completed = safe = same = equal = trips = 0
    settle_s = 0.0
    unsafe: list[str] = []
    for seed in range(args.seeds):
        runs = run_seed(seed, args.budget, args.root)
        plain, guarded, unguarded = runs["plain"], runs["guarded"], runs["unguarded"]
        wedged += unguarded["wedged"] is not None
        completed += guarded["wedged"] is None and guarded["winner"] is not None
        trips += guarded["trips"]
        settle_s += guarded["settle_s"]
        if plain.get("safe"):
            safe += 1
            same += guarded["winner"] is not None and guarded["winner"] == plain["winner"]
            equal += bool(guarded.get("true_tok_s") and plain.get("true_tok_s")
                          and guarded["true_tok_s"] >= (1.0 - TIE) * plain["true_tok_s"])
            verdict = "the same" if guarded["winner"] == plain["winner"] else "DIFFERENT"
        else:
            unsafe.append(f"{plain.get('lowest_gib') or 0:.1f}")
            verdict = f"plain winner unsafe: MemAvailable {plain.get('lowest_gib') or 0:.1f} GiB, under the floor"
        print(f"seed {seed}: plain winner {plain['winner']} ({plain.get('true_tok_s') or 0:.0f} true tok/s); guarded "
              f"winner {guarded['winner']} ({guarded.get('true_tok_s') or 0:.0f} true tok/s) [{verdict}] "
              f"({guarded['trips']} guard trips in {guarded['restarts']} restarts, settles waited "
              f"{guarded['settle_s']:.0f} simulated s); unguarded "
              f"{'wedged after ' + str(unguarded['restarts']) + ' restarts' if unguarded['wedged'] else 'completed'}")
    n = args.seeds
    print(f"unguarded studies that wedged the host: {wedged}/{n}")
    print(f"guarded studies that completed: {completed}/{n}")
    print(f"guarded winner = winner without unified-memory effects, where that winner runs safely on the host: "
          f"{same}/{safe} the same configuration, {equal}/{safe} as fast by ground truth (within {TIE:.0%})")
    print(f"plain winners that would go under the guard's floor (no guarded study can name them): {len(unsafe)}/{n}"
          + (f" (lowest MemAvailable {', '.join(unsafe)} GiB)" if unsafe else ""))
    print(f"guard trips: {trips} (mean {trips / max(n, 1):.1f} a study); settle waits: {settle_s:.0f} simulated s")
    return 0 if completed == n and wedged == n and same == safe else 1


if __name__ == "__main__":
    sys.exit(main())

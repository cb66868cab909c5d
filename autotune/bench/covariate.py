"""``python -m autotune.bench.covariate``: would the engine's start-up time sharpen a paired round (issue 41, item 6)?

Issue 41 saw restarts whose engine took longer to initialise run slower (r = -0.78 over 16 H100 restarts): init is
host-CPU work, as the engine's main thread is. A covariate adjustment (CUPED) would use that only if it explains
the variance verification actually has: the log ratio of a round's two restarts, where the machine's level mostly
cancels. This measures that correlation, within rounds, on

* the verification rounds recorded on real GPUs under ``docs/measurements/`` (each challenger against the baseline
  restart of its round, both warm and with their start-up seconds; centred per (study, challenger), since a
  configuration's own start-up cost and speed are not the machine's), and
* the drifting machines fitted from them (:data:`autotune.engines.drift.PRESETS`, with their init coupling), rounds
  of two restarts 36 s apart as in the replay's drift scenario.

A CUPED adjustment removes at most the squared correlation of the variance; ``autotune`` does not adjust by start-up
time while that stays small (docs/benchmarks.md, "Verification on a drifting machine").
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import sys
from collections.abc import Sequence

import numpy as np

from autotune.records import decode
from autotune.core.records import RestartResult
from autotune.engines.drift import PRESETS, DriftScenario

__all__ = ["main", "model_pairs", "recorded_pairs"]

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "measurements"))


def recorded_pairs(root: str = ROOT) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """``(study, challenger key) -> [(d log start-up s, d log throughput)]`` over the recorded verification rounds."""
    import optuna

    from autotune.store import ledger as L
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    seen: set[tuple[str, str, str, float]] = set()
    for db in sorted(glob.glob(os.path.join(root, "**", "optuna.db"), recursive=True)):
        url = "sqlite:///" + db
        for name in L.study_names(url):
            try:
                led = L.load(name, url)
            except L.LedgerError:
                continue
            verification, rounds = led.verification(), led.verify_rounds()
            if verification is None or not rounds:
                continue
            base = verification.baseline.candidate.config.key()
            for rnd, by_key in rounds.items():
                runs = {k: [r for r in (decode(RestartResult, d) for d in ds)
                            if r.ok and not r.cold and r.value and r.startup_s] for k, ds in by_key.items()}
                if not runs.get(base):
                    continue
                b = runs[base][0]
                for key, rs in runs.items():
                    for r in rs if key != base else ():
                        ident = (name, str(rnd), key, round(float(r.value or 0.0), 4))  # a study copied twice
                        if ident in seen:
                            continue
                        seen.add(ident)
                        out.setdefault((name, key), []).append(
                            (math.log(r.startup_s) - math.log(b.startup_s),  # type: ignore[arg-type]
                             math.log(r.value) - math.log(b.value)))  # type: ignore[arg-type]
    return out


def _centred(series: Sequence[Sequence[tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray, int]:
    xs: list[float] = []
    ys: list[float] = []
    kept = 0
    for pairs in series:
        if len(pairs) < 2:
            continue
        kept += 1
        x = np.array([p[0] for p in pairs])
        y = np.array([p[1] for p in pairs])
        xs += list(x - x.mean())
        ys += list(y - y.mean())
    return np.array(xs), np.array(ys), kept


def model_pairs(preset: str, studies: int = 200, rounds: int = 10, seed: int = 0) -> list[list[tuple[float, float]]]:
    """Rounds of a 1.13x challenger and the baseline, 36 s apart, on the preset's machine; one list per study."""
    out = []
    for s in range(studies):
        sc = DriftScenario({"b": 3000.0, "w": 3390.0}, PRESETS[preset], [seed, s], timed_s=10.0, n_passes=2,
                           restart_s=36.0, init_s=15.0)
        t, pairs = 0.0, []
        for _ in range(rounds):
            w, b = sc.draw("w", t), sc.draw("b", t + 36.0)
            t += 72.0
            pairs.append((math.log(w.init_s) - math.log(b.init_s),  # type: ignore[arg-type]
                          math.log(w.value) - math.log(b.value)))
        out.append(pairs)
    return out


def _line(what: str, series: Sequence[Sequence[tuple[float, float]]]) -> str:
    x, y, kept = _centred(series)
    n = len(x)
    if n < 4:
        return f"{what}: {n} within-round pairs: too few to say"
    r = float(np.corrcoef(x, y)[0, 1])
    df = n - kept - 1
    from scipy import stats

    t = r * math.sqrt(df / max(1e-12, 1.0 - r * r))
    p = 2.0 * float(stats.t.sf(abs(t), df))
    return (f"{what}: {n} within-round pairs in {kept} series; corr(d log start-up, d log throughput) = {r:+.2f} "
            f"(p = {p:.2f}), at most {100 * r * r:.1f}% of the rounds' variance to remove")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.bench.covariate", description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=ROOT, help="where the recorded studies are (default: docs/measurements)")
    args = parser.parse_args(argv)
    recorded = recorded_pairs(args.root)
    names = ", ".join(f"{name} ({len(p)})" for (name, _), p in sorted(recorded.items()))
    sys.stdout.write(_line(f"recorded GPU rounds [{names or 'none'}]", list(recorded.values())) + "\n")
    for preset in PRESETS:
        sys.stdout.write(_line(f"drift preset {preset}, 200 studies x 10 rounds", model_pairs(preset)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

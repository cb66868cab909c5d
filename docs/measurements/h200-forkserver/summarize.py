"""Summary of the forkserver-vs-spawn restarts in this folder (run from here: python summarize.py).

Warm restarts only (phase "warm"); the cold start and the first restart of each forkserver host are listed but
not pooled. Ratios are of geometric means with a Welch t-interval on the logs (95%).
"""

import json
import statistics

import numpy as np
from scipy import stats

rows = []
for call, name in ((1, "forkserver.jsonl"), (2, "forkserver2.jsonl")):
    rows += [dict(json.loads(line), call=call) for line in open(name)]
for r in rows:
    print(r["call"], r["phase"], r["index"], r["method"], r["status"], "cold" if r["cold"] else "warm",
          f"ready {r['startup_s']:.1f} s", f"wall {r['wall_s']:.1f} s", f"{r['value_tok_s']:.1f} tok/s",
          f"preloaded={r['preloaded']}")
warm = [r for r in rows if r["phase"] == "warm" and r["status"] == "ok"]


def ratio(a: np.ndarray, b: np.ndarray) -> str:
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    half = stats.t.ppf(0.975, df) * np.sqrt(va + vb)
    d = la.mean() - lb.mean()
    return f"{np.exp(d):.3f} [{np.exp(d - half):.3f}, {np.exp(d + half):.3f}] (Welch df {df:.1f})"


ready = {m: np.array([r["startup_s"] for r in warm if r["method"] == m]) for m in ("spawn", "forkserver")}
tok = {m: np.array([r["value_tok_s"] for r in warm if r["method"] == m]) for m in ("spawn", "forkserver")}
for m in ("spawn", "forkserver"):
    print(f"{m:10} n={len(ready[m])} ready median {statistics.median(ready[m]):.1f} s "
          f"({ready[m].min():.1f}-{ready[m].max():.1f}); tok/s median {statistics.median(tok[m]):.1f} "
          f"({tok[m].min():.1f}-{tok[m].max():.1f}), CV {tok[m].std(ddof=1) / tok[m].mean():.3f}")
print("ready time forkserver/spawn, ratio of medians:", round(statistics.median(ready["forkserver"])
                                                              / statistics.median(ready["spawn"]), 3))
print("ready time forkserver/spawn, geometric means, 95% CI:", ratio(ready["forkserver"], ready["spawn"]))
print("throughput forkserver/spawn, geometric means, 95% CI:", ratio(tok["forkserver"], tok["spawn"]))
print("throughput Mann-Whitney U p:", round(stats.mannwhitneyu(tok["forkserver"], tok["spawn"]).pvalue, 3))

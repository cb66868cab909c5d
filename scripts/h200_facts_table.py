"""Print each restart's memory, KV and cost facts from a ``report --json`` file, one line per restart.

Usage: python3 scripts/h200_facts_table.py REPORT.json

The sampling cost column is the memory guard's CPU seconds over the restart's wall seconds (issue 20 asks for under
1%); the KV columns are what vLLM's start-up log said (autotune.engines.vllm._kvfacts).
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    report = json.load(open(path))
    cols = ("trial", "config", "r", "status", "cold", "wall_s", "guard_cpu_s", "cost_%", "samples", "kv_tokens",
            "kv_gib", "graph_est_gib", "graph_pool_gib", "capture_s", "memavail_min", "cached", "guard")
    print("  ".join(cols))
    costs = []
    for trial in report.get("search_trials") or []:
        for i, r in enumerate(trial.get("restarts") or []):
            f = r.get("facts") or {}
            wall, cpu = r.get("wall_s"), f.get("memory_guard_cpu_s")
            cost = None if not wall or cpu is None else 100.0 * cpu / wall
            if cost is not None:
                costs.append(cost)
            row = (trial.get("trial", trial.get("number")), trial.get("label"), i, r.get("status"), r.get("cold"), _n(wall), _n(cpu, 4),
                   _n(cost, 3), f.get("memory_samples"), f.get("kv_tokens"), _n(f.get("kv_gib")),
                   _n(f.get("graph_memory_gib")), _n(f.get("graph_pool_gib")), _n(f.get("vllm_capture_s")),
                   _n(f.get("mem_available_min_gib")), _n(f.get("cached_gib")), f.get("memory_guard") or "")
            print("  ".join(str(x) for x in row))
            if r.get("error"):
                print("    error:", r["error"])
    if costs:
        print(f"guard sampling cost: max {max(costs):.3f}% mean {sum(costs) / len(costs):.3f}% of restart wall time "
              f"over {len(costs)} restarts")
    return 0


def _n(x: object, digits: int = 2) -> str:
    return "-" if x is None else f"{float(x):.{digits}f}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

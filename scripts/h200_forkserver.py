"""Ready time and throughput of the vllm engine's restarts: forkserver against spawn, on one configuration.

Runs autotune's own ``vllm`` engine (the code a study runs), two engines over one study-local cache: one with
``start_method=forkserver`` (the default), one with ``start_method=spawn``. A first forked restart fills the
compile cache and starts the forkserver host (it pays the one vLLM import of the host's lifetime and, with an
empty cache, the compile: phase "first", reported apart, as a study records a cold start apart); then ROUNDS
rounds of one spawned and one forked warm restart, the order alternating each round (ABBA) so that drift
favours neither. One JSON line per restart goes to --out as soon as it finishes; a table of medians is printed
last. Ctrl-C (SIGINT) stops it early with the table of what finished.

Usage (repository root as the working directory, vLLM on the path):
  python3 scripts/h200_forkserver.py --space search_spaces/h200-dummy.yaml --rounds 4 --out results.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from autotune.engines import make_engine
from autotune.config.space import load_space


def _row(result, method: str, phase: str, index: int) -> dict:
    return {
        "phase": phase, "index": index, "method": method, "recorded_method": result.start_method,
        "status": result.status, "cold": result.cold, "startup_s": result.startup_s, "wall_s": result.wall_s,
        "value_tok_s": result.value, "passes_tok_s": list(result.passes_tok_s),
        "warmup_tok_s": list(result.warmup_tok_s), "error": result.error, "log_path": result.log_path,
        "preloaded": _preloaded(result.log_path),
    }


def _preloaded(log_path: str | None) -> object:
    """What the ready marker says: whether a forked restart found vLLM already imported (``None``: spawned)."""
    if not log_path or not Path(log_path).exists():
        return None
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if line.startswith("AUTOTUNE_READY "):
            return json.loads(line[len("AUTOTUNE_READY "):]).get("preloaded")
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workdir", default="/tmp/forkserver-study")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    space = load_space(args.space)
    config = space.baseline()  # engine defaults, no speculation
    options = space.engine.options("vllm")
    engines = {method: make_engine("vllm", cache_dir=args.workdir, start_method=method, **options)
               for method in ("forkserver", "spawn")}
    # (No describe(): its probe imports vLLM in a fresh interpreter, 20 s of device time for facts env.txt has.)
    print(f"configuration: {config.label()} ({config.key()})  rounds: {args.rounds}",
          flush=True)
    rows: list[dict] = []
    out = open(args.out, "a")

    def run(method: str, phase: str, index: int) -> None:
        started = time.time()
        result = engines[method].run_restart(config, space.workload, restart=index, seed=space.workload.seed)
        row = _row(result, method, phase, index)
        row["clock_start"] = started
        rows.append(row)
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(f"{phase:5} {index} {method:10} {row['status']:7} cold={row['cold']!s:5} "
              f"startup {row['startup_s'] or float('nan'):6.1f} s  wall {row['wall_s'] or float('nan'):6.1f} s  "
              f"{row['value_tok_s'] or float('nan'):8.1f} tok/s  preloaded={row['preloaded']}  {row['error'] or ''}",
              flush=True)

    try:
        run("forkserver", "first", 0)
        for i in range(args.rounds):
            order = ("spawn", "forkserver") if i % 2 == 0 else ("forkserver", "spawn")
            for method in order:
                run(method, "warm", i)
    except KeyboardInterrupt:
        print("interrupted: the table covers the restarts that finished", flush=True)
    finally:
        for engine in engines.values():
            engine.close()
        out.close()

    print("\nmethod      n  ready s (median, min-max)    tok/s (median, min-max)")
    medians = {}
    for method in ("spawn", "forkserver"):
        ok = [r for r in rows if r["method"] == method and r["phase"] == "warm" and r["status"] == "ok"]
        if not ok:
            print(f"{method:10}  0")
            continue
        ready = [r["startup_s"] for r in ok]
        tok = [r["value_tok_s"] for r in ok]
        medians[method] = statistics.median(ready)
        print(f"{method:10} {len(ok):2}  {statistics.median(ready):6.1f} ({min(ready):.1f}-{max(ready):.1f})"
              f"          {statistics.median(tok):7.1f} ({min(tok):.1f}-{max(tok):.1f})")
    if len(medians) == 2:
        print(f"forkserver / spawn median ready time: {medians['forkserver'] / medians['spawn']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

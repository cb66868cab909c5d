#!/usr/bin/env python3
"""An engine wrapper for autotune's ``cmd`` engine: one restart per run, JSON in on stdin, JSON out on stdout.

Copy this file to wrap your own engine: replace :func:`run_engine` with code that starts your engine with
``llm_kwargs``, warms it up, times ``workload["timed_passes"]`` passes and reads back what it resolved. Here it
drives autotune's simulated vLLM, so the protocol can be tried (and tested) without a GPU::

    engine:
      name: cmd
      cmd: {command: [python, examples/cmd_engine_example.py, --profile, gb10, --model-profile, moe]}

Protocol (see ``autotune/engines/cmd.py``): stdin holds ``{"config", "llm_kwargs", "workload", "restart",
"seed"}``; the environment holds ``AUTOTUNE_RESTART``, ``AUTOTUNE_SEED`` and, when the study has one,
``AUTOTUNE_CACHE_DIR``. Log freely; the LAST stdout line must be the result object. Without
``AUTOTUNE_CACHE_DIR`` every start is cold, like a machine without a compile cache.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

# Run from a checkout without installing autotune: make the repository root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.engines.sim import SimEngine
from autotune.core.records import EngineConfig, Workload
from autotune.records import decode, encode


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The simulated engine's options (a real wrapper would take e.g. the path to its engine's Python)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="h200", help="simulated hardware: h200, gb10 or flat")
    parser.add_argument("--model-profile", default="dense", help="simulated model: dense or moe")
    parser.add_argument("--engine-version", default="0.26.0", help="simulated vLLM version")
    return parser.parse_args(argv)


def run_engine(request: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One restart of the engine for ``request``; returns the protocol's result object."""
    config = decode(EngineConfig, request["config"])
    workload = decode(Workload, request["workload"])
    cache_dir = os.environ.get("AUTOTUNE_CACHE_DIR")
    engine = SimEngine(cache_dir=None if cache_dir is None else str(Path(cache_dir) / "cmd-example"),
                       profile=args.profile, model_profile=args.model_profile, engine_version=args.engine_version)
    print(f"INFO starting simulated vLLM {args.engine_version} ({args.profile}/{args.model_profile}) "
          f"for {config.label()}", flush=True)
    result = engine.run_restart(config, workload, restart=int(request["restart"]), seed=int(request["seed"]))
    resolved = None if result.resolved is None else encode(result.resolved)
    for note in (result.resolved.notes if result.resolved else ()):
        print(note, file=sys.stderr, flush=True)
    if not result.ok:
        return {"status": "failed", "error": result.error or "engine failed", "resolved": resolved,
                "cold": result.cold}
    return {
        "status": "ok",
        "passes_tok_s": list(result.passes_tok_s),
        "warmup_tok_s": list(result.warmup_tok_s),
        "resolved": resolved,
        "accept_len": result.accept_len,
        "startup_s": result.startup_s,
        "cold": result.cold,
        # Where the restart's time went (optional): the simulator's phase facts under the protocol's names.
        "phases": {k.removeprefix("phase_").removesuffix("_s"): v for k, v in result.facts.items()
                   if k.startswith("phase_") and k.endswith("_s")},
    }


def main(argv: list[str] | None = None) -> int:
    """Read the request, run one restart, print the result as the last stdout line."""
    args = parse_args(argv)
    request = json.load(sys.stdin)
    print(f"INFO restart {os.environ.get('AUTOTUNE_RESTART')} seed {os.environ.get('AUTOTUNE_SEED')}", flush=True)
    print(json.dumps(run_engine(request, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

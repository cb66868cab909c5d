"""The fault-injection run: its space, its ``tune`` command and what its store holds, shared by the fault and
disk-full tests."""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from autotune.records import decode
from autotune.core.records import RestartResult

#: Real seconds per simulated engine second: a restart of the gb10 profile (150-200 simulated seconds, start-up
#: included) takes ~50-120 ms, so the kill delays (0-150 ms after a restart line) land anywhere in one.
TIME_SCALE = 0.0005
VERIFY_RESTARTS = 2
#: How long the cmd engine's helper process lives unless its process group is stopped: far longer than a run.
LINGER_S = 600
REPO = Path(__file__).resolve().parents[2]


def fault_space(tmp: Path) -> Path:
    """The space every fault run tunes (gb10 MoE, sped up by :data:`TIME_SCALE`; cmd runs the fault engine)."""
    space = {
        "name": "faults",
        "engine": {"name": "sim",
                   "sim": {"profile": "gb10", "model_profile": "moe", "time_scale": TIME_SCALE},
                   "cmd": {"command": [sys.executable, str(REPO / "tests" / "fault_engine.py"), str(LINGER_S),
                                       "--profile", "gb10", "--model-profile", "moe"]}},
        "engine_args": {"model": "Qwen/Qwen3-30B-A3B", "max_num_seqs": 4},
        "workload": {"num_prompts": 16, "input_len": 256, "output_len": 256, "concurrency": 4, "timed_passes": 2},
        "search": {"cudagraph_mode": ["PIECEWISE", "FULL_AND_PIECEWISE"],
                   "capture_sizes": {"tiny": [1, 2, 4, 8]},
                   "num_speculative_tokens": {"low": 0, "high": 4},
                   "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5}}},
    }
    path = tmp / "faults.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def fault_command(tmp: Path, engine: str) -> list[str]:
    # Two baselines and two enqueued trials make the whole search: the trial sequence does not depend on the
    # sampler, and without racing no decision depends on the order in which trials finish.
    return [sys.executable, "-m", "autotune", "tune", "--space", str(fault_space(tmp)), "--engine", engine,
            "--trials", "4", "--no-racing", "--restarts", "2", "--top-k", "2",
            "--verify-restarts", str(VERIFY_RESTARTS), "--seed", "0",
            "--enqueue", "cudagraph_mode=PIECEWISE,capture_sizes=tiny,num_speculative_tokens=4,draft=ngram",
            "--enqueue", "cudagraph_mode=FULL_AND_PIECEWISE,capture_sizes=tiny,num_speculative_tokens=0",
            "--storage", f"sqlite:///{tmp}/optuna.db", "--workdir", str(tmp / "work"), "--study", "faults",
            "--no-mlflow", "--json", str(tmp / "report.json")]


@dataclasses.dataclass
class Stored:
    """What the store holds: every restart, keyed by where it belongs, and the outcome if there is one."""

    restarts: Counter[tuple[Any, ...]]
    counted: dict[tuple[Any, ...], list[int]]
    outcome: dict[str, Any] | None


def read_stored(tmp: Path) -> Stored:
    """What a fault run's store holds: every restart, by where it belongs, and the outcome if there is one."""
    from autotune.store import ledger as _ledger
    from autotune.report._build import build_report

    ledger = _ledger.load("faults", f"sqlite:///{tmp}/optuna.db")
    restarts: Counter[tuple[Any, ...]] = Counter()
    counted: dict[tuple[Any, ...], list[int]] = {}

    def ident(r: Any) -> tuple[Any, ...]:
        return (r.restart, r.seed, r.status, r.cold, r.passes_tok_s)

    for record in ledger.trial_records():
        for r in record.restarts:
            restarts[("trial", record.number, *ident(r))] += 1
        if record.state == "COMPLETE" and not record.interrupted and record.duplicate_of is None:
            counted[("trial", record.number)] = [r.seed for r in record.restarts if r.ok and not r.cold]
    for key, rs in ledger.verify_progress().items():
        results = [decode(RestartResult, d) for d in rs]
        for r in results:
            restarts[("verify", key, *ident(r))] += 1
        counted[("verify", key)] = [r.seed for r in results if r.ok and not r.cold]
    outcome = None
    if ledger.has_verification():
        report = build_report(ledger).to_json()
        outcome = {"verdict": report["verdict"], "winner": report["winner"]["label"],
                   "verified": {e["label"]: e["values"] for e in report["verification"]["entries"]}}
    return Stored(restarts, counted, outcome)

"""Where a vLLM restart's time went: the runner's own clocks, split by the seconds vLLM's start-up log reports.

The runner says when it began running (wall clock), how long importing vLLM took, how long building the engine
took, and the seconds of its warm-up and timed passes. Building the engine is split into weight load, compile and
graph capture by the log lines :mod:`._kvfacts` already reads; what those lines do not cover (profiling, KV-cache
allocation, vLLM's own warm-up) is ``phase_other_startup_s``. Launch is the gap between the engine asking for the
process and the runner's first clock: a fork, a new interpreter, or a container's start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.core import facts as F
from autotune.engines.vllm._kvfacts import parse_kv_facts

__all__ = ["restart_phases"]


def restart_phases(reported: Mapping[str, Any] | None, log_text: str, launched_at: float | None) -> dict[str, Any]:
    """The restart's phase facts (and its warm-up passes and pass rounds) from the runner's ``phases`` report.

    Args:
        reported: The result's ``phases`` (``started_at``, ``import_s``, ``engine_s``, ``warmup_s``, ``timed_s``,
            ``warmup_passes``, ``pass_rounds``, ``warmup_rule``); ``None`` from an older runner: no facts.
        log_text: The restart's log, for vLLM's load, compile and capture seconds.
        launched_at: Wall-clock time the engine asked for the process (``None``: launch not known).
    """
    if not reported:
        return {}
    kv = parse_kv_facts(log_text)
    engine_s = reported.get("engine_s")
    known = [s for s in (kv.load_s, kv.compile_s, kv.capture_s) if s is not None]
    started_at = reported.get("started_at")
    values = {"launch": None if launched_at is None or started_at is None else float(started_at) - launched_at,
              "import": reported.get("import_s"), "load": kv.load_s, "compile": kv.compile_s,
              "capture": kv.capture_s,
              "other_startup": None if engine_s is None else float(engine_s) - sum(known),
              "warmup": reported.get("warmup_s"), "timed": reported.get("timed_s")}
    out: dict[str, Any] = F.phase_facts(**values)  # "import" is a keyword: the names go by mapping
    for key, name in ((F.WARMUP_PASSES, "warmup_passes"), (F.PASS_ROUNDS, "pass_rounds")):
        if reported.get(name) is not None:
            out[key] = int(reported[name])
    if isinstance(reported.get("warmup_rule"), str):
        out[F.WARMUP_RULE] = reported["warmup_rule"]
    return out

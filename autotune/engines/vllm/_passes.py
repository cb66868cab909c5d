"""The measurement both runner modes share: warm-up and timed passes on a running engine, their progress lines,
and the restart's result, built once (:func:`reply`) as the one typed message :class:`._wire.RestartReply`.

The runner's offline mode (:mod:`._runner`: vLLM's ``LLM`` API) and serve mode (:mod:`._serve`: ``vllm serve`` and
``vllm bench serve``) differ in how a pass runs; what a pass records, when warm-up ends, how long a timed pass is and
what the result says are the same, here. Imported from the runner's own directory (the runner runs by path in
vLLM's interpreter), so like the runner it imports only the standard library.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

# Run by path: the siblings (stdlib only) are imported from this directory.
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if TYPE_CHECKING:  # the type checker reads the same siblings under the package they sit in
    from autotune.engines.vllm import _dataset
    from autotune.engines.vllm._facts import _ACCEPTED, _DRAFTS, accept_length
    from autotune.engines.vllm._warmup import timed_rounds, warmup_stop
    from autotune.engines.vllm._wire import PASS, LevelReply, RestartReply
else:
    import _dataset  # noqa: E402
    from _facts import _ACCEPTED, _DRAFTS, accept_length  # noqa: E402
    from _warmup import timed_rounds, warmup_stop  # noqa: E402
    from _wire import PASS, LevelReply, RestartReply  # noqa: E402

#: A pass's record: kind, index, level, rounds, tokens, seconds, tok/s, the speculative counters around it and its
#: requests' timings (``emit_pass``).
PassRecord = dict[str, Any]


def emit(marker: str, payload: dict[str, Any]) -> None:
    """Print one marker line (flushed: the launcher reads the log while we run)."""
    print(f"{marker} {json.dumps(payload, default=str)}", flush=True)


def emit_pass(kind: str, index: int, concurrency: int | None, rounds: int, tokens: int, seconds: float,
              before: dict[str, Any], after: dict[str, Any], timings: list[Any]) -> dict[str, Any]:
    """One pass's record (offline or serve: the same shape), printed as a progress line and returned."""
    record = {
        "kind": kind,
        "index": index,
        "concurrency": concurrency,
        "rounds": rounds,
        "tokens": tokens,
        "seconds": seconds,
        "tok_s": tokens / seconds if seconds > 0 else 0.0,
        "accept_len": accept_length(before, after),
        "before": before,
        "counters": after,
        "timings": timings,
    }
    emit(PASS, _pass_line(record))
    return record


def _pass_line(record: dict[str, Any]) -> dict[str, Any]:
    # The marker line carries the pass's numbers, not every request's timings.
    return {k: v for k, v in record.items() if k not in ("before", "counters", "timings")}


def warm_up(passes: Any, workload: dict[str, Any], prior: Any = None) -> list[dict[str, Any]]:
    """Warm-up passes (one round each) until :func:`_warmup.warmup_stop` says the process is warm.

    ``passes`` is anything with ``run(kind, index) -> {"tok_s": ...}`` (:class:`Passes`, :class:`ServePasses`).
    ``prior`` is the request's ``warmup_noise`` (the study's noise prior; absent from older engines: the rule
    without it). The last pass records why warm-up stopped under ``"stop"``.

    At least ``warmup_passes`` run, at most ``max_warmup_passes``; with ``warmup_passes: 0`` none run.
    """
    minimum = int(workload.get("warmup_passes", 1))
    maximum = max(minimum, int(workload.get("max_warmup_passes", minimum)))
    done: list[dict[str, Any]] = []
    while (stop := warmup_stop([p["tok_s"] for p in done], minimum, maximum, prior)) is None:
        done.append(passes.run("warmup", len(done)))
    if done:
        done[-1]["stop"] = stop
    return done


def time_passes(passes: Any, workload: dict[str, Any], warmups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timed passes, each sized from the last warm-up pass to last about ``workload.pass_seconds``."""
    rounds = timed_rounds(float(workload.get("pass_seconds", 5.0)), warmups[-1]["seconds"] if warmups else None)
    return [passes.run("timed", i, rounds) for i in range(int(workload.get("timed_passes", 1)))]


def phases(times: dict[str, float], warmups: list[dict[str, Any]], timed: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the restart's time went by this process's clocks: ``times`` holds ``started_at`` (wall clock, for the
    engine's launch phase), ``import_s`` and ``startup_s``; warm-up and timed seconds are the passes' own."""
    return {**times, "warmup_s": sum(p["seconds"] for p in warmups), "timed_s": sum(p["seconds"] for p in timed),
            "warmup_passes": len(warmups), "pass_rounds": timed[-1].get("rounds", 1) if timed else None,
            "warmup_rule": warmups[-1].get("stop") if warmups else "none"}


def reply(startup_s: float, resolved: dict[str, Any] | None, device: dict[str, Any], warmups: list[PassRecord],
          timed: list[tuple[int | None, list[PassRecord]]], peak_gib: float | None,
          slo: dict[str, float] | None = None, times: dict[str, float] | None = None) -> RestartReply:
    """The restart's result: the one place the runner builds it, for offline and serve mode, one load level or several.

    ``timed`` is each level's timed passes: ``[(None, passes)]`` for one level, whose latency pools every request of
    the timed passes (warm-up excluded); ``[(1, passes), (8, passes)]`` for several, each level with its own
    latency and the restart's passes every level's in level order. The acceptance length pools the drafts of the
    timed passes (the warm-ups between levels left out).
    """
    levels: list[LevelReply] = []
    drafts = accepted = 0.0
    latency: dict[str, float] = {}
    for level, passes in timed:
        timings = [t for p in passes for t in p.get("timings") or ()]
        seconds = sum(p["seconds"] for p in passes)
        summary = _dataset.latency_summary(timings, seconds, slo or {}) if timings else {}
        # A figure nobody measured is left out: the message carries numbers only.
        latency = {k: float(v) for k, v in summary.items() if v is not None}
        if level is not None:
            levels.append(LevelReply(level, tuple(p["tok_s"] for p in passes), latency))
        if passes:
            first, last = passes[0]["before"], passes[-1]["counters"]
            drafts += last.get(_DRAFTS, 0.0) - first.get(_DRAFTS, 0.0)
            accepted += last.get(_ACCEPTED, 0.0) - first.get(_ACCEPTED, 0.0)
    every = [p for _, passes in timed for p in passes]
    return RestartReply(
        passes_tok_s=tuple(p["tok_s"] for p in every),
        warmup_tok_s=tuple(p["tok_s"] for p in warmups),
        passes_s=tuple(p["seconds"] for p in every),
        startup_s=startup_s,
        resolved=resolved,
        device=device,
        accept_len=1.0 + accepted / drafts if drafts > 0 else None,
        peak_memory_gib=peak_gib,
        tokens_per_pass=every[0]["tokens"] if every else None,
        latency={} if levels else latency,
        levels=tuple(levels),
        phases=phases(times or {}, warmups, every),
    )


def load_levels(workload: dict[str, Any]) -> list[int] | None:
    """The workload's load levels when it has several (``concurrency: [1, 8, 32]``), else ``None``."""
    levels = workload.get("concurrency")
    return [int(c) for c in levels] if isinstance(levels, list) and len(levels) > 1 else None


def measure_levels(make_passes: Any, levels: list[int], workload: dict[str, Any], prior: Any = None
                   ) -> tuple[list[PassRecord], list[tuple[int | None, list[PassRecord]]]]:
    """Warm up and time every load level in turn on the running engine: ``(warm-ups, [(level, timed passes)])``.

    Each level warms up until steady (a new level changes the batch shapes the engine runs) before its timed
    passes; ``make_passes(level)`` gives the pass runner for one level; ``prior`` is :func:`warm_up`'s.
    """
    warmups: list[PassRecord] = []
    timed: list[tuple[int | None, list[PassRecord]]] = []
    for level in levels:
        passes = make_passes(level)
        level_warmups = warm_up(passes, workload, prior)
        warmups += level_warmups
        timed.append((level, time_passes(passes, workload, level_warmups)))
    return warmups, timed


def is_text(workload: dict[str, Any]) -> bool:
    """True when the workload's prompts come from a dataset rather than synthetic token ids."""
    dataset = workload.get("dataset") or {}
    return dataset.get("source") not in (None, "synthetic")

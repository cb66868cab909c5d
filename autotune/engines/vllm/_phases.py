"""Where a vLLM restart's time went: the runner's own clocks, split by the seconds vLLM's start-up log reports.

The runner says when it began running (wall clock), how long importing vLLM took, how long building the engine
took, and the seconds of its warm-up and timed passes. Building the engine is split by vLLM's log: weight load,
compile and graph capture by the seconds their lines report (:mod:`._kvfacts`), and the stretches between them by
the lines' timestamps (vLLM 0.26.0 on an H200, ``docs/measurements/*/engine-logs.tar.gz``)::

    INFO 12-02 00:29:37 [api_utils.py:273] non-default args: {...}                      <- set-up starts
    INFO 12-02 00:30:05 [model_runner.py:305] Model loading took 1.65 GiB and 3.349608 seconds
    INFO 12-02 00:30:24 [monitor.py:53] torch.compile took 18.48 s in total
    INFO 12-02 00:30:26 [gpu_worker.py:560] Available KV cache memory: 60.77 GiB        <- profiling ends
    INFO 12-02 00:30:27 [model_runner.py:747] Graph capturing finished in 1 secs, took 0.08 GiB
    INFO 12-02 00:32:09 [jit_monitor.py:79] Kernel JIT monitor activated; ...
    INFO 12-02 00:32:10 [core.py:340] init engine (profile, create kv cache, warmup model) took 125.52 s

* set-up: first line to the load's start (the load line's time less its seconds);
* profiling: the load's end to ``Available KV cache memory``, less compile (and a draft model's load);
* kernel warm-up: ``Available KV cache memory`` to ``init engine ... took``, less capture (above: the 102 s after
  capture are the V2 model runner's post-capture run, Triton JIT-compiling into an empty cache).

What none of these covers (before vLLM's first line, after its ``init engine`` line) is ``phase_other_startup_s``.
Timestamps are whole seconds, so a stretch is good to about a second; when the stretches and the reported seconds
add up to more than the engine time, the stretches give way, so the phases always sum to the runner's engine time.
A log without these lines (another vLLM, the CPU build's different lines, no log) leaves the stretches out and
their time in "other start-up". Launch is the gap between the engine asking for the process and the runner's first
clock: a fork, a new interpreter, or a container's start.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Mapping
from typing import Any

from autotune.core import facts as F
from autotune.engines.vllm._kvfacts import KvFacts, parse_kv_facts

__all__ = ["StartupStretches", "restart_phases", "startup_stretches"]

#: A vLLM log line's time, after an optional ``(EngineCore pid=N)`` prefix: ``INFO 12-02 00:30:05 [file.py:305]``.
_STAMP = re.compile(r"^(?:\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ",
                    re.MULTILINE)
#: The load's end and its seconds: the whole model's line where vLLM prints one (both runners on the GPU), else the
#: weights' (the CPU build).
_LOADED = (re.compile(r"Model loading took [\d.,]+ GiB(?: memory)? and ([\d.,]+) seconds"),
           re.compile(r"Loading weights took ([\d.,]+) seconds"))
_KV_SIZED = re.compile(r"Available KV cache memory: |Explicitly set \([\d.]+/[\d.]+\) GiB for KV cache")
_INIT_DONE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ")


@dataclasses.dataclass(frozen=True)
class StartupStretches:
    """Seconds between vLLM's start-up lines (``None``: a line it needs is missing)."""

    setup_s: float | None = None
    profile_s: float | None = None
    kernel_warmup_s: float | None = None

    def named(self) -> dict[str, float]:
        return {k: v for k, v in (("setup", self.setup_s), ("profile", self.profile_s),
                                  ("kernel_warmup", self.kernel_warmup_s)) if v is not None}


def _stamp(line_start: str) -> datetime.datetime | None:
    m = _STAMP.match(line_start)
    if not m:
        return None
    month, day, hour, minute, second = (int(g) for g in m.groups())
    try:  # the log has no year: a leap year accepts 02-29, and a stretch across New Year reads negative (dropped)
        return datetime.datetime(2024, month, day, hour, minute, second)
    except ValueError:
        return None


def _line_at(text: str, pos: int) -> str:
    return text[text.rfind("\n", 0, pos) + 1:pos + 1]


def startup_stretches(log_text: str, kv: KvFacts | None = None) -> StartupStretches:
    """Set-up, profiling and kernel warm-up seconds from a start-up log's timestamps and reported seconds."""
    kv = kv or parse_kv_facts(log_text)
    first = next((t for m in _STAMP.finditer(log_text) if (t := _stamp(m.group(0))) is not None), None)
    loaded = _LOADED[0].search(log_text) or _LOADED[1].search(log_text)
    if first is None or loaded is None:
        return StartupStretches()
    loaded_at = _stamp(_line_at(log_text, loaded.start()))
    first_load_s = float(loaded.group(1).replace(",", ""))
    if loaded_at is None:
        return StartupStretches()
    setup = (loaded_at - first).total_seconds() - first_load_s
    # After the first load line come compile and any further model's load (a draft's): neither is profiling.
    later_loads = max(0.0, (kv.load_s or 0.0) - first_load_s)
    sized = _KV_SIZED.search(log_text, loaded.end())
    sized_at = None if sized is None else _stamp(_line_at(log_text, sized.start()))
    profile = None if sized_at is None else (sized_at - loaded_at).total_seconds() - (kv.compile_s or 0.0) - later_loads
    done = _INIT_DONE.search(log_text, sized.end()) if sized is not None else None
    done_at = None if done is None else _stamp(_line_at(log_text, done.start()))
    warmup = (None if done_at is None or sized_at is None
              else (done_at - sized_at).total_seconds() - (kv.capture_s or 0.0))
    return StartupStretches(*(None if v is None or v < -1.0 else max(0.0, v) for v in (setup, profile, warmup)))


def restart_phases(reported: Mapping[str, Any] | None, log_text: str, launched_at: float | None,
                   kv: KvFacts | None = None) -> dict[str, Any]:
    """The restart's phase facts (and its warm-up passes and pass rounds) from the runner's ``phases`` report.

    Args:
        reported: The result's ``phases`` (``started_at``, ``import_s``, ``engine_s``, ``warmup_s``, ``timed_s``,
            ``warmup_passes``, ``pass_rounds``, ``warmup_rule``); ``None`` from an older runner: no facts.
        log_text: The restart's log, for vLLM's load, compile and capture seconds.
        launched_at: Wall-clock time the engine asked for the process (``None``: launch not known).
        kv: The log's facts when the caller has parsed them already (:class:`._enginelog.EngineLog`).
    """
    if not reported:
        return {}
    kv = kv or parse_kv_facts(log_text)
    engine_s = reported.get("engine_s")
    reported_s = {"load": kv.load_s, "compile": kv.compile_s, "capture": kv.capture_s}
    stretches = startup_stretches(log_text, kv).named()
    other = None
    if engine_s is not None:
        other = float(engine_s) - sum(v for v in reported_s.values() if v is not None)
        # Whole-second timestamps can make the stretches overshoot the engine time by a second or two: they give
        # way (pro rata) before "other start-up" goes negative, so the phases still add up to the engine time.
        total = sum(stretches.values())
        if total > max(other, 0.0):
            keep = max(other, 0.0) / total
            stretches = {k: v * keep for k, v in stretches.items()}
        other -= sum(stretches.values())
    started_at = reported.get("started_at")
    values = {"launch": None if launched_at is None or started_at is None else float(started_at) - launched_at,
              "import": reported.get("import_s"), **reported_s, **stretches, "other_startup": other,
              "warmup": reported.get("warmup_s"), "timed": reported.get("timed_s")}
    out: dict[str, Any] = F.phase_facts(**values)  # "import" is a keyword: the names go by mapping
    for key, name in ((F.WARMUP_PASSES, "warmup_passes"), (F.PASS_ROUNDS, "pass_rounds")):
        if reported.get(name) is not None:
            out[key] = int(reported[name])
    if isinstance(reported.get("warmup_rule"), str):
        out[F.WARMUP_RULE] = reported["warmup_rule"]
    return out

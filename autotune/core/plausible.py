"""What an engine may say about one restart, beyond its throughput: plausible numbers only (issue 32).

A restart's phases, start-up time, latencies, memory and acceptance length feed the budget's prices, the SLO checks
and the report. An engine (a wrapper script, a log line parsed wrong, an old stored record) that says
``"load": 1e300`` would otherwise be believed: the budget check printed a 301-digit number of seconds. Like an
impossible throughput (:func:`autotune.core.records.throughput_problem`), such a number makes the restart a failed
restart with the reason, and the number itself is dropped, so nothing downstream prices or averages it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core import facts as F

__all__ = ["MAX_ACCEPT_LEN", "MAX_MEMORY_GIB", "MAX_PHASE_S", "MAX_TOK_S", "implausible", "plausible_facts",
           "throughput_problem"]

#: A restart phase (or the whole start-up) longer than a week is not a measurement.
MAX_PHASE_S = 7 * 86_400.0
#: A request latency, milliseconds: the same week.
MAX_LATENCY_MS = MAX_PHASE_S * 1000.0
#: Accelerator memory, GiB: a thousand times the largest machine's.
MAX_MEMORY_GIB = 1e6
#: Mean acceptance length: 1 + the accepted drafts per step, and no draft proposes more than a few dozen tokens.
MAX_ACCEPT_LEN = 1e3


def _bad(value: Any, limit: float) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not math.isfinite(value) or abs(value) > limit


def _phase_problem(key: str, value: Any) -> str | None:
    return f"an impossible {key}: {value:.3g} s (phases lie within {MAX_PHASE_S:.0f} s)" \
        if key in F.PHASES and _bad(value, MAX_PHASE_S) else None


def implausible(*, startup_s: Any, peak_memory_gib: Any, accept_len: Any, latency: Mapping[str, Any],
                facts: Mapping[str, Any]) -> str | None:
    """The first number an engine reported that cannot be a measurement, as ``an impossible NAME: VALUE``."""
    for key, value in facts.items():
        problem = _phase_problem(str(key), value)
        if problem is not None:
            return problem
    for name, value, limit, unit in (("startup_s", startup_s, MAX_PHASE_S, "s"),
                                     ("peak_memory_gib", peak_memory_gib, MAX_MEMORY_GIB, "GiB"),
                                     ("accept_len", accept_len, MAX_ACCEPT_LEN, "tokens")):
        if value is not None and _bad(value, limit):
            return f"an impossible {name}: {value:.3g} {unit} (above {limit:.3g})"
    for key, value in latency.items():
        if key.endswith("_ms") and _bad(value, MAX_LATENCY_MS):
            return f"an impossible latency {key}: {value:.3g} ms (above {MAX_LATENCY_MS:.3g})"
    return None


def plausible_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """``facts`` without the phases no restart can take (see :func:`implausible`)."""
    return {k: v for k, v in facts.items() if _phase_problem(str(k), v) is None}


#: Output tokens per second above this are a units bug or an overflow, not a measurement: it is orders of
#: magnitude above any single engine, and a value near float's limit turns every mean and ratio into inf.
MAX_TOK_S = 1e8


def throughput_problem(passes: Sequence[Any]) -> str | None:
    """Why per-pass throughputs cannot be a measurement (none, non-numeric, <= 0, non-finite, absurd), or ``None``."""
    if not passes:
        return "status ok without any timed pass"
    for i, raw in enumerate(passes):
        try:
            value = float(raw)
        except (TypeError, ValueError):
            return f"a non-numeric throughput for timed pass {i}: {raw!r}"
        if not math.isfinite(value):
            return f"a non-finite throughput for timed pass {i}: {value!r} tok/s"
        if value <= 0:
            return f"a non-positive throughput for timed pass {i}: {value!r} tok/s (throughput must be > 0)"
        if value > MAX_TOK_S:
            return f"an impossible throughput for timed pass {i}: {value:.3g} tok/s (above {MAX_TOK_S:.0e})"
    return None

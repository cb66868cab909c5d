"""One restart's record: :class:`RestartResult` (a fresh engine process: status, passes, resolved config, error),
its load levels (:class:`LevelResult`) and its status names (:class:`RestartStatus`). Public through
:mod:`autotune.core.records`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune.core._bounds import ERROR_CHARS, LOG_TAIL_CHARS, bound_text
from autotune.core.facts import FactValue, clean_facts
from autotune.core.failure import FailureKind
from autotune.core.plausible import implausible, plausible_facts, throughput_problem
from autotune.core.resolved import Resolved
from autotune.records import reader, record


class RestartStatus:
    """String constants for :attr:`RestartResult.status` (strings so they survive JSON unchanged)."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    ALL = (OK, FAILED, TIMEOUT)



@dataclasses.dataclass(frozen=True)
class LevelResult:
    """One load level of a multi-level restart: the level's timed passes and request latencies.

    Attributes:
        concurrency: Requests in flight at this level.
        passes_tok_s: Output tokens/s of each timed pass at this level.
        latency: Request latencies at this level (the keys of :attr:`RestartResult.latency`).
    """

    concurrency: int
    passes_tok_s: tuple[float, ...] = ()
    latency: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def tok_s(self) -> float | None:
        """The level's mean output tokens/s."""
        return sum(self.passes_tok_s) / len(self.passes_tok_s) if self.passes_tok_s else None


#: Fields added after restarts were first stored: left out at their default, so an older restart keeps its shape.
@record(omit_at_default=("passes_s", "levels", "score", "facts", "failure_kind"))
@dataclasses.dataclass(frozen=True)
class RestartResult:
    """One restart: a fresh engine process started, warmed up and timed.

    A failure is data, not an exception: ``status`` says what happened and ``error`` why.

    Attributes:
        status: One of :class:`RestartStatus` (``ok``, ``failed``, ``timeout``).
        restart: Restart index within its trial or verification round.
        seed: The restart's seed; configs are compared on matched seeds.
        passes_tok_s: Output tokens/s of each timed pass (warm-up excluded).
        passes_s: Seconds each timed pass lasted (empty when the engine does not say).
        warmup_tok_s: Output tokens/s of each warm-up pass (recorded, never counted).
        startup_s: Seconds from process start to engine ready.
        start_method: How the engine process was started (the ``vllm`` engine: ``forkserver`` or ``spawn``).
        wall_s: Engine wall time of the whole restart, start-up included (what a budget counts).
        resolved: What the engine ran (``None`` if it died before saying).
        accept_len: Mean acceptance length (1 + accepted drafts per step) when speculating.
        cold: True for the first start of a configuration (empty compile caches): recorded, not counted.
        peak_memory_gib: Peak accelerator memory, when known.
        error: One-line failure reason.
        log_path: Where the engine's log is, when there is one.
        log_tail: The last lines of the engine log on failure.
        latency: Request latencies over the timed passes, flat: ``ttft_p50_ms`` ... ``e2el_p99_ms`` (see
            :func:`latency_key`), ``request_throughput`` (requests/s), ``goodput`` (requests/s meeting every
            ``workload.slo`` limit, when there are limits) and ``requests``; empty when the engine does not say.
            With several load levels, the levels' combined figures (:func:`combine_latency`).
        levels: With several load levels, each level's passes and latency (``passes_tok_s`` then holds every
            level's timed passes in level order); empty for one level.
        score: The restart's value under the study's objective (:meth:`Workload.scored`); ``None`` leaves
            :attr:`value` to the mean output tok/s.
        facts: What the restart measured besides throughput, flat (memory, KV capacity, machine state, phases, the
            output check); keys are named in :mod:`autotune.core.facts`. Empty when the engine says nothing.
        failure_kind: Why it failed, when the engine knew (the memory guard, a lost restart); read it through
            :func:`autotune.core.failure.kind_of`, which also reads restarts stored without it.
    """

    status: str
    restart: int = 0
    seed: int = 0
    passes_tok_s: tuple[float, ...] = ()
    warmup_tok_s: tuple[float, ...] = ()
    passes_s: tuple[float, ...] = ()
    startup_s: float | None = None
    wall_s: float | None = None
    resolved: Resolved | None = None
    accept_len: float | None = None
    cold: bool = False
    peak_memory_gib: float | None = None
    error: str | None = None
    log_path: str | None = None
    log_tail: str | None = None
    start_method: str | None = None
    latency: Mapping[str, float] = dataclasses.field(default_factory=dict)
    levels: tuple[LevelResult, ...] = ()
    score: float | None = None
    facts: Mapping[str, FactValue] = dataclasses.field(default_factory=dict)
    failure_kind: FailureKind | None = None

    def __post_init__(self) -> None:
        # A phase, start-up, latency or memory no restart can have (core/plausible.py) is a failure too; the
        # absurd phase is dropped whatever the status, so no budget prices it.
        odd = implausible(startup_s=self.startup_s, peak_memory_gib=self.peak_memory_gib, accept_len=self.accept_len,
                          latency=self.latency, facts=dict(self.facts or {}))
        object.__setattr__(self, "facts", clean_facts(plausible_facts(dict(self.facts or {}))))
        # The engine's texts are bounded here, once, so no store or report holds a runaway log (core/_bounds.py).
        object.__setattr__(self, "log_tail", bound_text(self.log_tail, LOG_TAIL_CHARS, keep_end=True,
                                                        whole=self.log_path))
        object.__setattr__(self, "error", bound_text(self.error, ERROR_CHARS, whole=self.log_path))
        if self.status not in RestartStatus.ALL:
            raise ValueError(f"status must be one of {RestartStatus.ALL}, got {self.status!r}")
        if self.status == RestartStatus.OK:
            # The engine boundary: whatever an engine (or an old study record) says, an impossible throughput is a
            # failed restart with the reason, never a number that reaches a mean, a ratio or a verdict.
            problem = throughput_problem(self.passes_tok_s) or odd
            if problem is not None:
                object.__setattr__(self, "status", RestartStatus.FAILED)
                object.__setattr__(self, "error", f"engine reported {problem}")

    @property
    def ok(self) -> bool:
        return self.status == RestartStatus.OK and bool(self.passes_tok_s)

    @property
    def value(self) -> float | None:
        """The restart's value: its :attr:`score` under the study's objective, else the mean tok/s of its passes."""
        if not self.ok:
            return None
        if self.score is not None:
            return self.score
        return sum(self.passes_tok_s) / len(self.passes_tok_s)

    def measured(self) -> float:
        """:attr:`value` of a restart the caller knows is :attr:`ok` (every ok restart has one).

        Raises:
            ValueError: the restart failed, so it has no value.
        """
        value = self.value
        if value is None:
            raise ValueError(f"restart {self.restart} {self.status}: it has no value")
        return value

    @classmethod
    def failure(cls, status: str, error: str, **kwargs: Any) -> RestartResult:
        """A failed or timed-out restart with a one-line reason."""
        first_line = (error or "unknown error").strip().splitlines()[0] if error and error.strip() else "unknown error"
        return cls(status=status, error=first_line, **kwargs)


def _latency(value: Any) -> dict[str, Any]:
    # A figure an engine could not measure was stored as null by older engines: it is not a figure.
    return {str(k): v for k, v in dict(value or {}).items() if v is not None}


@reader(LevelResult)
def _read_level(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "latency": _latency(data.get("latency"))}


@reader(RestartResult)
def _read_restart(data: dict[str, Any]) -> dict[str, Any]:
    kind = data.get("failure_kind")
    facts = data.get("facts")
    return {**data, "latency": _latency(data.get("latency")),
            "facts": clean_facts(facts if isinstance(facts, Mapping) else None),
            # A kind this autotune does not know (a newer one's) reads as none: kind_of then reads the error line.
            "failure_kind": kind if kind in {k.value for k in FailureKind} else None}

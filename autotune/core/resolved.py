"""What an engine says it ran: the facts it reports after start-up.

* :class:`Resolved` - what the engine actually ran (capture mode and sizes, compile mode, other facts).
* :class:`Detail` - the fixed keys of :attr:`Resolved.details`.
* :class:`Difference` - one field it changed silently (found by :func:`autotune.core.records.config_differences`).

Re-exported by :mod:`autotune.core.records`, the home of the records a trial flows through.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune.core._bounds import bound_texts, bound_value
from autotune.records import reader

__all__ = ["Detail", "Difference", "Resolved"]


class Detail:
    """The fixed keys of :attr:`Resolved.details`: every engine reports a fact under the same name.

    The vLLM runner (``engines/vllm/_runner.py``) runs in vLLM's interpreter without autotune, so it spells
    these names itself; a test holds it to them.
    """

    #: The speculative method the engine runs (``ngram``, ``draft_model``, ...; ``None`` when off).
    SPEC_METHOD = "speculative_method"
    #: Draft tokens per step the engine runs (0 when off).
    NUM_SPECULATIVE_TOKENS = "num_speculative_tokens"
    #: The K schedule the engine runs (``[[start, end, K], ...]``; ``None``: none, so a configured one was ignored).
    SPEC_SCHEDULE = "num_speculative_tokens_per_batch_size"
    #: ``v1`` or ``v2``.
    MODEL_RUNNER = "model_runner"
    ASYNC_SCHEDULING = "async_scheduling"
    ATTENTION_BACKEND = "attention_backend"
    #: The capture mode a start-up log line switched to.
    LOG_CUDAGRAPH_MODE = "log_cudagraph_mode"
    #: Graph-capture progress per capture label.
    GRAPHS_CAPTURED = "graphs_captured"
    #: Where the resolved configuration was read from, when not the worker itself.
    RESOLVED_FROM = "resolved_from"
    #: Searched engine arguments as the engine runs them: name -> value (``max_num_seqs``, ...).
    ENGINE_ARGS = "engine_args"
    #: vLLM >= 0.34: the decode graphs it captures, in requests (each requests x (1+K) tokens).
    DECODE_CAPTURE_REQUESTS = "decode_cudagraph_capture_request_sizes"
    #: vLLM >= 0.34: the prefill graphs it captures, in tokens.
    PREFILL_CAPTURE_TOKENS = "prefill_cudagraph_capture_token_sizes"
    #: vLLM >= 0.34: the decode token budget (``None``: unset); decode graphs above it are not captured, while the
    #: request sizes it records still list them.
    DECODE_CAPTURE_MAX_TOKENS = "max_decode_cudagraph_capture_tokens"
    #: vLLM >= 0.34: PIECEWISE graphs are breakable (``use_breakable_cudagraph``).
    BREAKABLE_CUDAGRAPH = "use_breakable_cudagraph"
    #: Names older engines and stored studies used -> the fixed name.
    LEGACY = {"spec_method": SPEC_METHOD}

    @classmethod
    def normalise(cls, details: Mapping[str, Any]) -> dict[str, Any]:
        """``details`` under the fixed names (a legacy name gives way to the fixed one when both are there)."""
        out = {cls.LEGACY.get(k, k): v for k, v in details.items() if k in cls.LEGACY}
        out.update({k: v for k, v in details.items() if k not in cls.LEGACY})
        return out


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What the engine actually ran, read back after start-up.

    Attributes:
        cudagraph_mode: The mode the worker runs (``None`` if the engine did not say).
        cudagraph_capture_sizes: The capture sizes the worker captures (``None`` if unknown).
        compile_mode: The compilation level/mode (string, engine-specific).
        details: Other resolved facts (model runner, async scheduling, speculative method...).
        notes: Start-up log lines that changed the plan, verbatim.
    """

    cudagraph_mode: str | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    compile_mode: str | None = None
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # What the engine reports is bounded on its way in (core/_bounds.py): every copy of the record is then.
        object.__setattr__(self, "details", bound_value(dict(self.details or {})))
        object.__setattr__(self, "notes", bound_texts(self.notes))


@dataclasses.dataclass(frozen=True)
class Difference:
    """One field the engine changed silently: configured value vs resolved value."""

    field: str
    configured: Any
    resolved: Any

    def __str__(self) -> str:
        return f"{self.field}: configured {self.configured} -> resolved {self.resolved}"


@reader(Resolved)
def _read_resolved(data: dict[str, Any]) -> dict[str, Any]:
    # Details under their legacy names read under the fixed ones; a compile level stored as a number is its text.
    mode = data.get("compile_mode")
    return {**data, "details": Detail.normalise(data.get("details") or {}),
            "compile_mode": None if mode is None else str(mode)}

"""Capture-size choices (:class:`SizeOption`) and the ``compilation_config`` fields a choice becomes on an engine
that takes decode graphs in tokens (vLLM <= 0.33) or in requests (0.34+: :func:`capture_fields`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.config._models import DEFAULT
from autotune.core.capture import token_maximum_fields

__all__ = ["Infeasible", "SizeOption", "capture_fields"]

#: Modes that capture decode graphs (``default`` is vLLM's FULL_AND_PIECEWISE): where decode request counts apply.
_DECODE_GRAPH_MODES = (DEFAULT, "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


class Infeasible(Exception):
    """A suggested combination the engine would reject; the trial is pruned without starting the engine."""


@dataclasses.dataclass(frozen=True)
class SizeOption:
    """A capture-size choice: a fixed list, a generated list, or the engine default (``sizes=None``)."""

    name: str
    sizes: tuple[int, ...] | None = None
    pattern: str | None = None
    max: int | None = None
    #: ``tokens`` (``search.capture_sizes``: vLLM <= 0.33's unit) or ``requests`` (``search.decode_capture_requests``:
    #: 0.34's decode graphs, each captured as requests x (1+K) tokens).
    unit: str = "tokens"

    @property
    def max_only(self) -> bool:
        """An explicit maximum alone (``{max: N}``): the engine picks the sizes up to it."""
        return self.pattern is None and self.sizes is None and self.max is not None

    def resolve(self, k: int) -> list[int] | None:
        """The capture sizes (in :attr:`unit`) for ``k`` draft tokens; ``None`` means the engine default."""
        if self.pattern is None:
            return None if self.sizes is None else sorted(set(self.sizes))
        assert self.max is not None
        if self.pattern == "pow2":
            out, s = [], 1
            while s <= self.max:
                out.append(s)
                s *= 2
            return out
        if self.pattern == "step8":  # vLLM's own default shape: 1, 2, 4, then every 8
            out = [s for s in (1, 2, 4) if s <= self.max]
            out += list(range(8, self.max + 1, 8))
            return out
        # aligned: (1+K) x {1, 2, 4, ...}, so a batch of B sequences verifying K drafts fits a captured size.
        step, out, b = 1 + k, [], 1
        while step * b <= self.max:
            out.append(step * b)
            b *= 2
        return out or [step]



def capture_fields(option: SizeOption, k: int, mode: str, scheduled: bool, capture_unit: str) -> dict[str, Any]:
    """The ``compilation_config`` capture fields of one choice, in the engine's vocabulary (``capture_unit``:
    ``tokens`` for vLLM <= 0.33, ``requests`` for 0.34+).

    Token sizes on an engine that sets decode graphs in requests (vLLM >= 0.34) are written in its own fields
    where they mean the same: each size a whole number of requests of 1+K wherever decode graphs are captured.
    Otherwise they go in the deprecated token fields, which 0.34 still accepts, rounds up to whole requests
    and may drop graphs from: what it resolved is then audited as a silent change, as on 0.26. Request counts on
    an engine with token sizes are requests x (1+K) tokens, what 0.34 would capture for them.

    Raises:
        Infeasible: decode request counts with a mode that captures no decode graph (PIECEWISE, FULL).
    """
    q = 1 + k
    decode_graphs = mode in _DECODE_GRAPH_MODES
    if option.unit == "requests" and not decode_graphs:
        raise Infeasible(f"capture_sizes {option.name!r} sets decode graphs in requests, which cudagraph_mode "
                         f"{mode} does not capture (FULL_DECODE_ONLY and FULL_AND_PIECEWISE do)")
    requests_engine = capture_unit == "requests"
    if option.max_only:
        assert option.max is not None
        if option.unit == "tokens":
            # graphs up to M tokens, in the engine's own fields (0.34: a prefill maximum and a decode token budget)
            return token_maximum_fields(option.max, mode, requests_engine)
        if requests_engine:
            return {"max_decode_cudagraph_capture_requests": option.max}
        return {"max_cudagraph_capture_size": option.max * q}
    sizes = option.resolve(k)
    if sizes is None:
        return {}
    if option.unit == "requests":
        if requests_engine:
            return {"decode_cudagraph_capture_request_sizes": sizes}
        return {"cudagraph_capture_sizes": sorted({r * q for r in sizes})}
    if not requests_engine or scheduled or (decode_graphs and any(s % q for s in sizes)):
        return {"cudagraph_capture_sizes": sizes}
    out: dict[str, Any] = {}
    if decode_graphs:
        out["decode_cudagraph_capture_request_sizes"] = [s // q for s in sizes]
    if mode != "FULL_DECODE_ONLY":
        out["prefill_cudagraph_capture_token_sizes"] = sizes
    return out

"""What vLLM >= 0.34's capture fields mean, shared by the search (``config``), the export and recheck translation
(``engines/vllm/vocabulary``) and the audit (``core.records.config_differences``), so the three agree.

* :func:`token_maximum_fields`: an explicit token maximum (``{max: M}``: graphs up to M tokens) in a version's own
  fields.
* :func:`captured_decode_requests`: the uniform decode graphs vLLM 0.34's runner captures for the request sizes it
  records, within its decode token budget.
"""

from __future__ import annotations

import bisect
from typing import Any

__all__ = ["captured_decode_requests", "token_maximum_fields"]


def token_maximum_fields(largest: int, mode: str | None, requests_unit: bool) -> dict[str, Any]:
    """The ``compilation_config`` fields of an explicit token maximum ``largest`` at ``cudagraph_mode`` ``mode``
    (``None``/``default``: vLLM's default), on a vLLM whose decode graphs are set in requests (``requests_unit``,
    0.34+) or not.

    vLLM <= 0.33 has one field, ``max_cudagraph_capture_size``. vLLM 0.34 deprecates it (its legacy path drops every
    decode graph below one request of 1+K tokens, vLLM #54933) and says the same in its own fields: prefill graphs
    up to M tokens (``max_prefill_cudagraph_capture_tokens``, where the mode has prefill graphs) and decode graphs
    within a budget of M tokens (``max_decode_cudagraph_capture_tokens``: the same bound for every K and every
    query length of a K schedule; it also bounds the token sizes 0.34 records in PIECEWISE and FULL). An M below
    1+K still leaves no decode graph there, which the audit flags.
    """
    if not requests_unit:
        return {"max_cudagraph_capture_size": int(largest)}
    out: dict[str, Any] = {}
    if mode is None or str(mode).rsplit(".", 1)[-1].upper() != "FULL_DECODE_ONLY":
        out["max_prefill_cudagraph_capture_tokens"] = int(largest)
    out["max_decode_cudagraph_capture_tokens"] = int(largest)
    return out


def captured_decode_requests(requests: list[int], q: int, max_requests: int, max_tokens: int) -> list[int]:
    """The request counts of the uniform decode graphs vLLM >= 0.34 captures at query length ``q`` for the request
    sizes it records (``requests``: its resolved ``decode_cudagraph_capture_request_sizes``).

    vLLM's own ``decode_cudagraph_capture_shapes`` (0.34.0 ``config/compilation.py`` l. 54-68) as its runner calls it
    (``v1/worker/gpu/cudagraph_utils.py`` l. 337-341), with ``max_requests`` = ``max_num_seqs`` and ``max_tokens`` =
    ``decode_cudagraph_capture_max_tokens`` (``compilation.py`` l. 71-75: the recorded maximum within
    ``max_decode_cudagraph_capture_tokens``). A batch pads to the smallest graph holding it, so the first listed count
    above the limit is captured at the limit and larger ones are not captured at all.
    """
    limit = min(max_requests, max_tokens // q)
    if limit < 1:
        return []
    ordered = sorted(set(requests))
    reachable = ordered[: bisect.bisect_left(ordered, limit) + 1]
    return sorted({min(n, limit) for n in reachable})

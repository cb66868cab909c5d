"""The simulator's vLLM 0.34 profile: how 0.34.0 resolves CUDA-graph capture sizes, and what else it changed.

Ported from the 0.34.0 wheel (``vllm/config/vllm.py`` ``_set_cudagraph_sizes`` l. 2322-2556 and
``_split_cudagraph_capture_sizes`` l. 2558-2737; the grids of ``vllm/config/compilation.py`` l. 54-126), on a
platform that is not SM100 (the simulated H200 and GB10 are not), with one fixed K or a K schedule, without adaptive
verification's variable-length graphs. ``tests/data/vllm034/capture_sizes.py`` holds vLLM's own code, copied, and
``tests/engines/test_sim_v034.py`` holds this port to it.

What it means for a configuration:

* prefill graphs are token counts (``prefill_cudagraph_capture_token_sizes``), decode graphs request counts
  (``decode_cudagraph_capture_request_sizes``), each captured as requests x (1+K) tokens;
* the deprecated token fields still work: sizes are rounded up to whole requests of 1+K, and a size whose rounded
  count exceeds the list's largest size (or an explicit ``max_cudagraph_capture_size`` below 1+K) is dropped, so
  decode batches above the last kept graph run without one (vLLM #54933), with only the deprecation warning logged;
* mixing the deprecated and the new fields raises; so does a request count above its own maximum.

Other 0.34 rules (:func:`plan_rules`): Model Runner V1 is gone (no fallback: ``draft_model`` runs on V2 with async
scheduling), ``medusa`` and ``mlp_speculator`` are unknown methods, ``fly`` needs K >= 2, a K schedule is switched off
with a warning when ``data_parallel_size > 1`` (``config/vllm.py`` l. 1031-1048), and PIECEWISE graphs are breakable
(invented cost: :data:`BREAKABLE_PIECEWISE_SHARE`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["BREAKABLE_PIECEWISE_SHARE", "V034", "Capture", "Rejected034", "capture_v034", "decode_grid",
           "prefill_grid"]

#: The first version with split capture sizes and without Model Runner V1.
V034 = (0, 34, 0)
#: Invented: the share of a PIECEWISE replay's cost left with breakable graphs (one capture broken at attention
#: instead of one graph per FX split), which 0.34 uses for PIECEWISE unless ``use_breakable_cudagraph: false``.
BREAKABLE_PIECEWISE_SHARE = 0.6
#: The platform's default capture ceiling off SM100 (``config/vllm.py`` l. 2395-2397).
DEFAULT_MAX_GRAPH_SIZE = 512
_DRAFT_DECODE_METHODS = ("eagle", "eagle3", "mtp", "draft_model")
_NEW_FIELDS = ("prefill_cudagraph_capture_token_sizes", "max_prefill_cudagraph_capture_tokens",
               "decode_cudagraph_capture_request_sizes", "max_decode_cudagraph_capture_requests")
DEPRECATION = ("WARNING [vllm.py] cudagraph_capture_sizes and max_cudagraph_capture_size are deprecated. Set the token "
               "counts of prefill CUDA graphs with prefill_cudagraph_capture_token_sizes or "
               "max_prefill_cudagraph_capture_tokens, and the request counts of decode CUDA graphs with "
               "decode_cudagraph_capture_request_sizes or max_decode_cudagraph_capture_requests.")


class Rejected034(ValueError):
    """vLLM 0.34 raises at start-up (the sim turns it into its own ``Rejected``)."""


@dataclasses.dataclass(frozen=True)
class Capture:
    """What 0.34 captures: the mode, every graph's token count, the prefill token sizes, the decode request sizes it
    records, and the uniform decode graphs its runner captures from them (``graphs``: ``(requests, query length)``).

    ``decode`` is the list vLLM records (``decode_cudagraph_capture_request_sizes``); ``graphs`` are those the runner
    captures, within ``decode_cudagraph_capture_max_tokens`` (the recorded maximum within
    ``max_decode_cudagraph_capture_tokens``): a decode token budget below a listed count drops its graph while the
    record still lists it.
    """

    mode: str
    sizes: tuple[int, ...]
    prefill: tuple[int, ...]
    decode: tuple[int, ...]
    notes: tuple[str, ...] = ()
    graphs: tuple[tuple[int, int], ...] = ()
    #: ``max_decode_cudagraph_capture_tokens`` as resolved (``None``: unset; off SM100 nothing sets it).
    decode_budget: int | None = None


def _walk_grid(limit: int, step: Callable[[int], float]) -> list[int]:
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, step(size)))))
        size = (size // stride + 1) * stride
    return [*grid, limit] if limit else []


def prefill_grid(max_tokens: int, dense_head: bool = False) -> list[int]:
    """0.34's prefill token-count grid up to ``max_tokens`` (``compilation.py`` l. 89-99)."""
    grid = _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096)))
    if dense_head:
        grid = sorted({*grid, *(t for t in range(1, 33) if t < max_tokens)})
    return grid


def decode_grid(max_requests: int) -> list[int]:
    """0.34's decode request-count grid up to ``max_requests`` (``compilation.py`` l. 122-126)."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))


def _shapes(sizes: Sequence[int], query_lens: Mapping[int, int], max_tokens: int) -> list[tuple[int, int]]:
    # compilation.py l. 54-68: a batch pads to the smallest graph holding it, so the first size above a limit is
    # captured at the limit.
    ordered = sorted(set(sizes))
    shapes: set[tuple[int, int]] = set()
    for q, max_reqs in query_lens.items():
        limit = min(max_reqs, max_tokens // q)
        reachable = ordered[: bisect.bisect_left(ordered, limit) + 1]
        shapes.update((min(n, limit), q) for n in reachable if limit >= 1)
    return sorted(shapes, key=lambda shape: (shape[1], shape[0]))


def _shared_sizes(comp: Mapping[str, Any], q_lens: Mapping[int, int], q: int, max_num_seqs: int,
                  max_tokens: int, interactivity: bool) -> tuple[list[int], list[str]]:
    """The shared token sizes and their maximum, as ``_set_cudagraph_sizes`` resolves them (l. 2371-2555)."""
    explicit_max = comp.get("max_cudagraph_capture_size")
    given = comp.get("cudagraph_capture_sizes")
    uniform: list[int] = []
    largest = explicit_max
    if largest is None:
        largest = min(max_num_seqs * q * 2, DEFAULT_MAX_GRAPH_SIZE)
        if q > 1:
            def counts(max_reqs: int) -> list[int]:
                max_reqs = min(max_reqs, DEFAULT_MAX_GRAPH_SIZE)
                out = [n for n in (1, 2, 4) if n <= max_reqs] + list(range(8, min(max_reqs + 1, 256), 8))
                return sorted(set(out + list(range(256, max_reqs + 1, 16)) + [max_reqs]))
            uniform = sorted({n * ql for ql, tier in q_lens.items() for n in counts(tier) if n * ql <= largest})
        elif max_num_seqs <= largest:
            uniform = [max_num_seqs]
    largest = min(max_tokens, largest)
    if given is not None:
        sizes = sorted({int(s) for s in given if int(s) <= max_tokens})
    else:
        sizes = list(range(1, min(largest, 32) + 1)) if interactivity else [s for s in (1, 2, 4) if s <= largest]
        if largest >= 8:
            sizes += list(range(8, min(largest + 1, 256), 8))
        if largest >= 256:
            sizes += list(range(256, largest + 1, 16))
        if max_tokens <= largest and max_tokens not in sizes:
            sizes.append(max_tokens)
        sizes = sorted(set(sizes + [s for s in uniform if s <= max_tokens]))
    valid_max = sizes[-1] if sizes else 0
    notes = []
    if explicit_max is not None and explicit_max != valid_max:
        if given is not None:
            raise Rejected034(f"customized max_cudagraph_capture_size(={explicit_max}) should be consistent with the "
                              f"max value of cudagraph_capture_sizes(={valid_max})")
        notes.append(f"WARNING [vllm.py] Truncating max_cudagraph_capture_size to {valid_max}")
    return sizes, notes


def capture_v034(mode: str, k: int, comp: Mapping[str, Any], *, max_num_seqs: int, max_num_batched_tokens: int,
                 method: str | None = None, query_lens: Mapping[int, int] | None = None,
                 interactivity: bool = False) -> Capture:
    """The graphs vLLM 0.34 captures for ``comp`` (``compilation_config``) at mode ``mode`` and ``k`` draft tokens.

    ``query_lens`` maps each decode query length to the most requests it runs at (a K schedule); by default
    ``{1+k: max_num_seqs}``.

    Raises:
        Rejected034: vLLM 0.34 refuses the combination (mixed deprecated and new fields, a size above its maximum).
    """
    if mode == "NONE":
        return Capture("NONE", (), (), ())
    q = 1 + k
    q_lens = dict(query_lens or {q: max_num_seqs})
    legacy = comp.get("max_cudagraph_capture_size") is not None or comp.get("cudagraph_capture_sizes") is not None
    split = any(comp.get(key) is not None for key in _NEW_FIELDS)
    shared, notes = _shared_sizes(comp, q_lens, q, max_num_seqs, max_num_batched_tokens, interactivity)
    shared_max = shared[-1] if shared else 0
    if legacy and not split:
        notes.append(DEPRECATION)

    def explicit(sizes: Sequence[int], limit: int, cap: int | None, name: str, cap_name: str) -> list[int]:
        kept = sorted({int(s) for s in sizes if 1 <= int(s) <= limit})
        if len(kept) < len(set(sizes)):
            notes.append(f"WARNING [vllm.py] Dropping {sorted(set(sizes) - set(kept))} from {name}: outside "
                         f"[1, {limit}].")
        if cap is not None and kept and kept[-1] > cap:
            raise Rejected034(f"{name} holds {kept[-1]}, above {cap_name}={cap}.")
        return kept

    prefill_given, max_prefill = comp.get("prefill_cudagraph_capture_token_sizes"), comp.get(
        "max_prefill_cudagraph_capture_tokens")
    decode_given, max_decode = comp.get("decode_cudagraph_capture_request_sizes"), comp.get(
        "max_decode_cudagraph_capture_requests")
    if prefill_given is not None:
        prefill = explicit(prefill_given, max_num_batched_tokens, max_prefill, "prefill_cudagraph_capture_token_sizes",
                           "max_prefill_cudagraph_capture_tokens")
    elif max_prefill is not None:
        prefill = prefill_grid(min(max_prefill, max_num_batched_tokens), interactivity)
    else:
        prefill = list(shared)
    if decode_given is not None:
        decode = explicit(decode_given, max_num_seqs, max_decode, "decode_cudagraph_capture_request_sizes",
                          "max_decode_cudagraph_capture_requests")
    elif max_decode is not None:
        decode = decode_grid(min(max_decode, max_num_seqs))
    else:
        # The request counts each query length rounds the shared sizes up to, within the shared bound.
        decode = sorted({min(-(-s // ql), max_num_seqs) for s in shared for ql in q_lens
                         if -(-s // ql) * ql <= shared_max})
    decode_budget = min(max_num_batched_tokens, comp.get("max_decode_cudagraph_capture_tokens") or max_num_batched_tokens)
    tokens = {n * ql for n, ql in _shapes(decode, q_lens, decode_budget)}
    if decode and k >= 2 and method in _DRAFT_DECODE_METHODS:
        tokens |= {n for n, _ in _shapes(decode_grid(max_num_seqs), {1: max_num_seqs}, decode_budget)}
    decode_tokens = set(tokens)
    tokens |= set(prefill)
    if not (legacy and not split) and mode == "FULL_DECODE_ONLY":
        tokens = decode_tokens
    if legacy and split:
        if shared not in (sorted(decode_tokens | set(prefill)), sorted(decode_tokens)):
            raise Rejected034("The deprecated cudagraph_capture_sizes and max_cudagraph_capture_size cannot be "
                              "combined with the prefill and decode CUDA graph capture sizes; set only the latter.")
        tokens = set(shared)
    if not tokens:
        notes.append("INFO [vllm.py] No CUDA graph capture sizes are left; setting cudagraph_mode to NONE.")
        return Capture("NONE", (), (), (), tuple(notes))
    budget = comp.get("max_decode_cudagraph_capture_tokens")
    graphs: list[tuple[int, int]] = []
    if mode in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        # What the runner captures for uniform decode batches (v1/worker/gpu/cudagraph_utils.py l. 296-341): the
        # recorded request counts, per query length up to its requests, within decode_cudagraph_capture_max_tokens
        # (compilation.py l. 71-75: the recorded maximum within the decode token budget). Only the modes with a
        # separate decode routine capture them (l. 309-310); PIECEWISE and FULL run decode on the prefill graphs.
        recorded_max = max(tokens)
        graphs = _shapes(decode, {ql: min(n, max_num_seqs) for ql, n in q_lens.items()},
                         min(recorded_max, budget or recorded_max))
    return Capture(mode, tuple(sorted(tokens)), tuple(prefill), tuple(decode), tuple(notes), tuple(graphs),
                   None if budget is None else int(budget))


#: Methods 0.34.0 no longer has (``config/speculative.py`` l. 90-97 against 0.26.0's l. 66-75).
REMOVED_METHODS = ("medusa", "mlp_speculator")
#: vLLM's default ``max_num_batched_tokens`` where the configuration leaves it (what the simulator assumes).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


def split_fields(config: Any) -> list[str]:
    """The 0.34-only capture fields ``config`` sets (an older vLLM refuses them)."""
    comp = config.compilation_config
    return [key for key in (*_NEW_FIELDS, "max_decode_cudagraph_capture_tokens", "use_breakable_cudagraph")
            if comp.get(key) is not None]


def breakable(config: Any, mode: str) -> bool:
    """0.34 captures PIECEWISE graphs breakable unless ``use_breakable_cudagraph: false``."""
    return mode in ("PIECEWISE", "FULL_AND_PIECEWISE") and config.compilation_config.get(
        "use_breakable_cudagraph") is not False


def plan_v034(config: Any, k: int, method: str | None, mode: str, max_num_seqs: int,
              schedule: Any) -> tuple[Capture, bool, list[str]]:
    """0.34's start-up rules for ``config``: the graphs captured, whether a K schedule stays on, the notes logged.

    Raises:
        Rejected034: a method 0.34 removed, ``fly`` below K=2, or a capture-size combination it refuses.
    """
    spec = dict(config.speculative_config or {})
    notes: list[str] = []
    if method in REMOVED_METHODS:
        raise Rejected034(f"Unknown speculative method {method!r} (removed in vLLM 0.34.0)")
    if spec.get("rejection_sample_method") == "fly":
        if k < 2:
            raise Rejected034("FLy requires num_speculative_tokens to be at least 2.")
        notes.append("WARNING [speculative.py] FLy verification is a lossy speculative decoding method and may "
                     "degrade model outputs.")
    args = config.engine_args
    schedule_on = schedule is not None
    if schedule_on and int(args.get("data_parallel_size") or 1) > 1:
        notes.append("WARNING [vllm.py] Dynamic speculative decoding is not supported with data parallelism ... "
                     f"Disabling num_speculative_tokens_per_batch_size and falling back to static "
                     f"num_speculative_tokens={k}.")
        schedule_on = False
    query_lens: dict[int, int] = {}
    if schedule_on:
        for start, end, row_k in schedule.entries:
            del start
            query_lens[1 + row_k] = max(query_lens.get(1 + row_k, 0), min(end, max_num_seqs))
    capture = capture_v034(mode, k, config.compilation_config, max_num_seqs=max_num_seqs,
                           max_num_batched_tokens=int(args.get("max_num_batched_tokens")
                                                      or DEFAULT_MAX_NUM_BATCHED_TOKENS),
                           method=method, query_lens=query_lens or None,
                           interactivity=args.get("performance_mode") == "interactivity")
    return capture, schedule_on, notes

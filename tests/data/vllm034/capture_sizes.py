"""vLLM 0.34.0's capture-size resolution, copied verbatim from the released wheel
(vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl, Apache-2.0, Copyright contributors to the vLLM project), to test
autotune's own port (autotune/engines/_sim_v034.py) and export against vLLM's code without importing vLLM.

Each block below names its file and lines. Only the shim around them (``_Shim``, ``resolve``, the stand-ins for
``logger``, ``cdiv``, ``current_platform`` and ``CUDAGraphMode``) is autotune's (``resolve``'s ``graphs``, the decode
graphs the runner captures, calls the copied functions as ``vllm/v1/worker/gpu/cudagraph_utils.py`` l. 185-189 and
296-341 call them: that class needs torch, so it is not copied); the platform is not SM100 (a GB10 or an
H100/H200 is not), and dynamic speculative decoding, multi-module MTP and LoRA are left out of the shim.
"""
# ruff: noqa
# fmt: off
from __future__ import annotations

import bisect
import enum
import math
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace


class _Logger:
    def __init__(self): self.lines = []
    def warning(self, msg, *a): self.lines.append(("WARNING", msg % a if a else msg))
    warning_once = info_once = info = warning


logger = _Logger()


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


class CUDAGraphMode(enum.Enum):
    # vllm/config/compilation.py: the members and mixed_mode() (lines 130-146), as values only.
    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = (FULL, NONE)
    FULL_AND_PIECEWISE = (FULL, PIECEWISE)

    def separate_routine(self) -> bool:
        return isinstance(self.value, tuple)

    def mixed_mode(self) -> "CUDAGraphMode":
        return CUDAGraphMode(self.value[1]) if self.separate_routine() else self


current_platform = SimpleNamespace(is_device_capability_family=lambda family: False)

# ---- copied from vllm/config/compilation.py lines 54-68 ----

def decode_cudagraph_capture_shapes(
    sizes: Iterable[int], query_lens: Mapping[int, int], max_tokens: int
) -> list[tuple[int, int]]:
    """The `(num_reqs, query_len)` uniform decode graphs for the request counts
    `sizes`, for each query length up to the most requests it maps to and
    `max_tokens` tokens. A batch pads to the smallest graph that holds it, so
    the first size above a limit is captured at the limit and larger ones are
    unreachable."""
    sizes = sorted(set(sizes))
    shapes: set[tuple[int, int]] = set()
    for q, max_reqs in query_lens.items():
        limit = min(max_reqs, max_tokens // q)
        reachable = sizes[: bisect.bisect_left(sizes, limit) + 1]
        shapes.update((min(n, limit), q) for n in reachable if limit >= 1)
    return sorted(shapes, key=lambda shape: (shape[1], shape[0]))

# ---- copied from vllm/config/compilation.py lines 71-75 ----

def decode_cudagraph_capture_max_tokens(config: "CompilationConfig") -> int:
    """The most tokens a uniform decode graph holds: the recorded max, which
    attention backends size their buffers by, within the decode token budget."""
    max_tokens = config.max_cudagraph_capture_size or 0
    return min(max_tokens, config.max_decode_cudagraph_capture_tokens or max_tokens)

# ---- copied from vllm/config/compilation.py lines 78-86 ----

def _walk_grid(limit: int, step: Callable[[int], float]) -> list[int]:
    """Sizes 1, ..., `limit`, each the next multiple of the largest power of two
    not above `step(size)`."""
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, step(size)))))
        size = (size // stride + 1) * stride
    return [*grid, limit] if limit else []

# ---- copied from vllm/config/compilation.py lines 89-99 ----

def prefill_cudagraph_capture_grid(
    max_tokens: int, dense_head: bool = False
) -> list[int]:
    """The token-count grid up to `max_tokens`: 1, 2, 4, every 8 up to 64, four
    sizes per doubling up to 1024 (every count up to 32 with `dense_head`), then
    every 256 tokens, and every 512 once 7% of the size exceeds 512: 54 sizes at
    8192."""
    grid = _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096)))
    if dense_head:
        grid = sorted({*grid, *(t for t in range(1, 33) if t < max_tokens)})
    return grid

# ---- copied from vllm/config/compilation.py lines 102-119 ----

def varlen_decode_cudagraph_capture_grid(
    max_tokens: int, dense_head: bool = False
) -> list[int]:
    """The token-count grid of adaptive verification's decode graphs: 1, 2, 4
    (every count up to 32 with `dense_head`), then 4 sizes per doubling from 8
    to 1024, every 128 up to 4096 and every 256 beyond. Adaptive verification
    picks its verify budget from the captured sizes, so it needs a finer grid
    than prefill."""
    grid = set(range(1, 33)) if dense_head else {1, 2, 4}
    low = 8
    grid.add(low)
    while low < 1024:
        grid.update(range(low + low // 4, 2 * low + 1, low // 4))
        low *= 2
    grid.update(range(1024, 4096, 128), range(4096, max_tokens, 256))
    return (
        sorted({s for s in grid if s < max_tokens} | {max_tokens}) if max_tokens else []
    )

# ---- copied from vllm/config/compilation.py lines 122-126 ----

def decode_cudagraph_capture_grid(max_requests: int) -> list[int]:
    """The request-count grid up to `max_requests`: every count up to 6, then a
    step of the largest power of two not above 0.65 * n^(2/3) (2 from 8, 4 from
    16, 8 from 48, 16 from 128, 32 from 352): 64 sizes at 1024."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))

# ---- copied from vllm/config/vllm.py lines 677-706 (VllmConfig.get_decode_cudagraph_query_lens) ----

class _M_13:
    def get_decode_cudagraph_query_lens(self, decode_query_len: int) -> dict[int, int]:
        """Map each uniform decode query length of a target-shaped runner, whose
        widest is `decode_query_len`, to the most requests its batches have.

        Dynamic speculative decoding drafts as many tokens as its schedule gives
        the batch size, so a query length only runs up to the largest batch size
        that drafts its number of tokens.
        """
        max_num_seqs = self.scheduler_config.max_num_seqs
        speculative_config = self.speculative_config
        num_new_sampled_tokens = decode_query_len - self.num_speculative_tokens
        if (
            speculative_config is None
            or not speculative_config.uses_dynamic_speculative_decoding()
            or num_new_sampled_tokens <= 0
        ):
            return {decode_query_len: max_num_seqs}
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        dense_schedule = build_dynamic_sd_schedule_lookup(
            speculative_config.num_speculative_tokens_per_batch_size,
            vllm_max_batch_size=max_num_seqs,
            vllm_num_speculative_tokens=self.num_speculative_tokens,
        )
        # By ascending batch size, so each query length keeps its widest batch.
        return {
            k + num_new_sampled_tokens: batch_size
            for batch_size, k in enumerate(dense_schedule)
            if batch_size > 0
        }

# ---- copied from vllm/config/vllm.py lines 708-730 (VllmConfig.get_draft_decode_cudagraph_request_sizes) ----

class _M_15:
    def get_draft_decode_cudagraph_request_sizes(self) -> list[int]:
        """Request counts of the FULL graphs of one-token draft decodes, the
        draft steps after the first of EAGLE, EAGLE3, single-module MTP and
        draft models: the request-count grid up to `max_num_seqs`. The target's
        decode cap can be far lower: off SM100 its default is 512 / (1 + K)
        requests, 64 at K=7. Above it the K - 1 draft steps would run eagerly
        and pay their host launch time on every step, while their graphs are
        small. Empty without such steps or decode graphs."""
        speculative_config = self.speculative_config
        sizes = self.compilation_config.decode_cudagraph_capture_request_sizes
        if (
            not sizes
            or speculative_config is None
            or self.num_speculative_tokens < 2
            or speculative_config.method
            not in ("eagle", "eagle3", "mtp", "draft_model")
            or (
                speculative_config.use_multi_module_mtp()
                and not speculative_config.use_gemma4_mtp()
            )
        ):
            return []
        return decode_cudagraph_capture_grid(self.scheduler_config.max_num_seqs)

# ---- copied from vllm/config/vllm.py lines 732-749 (VllmConfig.get_varlen_decode_cudagraph_token_sizes) ----

class _M_17:
    def get_varlen_decode_cudagraph_token_sizes(
        self, decode_query_len: int
    ) -> list[int]:
        """Token counts of the FULL decode graphs for adaptive verification,
        whose decode batches mix query lengths up to `decode_query_len`: the
        token-count grid up to `max_decode_cudagraph_capture_requests` requests
        of `decode_query_len` tokens each, within the decode token budget."""
        max_requests = self.compilation_config.max_decode_cudagraph_capture_requests
        assert max_requests is not None
        return varlen_decode_cudagraph_capture_grid(
            min(
                max_requests * decode_query_len,
                self.scheduler_config.max_num_batched_tokens,
                self.compilation_config.max_decode_cudagraph_capture_tokens
                or max_requests * decode_query_len,
            ),
            self.performance_mode == "interactivity",
        )

# ---- copied from vllm/config/vllm.py lines 2322-2556 (VllmConfig._set_cudagraph_sizes) ----

class _M_19:
    def _set_cudagraph_sizes(self):
        """VLLM defines the default candidate list of batch sizes for CUDA graph
        capture as:

        ```python
        default_max_graph_size = 1024 if is_data_center_blackwell else 512
        decode_query_len = self.uniform_decode_query_len
        max_graph_size = min(
            max_num_seqs * decode_query_len * 2, default_max_graph_size
        )
        # 1, 2, 4, then multiples of 8 up to 256 and then multiples of 16
        # up to max_graph_size
        cudagraph_capture_sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(
            range(256, max_graph_size + 1, 16))

        `max_num_batched_tokens` is also appended to the list if it fits
        within `max_cudagraph_capture_size`, so the max batch size is captured
        even when off-stride. Uniform decode sizes are appended when they fit
        within the platform's default capture ceiling, since they need not land
        on an 8- or 16-token stride.

        In the end, `vllm_config.compilation_config.cudagraph_capture_sizes`
        will be the final sizes to capture cudagraph (in ascending order).

        These sizes are used to capture and reuse CUDA graphs for
        performance-critical paths (e.g., decoding). Capturing enables
        significantly faster kernel dispatch by avoiding Python overhead. The
        list is then filtered based on `max_num_batched_tokens` (e.g., 8192 on
        most GPUs), which controls the total allowed number of tokens in a
        batch. Since each sequence may have a variable number of tokens, the
        maximum usable batch size will depend on actual sequence lengths.

        Example:
            With `max_num_batched_tokens = 8192`, and typical sequences
            averaging ~32 tokens, most practical batch sizes fall below 256.
            However, the system will still allow capture sizes up to the
            platform default if shape and memory permit.

        Note:
            If users explicitly specify cudagraph capture sizes in the
            compilation config, those will override this default logic.
            At runtime:

            - If batch size <= one of the `cudagraph_capture_sizes`, the closest
            padded CUDA graph will be used.
            - If batch size > largest `cudagraph_capture_sizes`, cudagraph will
            not be used.

        """
        if (
            self.model_config is not None
            and not self.model_config.enforce_eager
            and self.compilation_config.cudagraph_mode != CUDAGraphMode.NONE
        ):
            # determine the initial max_cudagraph_capture_size
            max_cudagraph_capture_size = (
                self.compilation_config.max_cudagraph_capture_size
            )
            legacy_sizes = (
                max_cudagraph_capture_size is not None
                or self.compilation_config.cudagraph_capture_sizes is not None
            )
            try:
                target_query_lens = self.get_decode_cudagraph_query_lens(
                    self.uniform_decode_query_len
                )
            except ValueError:
                # Validation lives elsewhere; an invalid dynamic speculative
                # decoding schedule keeps the single static width.
                target_query_lens = {
                    self.uniform_decode_query_len: self.scheduler_config.max_num_seqs
                }
            # Decode sizes to cover, in tokens. Populated only when the default
            # is computed here, so an explicit capture range is left exactly as
            # configured.
            uniform_decode_sizes: list[int] = []
            if max_cudagraph_capture_size is None:
                from vllm.platforms import current_platform

                default_max_graph_size = (
                    1024 if current_platform.is_device_capability_family(100) else 512
                )
                decode_query_len = self.uniform_decode_query_len
                max_num_seqs = self.scheduler_config.max_num_seqs
                max_cudagraph_capture_size = min(
                    max_num_seqs * decode_query_len * 2, default_max_graph_size
                )
                if decode_query_len > 1:
                    # A uniform decode batch is decode_query_len tokens per
                    # request, so the widest one is far outside this ceiling.
                    # Coverage comes from appending the decode sizes rather than
                    # extending the token-strided grid. Extending that grid to
                    # the widest decode size produces 581 sizes at
                    # max_num_seqs=512 and 16 draft tokens, versus 100 with the
                    # request-count grid.
                    #
                    # The grid would not buy decode coverage anyway. Dispatch
                    # requires an exact multiple of decode_query_len, so a
                    # token-strided entry is only usable when it happens to be
                    # one; at query length 17 a captured 560 rounds to 561 and
                    # is rejected. Scaling a request-count grid keeps every
                    # entry usable and the count comparable to the non-
                    # speculative case.
                    def request_counts(max_reqs: int) -> list[int]:
                        # At most the platform default number of requests,
                        # mirroring the one-token-per-request decode ceiling.
                        max_reqs = min(max_reqs, default_max_graph_size)
                        counts = [n for n in (1, 2, 4) if n <= max_reqs]
                        counts += list(range(8, min(max_reqs + 1, 256), 8))
                        counts += list(range(256, max_reqs + 1, 16))
                        return sorted(set(counts + [max_reqs]))

                    # Dynamic speculative decoding picks the draft width from
                    # the batch size, so a decode step is only uniform within a
                    # tier, and each tier needs its own sizes up to the widest
                    # batch running at it.
                    decode_tiers = list(target_query_lens.items())

                    uniform_decode_sizes = sorted(
                        {
                            n * query_len
                            for query_len, tier_max_reqs in decode_tiers
                            for n in request_counts(tier_max_reqs)
                            if n * query_len <= max_cudagraph_capture_size
                        }
                    )
                elif max_num_seqs <= max_cudagraph_capture_size:
                    uniform_decode_sizes = [max_num_seqs]
            max_num_tokens = self.scheduler_config.max_num_batched_tokens
            max_cudagraph_capture_size = min(max_num_tokens, max_cudagraph_capture_size)

            assert max_cudagraph_capture_size >= 1, (
                "Maximum cudagraph size should be greater than or equal to 1 "
                "when using cuda graph."
            )

            # determine the cudagraph_capture_sizes
            if self.compilation_config.cudagraph_capture_sizes is not None:
                assert len(self.compilation_config.cudagraph_capture_sizes) > 0, (
                    "cudagraph_capture_sizes should contain at least one element "
                    "when using cuda graph."
                )
                # de-duplicate the sizes provided by the config
                dedup_sizes = list(set(self.compilation_config.cudagraph_capture_sizes))
                cudagraph_capture_sizes = [
                    i for i in dedup_sizes if i <= max_num_tokens
                ]
                # sort to make sure the sizes are in ascending order
                cudagraph_capture_sizes.sort()
            else:
                if self.performance_mode == "interactivity":
                    # Fine-grained CUDA graphs at small batch sizes
                    # for minimal padding overhead
                    interactivity_max = min(max_cudagraph_capture_size, 32)
                    cudagraph_capture_sizes = list(range(1, interactivity_max + 1))
                else:
                    cudagraph_capture_sizes = [
                        i for i in [1, 2, 4] if i <= max_cudagraph_capture_size
                    ]
                if max_cudagraph_capture_size >= 8:
                    # Step size 8 for small batch sizes, up to 256(not included)
                    cudagraph_capture_sizes += list(
                        range(8, min(max_cudagraph_capture_size + 1, 256), 8)
                    )
                if max_cudagraph_capture_size >= 256:
                    # Step size 16 for larger batch sizes
                    cudagraph_capture_sizes += list(
                        range(256, max_cudagraph_capture_size + 1, 16)
                    )
                # ensure max_num_tokens is captured if within max capture size
                if (
                    max_num_tokens <= max_cudagraph_capture_size
                    and max_num_tokens not in cudagraph_capture_sizes
                ):
                    cudagraph_capture_sizes.append(max_num_tokens)
                # Preserve the platform's default capture ceiling. Larger
                # uniform decode batches fall back to eager execution unless
                # users explicitly configure wider capture sizes.
                cudagraph_capture_sizes += [
                    size for size in uniform_decode_sizes if size <= max_num_tokens
                ]
                # de-duplicate and sort the sizes
                cudagraph_capture_sizes = sorted(set(cudagraph_capture_sizes))

            # user-specific compilation_config.max_cudagraph_capture_size get
            # truncated to valid_max_size when they are inconsistent.
            valid_max_size = (
                cudagraph_capture_sizes[-1] if cudagraph_capture_sizes else 0
            )
            if (
                self.compilation_config.max_cudagraph_capture_size is not None
                and self.compilation_config.max_cudagraph_capture_size != valid_max_size
            ):
                # raise error only when both two flags are user-specified
                # and they are inconsistent with each other
                if self.compilation_config.cudagraph_capture_sizes is not None:
                    raise ValueError(
                        "customized max_cudagraph_capture_size"
                        f"(={self.compilation_config.max_cudagraph_capture_size}) "
                        "should be consistent with the max value of "
                        f"cudagraph_capture_sizes(={valid_max_size})"
                    )

                logger.warning(
                    "Truncating max_cudagraph_capture_size to %d",
                    valid_max_size,
                )
            # always set the final max_cudagraph_capture_size
            self.compilation_config.max_cudagraph_capture_size = valid_max_size

            if self.compilation_config.cudagraph_capture_sizes is not None and len(
                cudagraph_capture_sizes
            ) < len(self.compilation_config.cudagraph_capture_sizes):
                # If users have specified capture sizes, we only need to
                # compare the lens before and after modification since the modified
                # list is only the subset of the original list.
                logger.warning(
                    (
                        "cudagraph_capture_sizes specified in compilation_config"
                        " %s is overridden by config %s"
                    ),
                    self.compilation_config.cudagraph_capture_sizes,
                    cudagraph_capture_sizes,
                )
            # always write back the final sizes
            self.compilation_config.cudagraph_capture_sizes = cudagraph_capture_sizes
            self._split_cudagraph_capture_sizes(legacy_sizes, target_query_lens)

        else:
            # no cudagraph in use
            self.compilation_config.max_cudagraph_capture_size = 0
            self.compilation_config.cudagraph_capture_sizes = []

        # complete the remaining process.
        self.compilation_config.post_init_cudagraph_sizes()

# ---- copied from vllm/config/vllm.py lines 2558-2737 (VllmConfig._split_cudagraph_capture_sizes) ----

class _M_21:
    def _split_cudagraph_capture_sizes(
        self, legacy_sizes: bool, target_query_lens: dict[int, int]
    ) -> None:
        """Resolve the prefill (token) and decode (request) CUDA graph capture
        sizes, each from its own sizes, cap or default and never from the
        other's, and record every graph's token count in
        `cudagraph_capture_sizes` and `max_cudagraph_capture_size`.

        Args:
            legacy_sizes: The deprecated `cudagraph_capture_sizes` or
                `max_cudagraph_capture_size` was set before resolution.
            target_query_lens: The target model's decode query lengths, each
                mapped to the most requests its batches have.

        """
        compilation_config = self.compilation_config
        prefill_sizes = compilation_config.prefill_cudagraph_capture_token_sizes
        max_prefill_tokens = compilation_config.max_prefill_cudagraph_capture_tokens
        decode_sizes = compilation_config.decode_cudagraph_capture_request_sizes
        max_decode_requests = compilation_config.max_decode_cudagraph_capture_requests
        uses_split_sizes = any(
            x is not None
            for x in (
                prefill_sizes,
                max_prefill_tokens,
                decode_sizes,
                max_decode_requests,
            )
        )
        if legacy_sizes and not uses_split_sizes:
            logger.warning_once(
                "cudagraph_capture_sizes and max_cudagraph_capture_size are "
                "deprecated. Set the token counts of prefill "
                "CUDA graphs with prefill_cudagraph_capture_token_sizes or "
                "max_prefill_cudagraph_capture_tokens, and the request counts of "
                "decode CUDA graphs with decode_cudagraph_capture_request_sizes or "
                "max_decode_cudagraph_capture_requests."
            )
        from vllm.platforms import current_platform

        shared_sizes = compilation_config.cudagraph_capture_sizes
        shared_max = compilation_config.max_cudagraph_capture_size
        max_num_seqs = self.scheduler_config.max_num_seqs
        max_num_tokens = self.scheduler_config.max_num_batched_tokens
        # On SM100, unset kinds default to wider grids; elsewhere, and with the
        # deprecated fields, they default to the shared sizes resolved above.
        wide_defaults = (
            not legacy_sizes and current_platform.is_device_capability_family(100)
        )
        if (
            wide_defaults
            and compilation_config.max_decode_cudagraph_capture_tokens is None
        ):
            compilation_config.max_decode_cudagraph_capture_tokens = 8192

        def explicit(
            sizes: list[int], limit: int, cap: int | None, name: str, cap_name: str
        ):
            kept = sorted({s for s in sizes if 1 <= s <= limit})
            if len(kept) < len(set(sizes)):
                logger.warning(
                    "Dropping %s from %s: outside [1, %d].",
                    sorted(set(sizes) - set(kept)),
                    name,
                    limit,
                )
            if cap is not None and kept and kept[-1] > cap:
                raise ValueError(f"{name} holds {kept[-1]}, above {cap_name}={cap}.")
            return kept

        if prefill_sizes is not None:
            prefill_sizes = explicit(
                prefill_sizes,
                max_num_tokens,
                max_prefill_tokens,
                "prefill_cudagraph_capture_token_sizes",
                "max_prefill_cudagraph_capture_tokens",
            )
        elif max_prefill_tokens is not None or wide_defaults:
            prefill_sizes = prefill_cudagraph_capture_grid(
                min(
                    8192 if max_prefill_tokens is None else max_prefill_tokens,
                    max_num_tokens,
                ),
                self.performance_mode == "interactivity",
            )
        else:
            prefill_sizes = list(shared_sizes)

        if decode_sizes is not None:
            decode_sizes = explicit(
                decode_sizes,
                max_num_seqs,
                max_decode_requests,
                "decode_cudagraph_capture_request_sizes",
                "max_decode_cudagraph_capture_requests",
            )
        elif max_decode_requests is not None or wide_defaults:
            decode_sizes = decode_cudagraph_capture_grid(
                max_num_seqs
                if max_decode_requests is None
                else min(max_decode_requests, max_num_seqs)
            )
        else:
            # The request counts each target query length rounds the shared sizes
            # up to within the shared bound.
            decode_sizes = sorted(
                {
                    min(cdiv(s, q), max_num_seqs)
                    for s in shared_sizes
                    for q in target_query_lens
                    if cdiv(s, q) * q <= shared_max
                }
            )
        compilation_config.prefill_cudagraph_capture_token_sizes = prefill_sizes
        compilation_config.max_prefill_cudagraph_capture_tokens = max(
            prefill_sizes, default=0
        )
        compilation_config.decode_cudagraph_capture_request_sizes = decode_sizes
        compilation_config.max_decode_cudagraph_capture_requests = max(
            decode_sizes, default=0
        )

        decode_max_tokens = min(
            max_num_tokens,
            compilation_config.max_decode_cudagraph_capture_tokens or max_num_tokens,
        )
        token_sizes: set[int] = set()
        token_sizes.update(
            n * q
            for n, q in decode_cudagraph_capture_shapes(
                decode_sizes, target_query_lens, decode_max_tokens
            )
        )
        token_sizes.update(
            n
            for n, _ in decode_cudagraph_capture_shapes(
                self.get_draft_decode_cudagraph_request_sizes(),
                {1: max_num_seqs},
                decode_max_tokens,
            )
        )
        speculative_config = self.speculative_config
        if speculative_config is not None and (
            speculative_config.enable_adaptive_verification
        ):
            token_sizes.update(
                self.get_varlen_decode_cudagraph_token_sizes(
                    self.uniform_decode_query_len
                )
            )
        decode_token_sizes = set(token_sizes)
        token_sizes.update(prefill_sizes)
        # FULL_DECODE_ONLY captures no prefill graph, so prefill sizes would only
        # inflate the recorded max; the deprecated sizes alone keep main's.
        if not (legacy_sizes and not uses_split_sizes) and (
            compilation_config.cudagraph_mode.mixed_mode() == CUDAGraphMode.NONE
        ):
            token_sizes = set(decode_token_sizes)
        if legacy_sizes and uses_split_sizes:
            # Resolving a resolved config again keeps the sizes it recorded, also
            # when a worker has since dropped the mode to FULL_DECODE_ONLY.
            if shared_sizes not in (
                sorted(decode_token_sizes | set(prefill_sizes)),
                sorted(decode_token_sizes),
            ):
                raise ValueError(
                    "The deprecated cudagraph_capture_sizes and "
                    "max_cudagraph_capture_size cannot be combined with the "
                    "prefill and decode CUDA graph capture sizes; set only the "
                    "latter."
                )
            token_sizes = set(shared_sizes)
        compilation_config.cudagraph_capture_sizes = sorted(token_sizes)
        compilation_config.max_cudagraph_capture_size = max(token_sizes, default=0)
        if not token_sizes:
            logger.info_once(
                "No CUDA graph capture sizes are left; setting cudagraph_mode to NONE."
            )
            compilation_config.cudagraph_mode = CUDAGraphMode.NONE

# ---- autotune's shim: a VllmConfig with only what the two methods above read ----
class _Compilation(SimpleNamespace):
    def post_init_cudagraph_sizes(self) -> None:
        # vllm/config/compilation.py lines 1316-1319 (the part that checks the sizes).
        self.cudagraph_capture_sizes.sort()
        if self.cudagraph_capture_sizes:
            assert self.cudagraph_capture_sizes[-1] == self.max_cudagraph_capture_size


class _Speculative(SimpleNamespace):
    def uses_dynamic_speculative_decoding(self) -> bool:
        return False

    def use_multi_module_mtp(self) -> bool:
        return False

    def use_gemma4_mtp(self) -> bool:
        return False


class _Shim(_M_13, _M_15, _M_17, _M_19, _M_21):
    def __init__(self, mode, k, method, max_num_seqs, max_num_batched_tokens, compilation, enforce_eager,
                 adaptive, performance_mode):
        fields = dict.fromkeys(("cudagraph_capture_sizes", "max_cudagraph_capture_size",
                                "prefill_cudagraph_capture_token_sizes", "max_prefill_cudagraph_capture_tokens",
                                "decode_cudagraph_capture_request_sizes", "max_decode_cudagraph_capture_requests",
                                "max_decode_cudagraph_capture_tokens"))
        fields.update(compilation)
        self.compilation_config = _Compilation(cudagraph_mode=CUDAGraphMode[mode], **fields)
        self.model_config = SimpleNamespace(enforce_eager=enforce_eager)
        self.scheduler_config = SimpleNamespace(max_num_seqs=max_num_seqs,
                                                max_num_batched_tokens=max_num_batched_tokens)
        self.speculative_config = None if not k else _Speculative(method=method,
                                                                 enable_adaptive_verification=adaptive)
        self.num_speculative_tokens = k
        self.performance_mode = performance_mode

    @property
    def uniform_decode_query_len(self) -> int:
        return 1 + self.num_speculative_tokens


def resolve(mode: str = "FULL_AND_PIECEWISE", k: int = 0, method: str | None = "ngram", max_num_seqs: int = 256,
            max_num_batched_tokens: int = 8192, compilation: Mapping | None = None, enforce_eager: bool = False,
            adaptive: bool = False, performance_mode: str = "balanced") -> dict:
    """What vLLM 0.34.0 resolves the capture sizes to, by its own code above. Raises its ValueError."""
    import sys

    fake = SimpleNamespace(current_platform=current_platform)
    saved = sys.modules.get("vllm.platforms")
    sys.modules["vllm.platforms"] = fake  # the methods import it inline; never the real vLLM here
    logger.lines = []
    try:
        shim = _Shim(mode, k, method, max_num_seqs, max_num_batched_tokens, dict(compilation or {}), enforce_eager,
                     adaptive, performance_mode)
        shim._set_cudagraph_sizes()
    finally:
        if saved is None:
            del sys.modules["vllm.platforms"]
        else:
            sys.modules["vllm.platforms"] = saved
    c = shim.compilation_config
    graphs = []
    if c.cudagraph_mode.separate_routine() and c.cudagraph_mode != CUDAGraphMode.NONE:
        # What the runner captures for uniform decode batches, as vllm/v1/worker/gpu/cudagraph_utils.py l. 185-189
        # (decode_max_reqs) and l. 296-341 (_init_candidates) call vLLM's own functions above (torch-bound, not copied).
        decode_max_reqs = {q: min(n, max_num_seqs) for q, n in sorted(
            shim.get_decode_cudagraph_query_lens(shim.uniform_decode_query_len).items())}
        graphs = decode_cudagraph_capture_shapes(c.decode_cudagraph_capture_request_sizes or [], decode_max_reqs,
                                                 decode_cudagraph_capture_max_tokens(c))
    return {"mode": c.cudagraph_mode.name, "sizes": list(c.cudagraph_capture_sizes), "graphs": graphs,
            "prefill": list(c.prefill_cudagraph_capture_token_sizes or []) if c.max_cudagraph_capture_size else [],
            "decode": list(c.decode_cudagraph_capture_request_sizes or []) if c.max_cudagraph_capture_size else [],
            "max": c.max_cudagraph_capture_size, "log": list(logger.lines)}

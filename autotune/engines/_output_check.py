"""The output check's engine side: what a restart is asked to generate, and the facts its outputs become.

See :mod:`autotune.core.outputs` for what is compared. An engine asks for the check (:func:`check_request`) unless
the configuration's outputs are not the model's own greedy choices: vLLM's ``synthetic_acceptance_rates`` accept
drafted tokens by a fixed rate instead of by the target model's argmax, so under them outputs differ by design and
the check says it was skipped rather than flag the configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.core.facts import OUTPUT_CHECK_SKIPPED, OUTPUT_DIGESTS, FactValue
from autotune.core.outputs import CHECK_TOKENS, check_prompts, digest_outputs
from autotune.core.records import EngineConfig, Workload

__all__ = ["check_request", "output_facts", "skip_reason"]


def skip_reason(config: EngineConfig) -> str | None:
    """Why this configuration's outputs cannot be compared with the baseline's, or ``None`` when they can."""
    spec = config.speculative_config or {}
    if any("synthetic" in str(key) for key in spec):
        return "synthetic acceptance: drafted tokens are accepted by a set rate, not by the model's greedy choice"
    return None


def check_request(workload: Workload) -> dict[str, Any]:
    """The check as a restart runs it: the chosen prompt indices and how many output tokens to keep."""
    return {"prompts": check_prompts(workload.num_prompts, workload.seed), "tokens": CHECK_TOKENS}


def output_facts(output_tokens: Mapping[Any, Any] | None, skipped: str | None = None) -> dict[str, FactValue]:
    """A restart's facts from its checked outputs (prompt index -> token ids), or the reason it has none."""
    if skipped:
        return {OUTPUT_CHECK_SKIPPED: skipped}
    if not output_tokens:
        return {}
    return {OUTPUT_DIGESTS: digest_outputs({int(k): v for k, v in output_tokens.items()})}

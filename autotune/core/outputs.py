"""The output check's vocabulary: which prompts it runs, how a restart's outputs are recorded, how two agree.

Each restart of an engine that supports the check generates, greedily, the first :data:`CHECK_TOKENS` output
tokens for a fixed subset of the workload's prompts (:func:`check_prompts`: chosen by the workload's seed, the same
for every configuration). The restart records one short digest per prompt (:func:`digest_outputs`), under
:data:`autotune.core.facts.OUTPUT_DIGESTS`; a configuration's agreement with the baseline is the fraction of those
prompts whose digests are equal (:func:`agreement`). Digests rather than token ids: a restart's facts stay one flat
string, and equality per prompt is all the check needs.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence

__all__ = ["CHECK_PROMPTS", "CHECK_TOKENS", "DEFAULT_MIN_AGREEMENT", "agreement", "check_prompts",
           "digest_outputs", "parse_digests"]

#: Prompts the check runs per restart: few enough to cost well under a second of generation.
CHECK_PROMPTS = 8
#: Output tokens compared per prompt.
CHECK_TOKENS = 32
#: The lowest agreement with the baseline a configuration may have and still win. Empirical: greedy decoding of a
#: correct kernel differs from the baseline only where two logits tie within rounding, which flips a prompt or so of
#: eight on some batch shapes; a broken kernel (garbage output) agrees on none.
DEFAULT_MIN_AGREEMENT = 0.90


def check_prompts(num_prompts: int, seed: int, count: int = CHECK_PROMPTS) -> list[int]:
    """Indices of the prompts the check runs: ``count`` of ``num_prompts``, drawn by the workload's seed, sorted."""
    n = max(0, int(num_prompts))
    return sorted(random.Random(f"autotune-output-check-{int(seed)}").sample(range(n), min(count, n)))


def digest_outputs(outputs: Mapping[int, Sequence[int]]) -> str:
    """``"3:1f2e... 7:9a0b..."``: each checked prompt's index and a digest of its first :data:`CHECK_TOKENS` ids."""
    parts = []
    for index in sorted(outputs):
        ids = [int(t) for t in list(outputs[index])[:CHECK_TOKENS]]
        body = ",".join(map(str, ids)).encode()
        parts.append(f"{int(index)}:{hashlib.sha256(body).hexdigest()[:16]}")
    return " ".join(parts)


def parse_digests(text: object) -> dict[int, str]:
    """The digests by prompt index (empty for anything that is not :func:`digest_outputs`' form)."""
    out: dict[int, str] = {}
    if not isinstance(text, str):
        return out
    for part in text.split():
        index, sep, digest = part.partition(":")
        if sep and index.isdigit() and digest:
            out[int(index)] = digest
    return out


def agreement(digests: Mapping[int, str], reference: Mapping[int, str]) -> float | None:
    """The fraction of prompts both checked whose outputs are equal; ``None`` when they share no prompt."""
    shared = [i for i in digests if i in reference]
    if not shared:
        return None
    return sum(digests[i] == reference[i] for i in shared) / len(shared)

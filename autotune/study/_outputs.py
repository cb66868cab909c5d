"""The output check in a study: each trial's agreement with the baseline's outputs, from the ledger's restarts.

The rule is :mod:`autotune.decisions.outputs`; here the baseline's reference is found among the study's trials (every
trial of the baseline configuration, the earliest first) and each configuration is judged against it.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.config.output_check import min_agreement
from autotune.config.space import SearchSpace
from autotune.core.records import EngineConfig, RestartResult
from autotune.decisions.outputs import OutputCheck, check_outputs, reference_digests
from autotune.engines.vllm.vocabulary import lossy
from autotune.store.ledger import Ledger

__all__ = ["baseline_reference", "judge_outputs"]


def baseline_reference(ledger: Ledger, space: SearchSpace) -> dict[int, str]:
    """The baseline's checked outputs: its earliest trial's first restart that ran the check (empty: none yet)."""
    key = space.baseline().key()
    restarts: list[RestartResult] = []
    for t in sorted(ledger.study.get_trials(deepcopy=False), key=lambda t: t.number):
        config = ledger.config(t)
        if config is not None and config.key() == key:
            restarts += ledger.restarts(t)
    return reference_digests(restarts)


def judge_outputs(ledger: Ledger, space: SearchSpace, config: EngineConfig, restarts: Sequence[RestartResult],
                  reference: dict[int, str] | None = None) -> OutputCheck:
    """``config``'s :class:`OutputCheck` from its restarts (the reference read from the ledger unless given)."""
    ref = baseline_reference(ledger, space) if reference is None else reference
    return check_outputs(restarts, ref, min_agreement(space), baseline=config.key() == space.baseline().key(),
                         lossy=lossy(config))

"""The study's K schedule challenger: derived once from the search's load levels, verified beside the best fixed K.

:func:`with_schedule` is the hook :func:`autotune.study._verification._candidates` calls on the candidates it chose:
with load levels (and ``schedule: derive``, the default then) it adds the schedule of the levels' best K
(:func:`autotune.decisions.schedule.derive_schedule`), on the best fixed-K configuration's draft, capture settings
and engine arguments, as one more challenger before the baseline, so it runs in the same interleaved, matched-seed
rounds. :func:`study_derivation` is the same derivation for the report (what was derived, or why nothing was).
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.config.space import SCHEDULE_PARAM, Infeasible, SearchSpace
from autotune.core import params as P
from autotune.core.params import TrialParams
from autotune.decisions.schedule import Derivation, derive_schedule
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate
from autotune.store.ledger import Ledger

__all__ = ["study_derivation", "with_schedule"]


def _template(candidates: Sequence[Candidate]) -> Candidate | None:
    """The best fixed-K speculative challenger: the first chosen (candidates come best first)."""
    for cand in candidates:
        config = cand.config
        if cand.role != BASELINE and config.num_speculative_tokens and config.k_schedule is None:
            return cand
    return None


def study_derivation(ledger: Ledger, space: SearchSpace, candidates: Sequence[Candidate]) -> Derivation | None:
    """What the study's load levels derive (``None``: the space derives no schedule)."""
    if not space.derive_schedule:
        return None
    template = _template(candidates)
    evidence = []
    for trial in ledger.measured_complete():
        config = ledger.config(trial)
        if config is not None:
            evidence.append((config, ledger.restarts(trial)))
    return derive_schedule(space.workload.levels, space.workload.objective, evidence,
                           None if template is None else template.config)


def with_schedule(ledger: Ledger, space: SearchSpace, candidates: list[Candidate]) -> list[Candidate]:
    """``candidates`` with the derived schedule challenger before the baseline (unchanged when none is derived,
    the space cannot run it, or it is one of them already)."""
    derivation = study_derivation(ledger, space, candidates)
    if derivation is None or derivation.schedule is None or derivation.template is None:
        return candidates
    template = _template(candidates)
    assert template is not None
    params: TrialParams = {**dict(template.config.params), SCHEDULE_PARAM: derivation.schedule.to_list()}
    params[P.K] = derivation.schedule.max_k
    try:
        config = space.config_from_params(params)
    except (Infeasible, KeyError):
        return candidates
    if any(c.config.key() == config.key() for c in candidates):
        return candidates
    base = [i for i, c in enumerate(candidates) if c.role == BASELINE]
    at = base[0] if base else len(candidates)
    return [*candidates[:at], Candidate(CANDIDATE, config), *candidates[at:]]
